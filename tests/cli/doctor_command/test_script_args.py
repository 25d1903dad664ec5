"""doctor's check of the discovery script's arguments (flink_gpu.cli.doctor_command.script_args)."""

from support.cli import findings, gpu_conf, only, run_doctor, write_script
from support.interop import find_discovery_executable


def test_doctor_docs_typo_and_unknown_args(tmp_path):
    exe = find_discovery_executable()
    doc = run_doctor(
        tmp_path, gpu_conf(discovery_script_path=exe, discovery_script_args="--enable-coordination --verbose"), expect=1
    )
    error = only(doc, "args", "error")
    assert "'--enable-coordination'" in error["message"]
    assert "coordination mode is OFF" in error["message"]
    assert "'--enable-coordination-mode'" in error["fix"]
    warning = only(doc, "args", "warning")
    assert "'--verbose'" in warning["message"]
    # a custom script's arguments are its own business
    custom = write_script(tmp_path / "amd.sh", 'echo "0"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=custom, discovery_script_args="--enable-coordination"))
    assert not findings(doc, "args", "error")
    only(doc, "args", "note")


# doctor: --coordination-file without a value is the stock script's default file, a warning


def test_doctor_coordination_file_without_a_value_is_a_warning_naming_the_default_file(tmp_path):
    from flink_gpu import coordination

    doc = run_doctor(
        tmp_path,
        gpu_conf(discovery_script_path=find_discovery_executable(), discovery_script_args="--coordination-file"),
        "--taskmanagers-per-host",
        "1",
        expect=0,
    )
    warning = only(doc, "args", "warning")
    assert "external-resource.gpu.param.discovery-script.args" in warning["message"]
    assert coordination.DEFAULT_PATH in warning["message"]
    assert "--coordination-file /path/of/file" in warning["fix"]
    assert not findings(doc, "args", "error")
    assert "gave GPU 0" in only(doc, "script-run", "ok")["message"]


# doctor: an abbreviated flag is the error that coordination mode is off


def test_doctor_abbreviated_coordination_flag_is_an_error_saying_coordination_is_off(tmp_path):
    doc = run_doctor(
        tmp_path,
        gpu_conf(discovery_script_path=find_discovery_executable(), discovery_script_args="--enable-coord"),
        "--taskmanagers-per-host",
        "1",
        expect=1,
    )
    error = only(doc, "args", "error")
    assert "'--enable-coord'" in error["message"] and "coordination mode is OFF" in error["message"]
    assert error["fix"] == (
        "Write '--enable-coordination-mode' instead of '--enable-coord' in "
        "external-resource.gpu.param.discovery-script.args."
    )
