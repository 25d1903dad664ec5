"""doctor's check of the discovery script (flink_gpu.cli.doctor_command.script): present, executable, one run of it, and
fixes that run as printed."""

import json
import subprocess
import time

from conftest import child_env
from flink_gpu import simulator
from support.cli import cli, findings, flink_gpu_on_path, gpu_conf, only, run_doctor, write_script
from support.interop import find_discovery_executable


def test_doctor_script_missing_or_not_executable(tmp_path):
    missing = tmp_path / "nope.sh"
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=missing), expect=1)
    error = only(doc, "script", "error")
    assert str(missing) in error["message"] and "Correct external-resource.gpu.param." in error["fix"]
    assert not findings(doc, "script-run")

    plain = write_script(tmp_path / "plain.sh", "echo 0\n", executable=False)
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=plain), expect=1)
    error = only(doc, "script", "error")
    assert error["message"] == f"The discovery script {plain} is not executable."
    assert error["fix"] == f"chmod +x {plain}"

    # the Python factory reports it while building its driver
    doc = run_doctor(tmp_path, gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_script_path=plain), expect=1)
    assert only(doc, "driver", "error")["fix"] == f"chmod +x {plain}"


def test_doctor_script_failing(tmp_path):
    failing = write_script(
        tmp_path / "fail.sh",
        """\
        echo "nvidia-smi: command not found" >&2
        exit 3
    """,
    )
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=failing), expect=1)
    error = only(doc, "script-run", "error")
    assert "exit status 3" in error["message"] and f"`{failing} 1 null`" in error["message"]
    assert "nvidia-smi: command not found" in error["message"]
    assert "Install the NVIDIA driver" in error["fix"]

    empty = write_script(tmp_path / "empty.sh", "exit 0\n")
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=empty), expect=1)
    assert "printed no GPU index" in only(doc, "script-run", "error")["message"]

    chatty = write_script(tmp_path / "chatty.sh", 'echo "0,1"\necho "extra"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=chatty, discovery_script_args="''"))
    assert "printed 2 lines" in only(doc, "script-run", "warning")["message"]
    assert "gave GPU 0, 1" in only(doc, "script-run", "ok")["message"]


def test_doctor_script_timeout(tmp_path):
    hanging = write_script(tmp_path / "hang.sh", "sleep 30\n")
    started = time.monotonic()
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=hanging, discovery_script_timeout="1 s"), expect=1)
    assert time.monotonic() - started < 20
    assert "executed for over 1000 ms" in only(doc, "script-run", "error")["message"]


def test_doctor_on_a_host_without_nvml_says_how_a_java_taskmanager_gets_a_library_or_the_simulator(tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    doc = json.loads(
        cli(
            "doctor", conf, "--json", env=child_env(FLINK_GPU_NVML_LIBRARY=str(tmp_path / "no-libnvidia-ml.so.1"))
        ).stdout
    )
    error = only(doc, "script-run", "error")
    assert "Could not load the NVIDIA Management Library" in error["message"]
    assert "FLINK_GPU_NVML_LIBRARY" in error["fix"] and "does not read nvml.library-path" in error["fix"]
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in error["fix"]


def test_doctor_no_free_gpu_fix_names_the_configurations_coordination_file(tmp_path):
    coord = tmp_path / "my-coordination"  # Flink splits the args on whitespace: no path with a space
    conf = tmp_path / "config.yaml"
    conf.write_text(
        gpu_conf(
            discovery_script_path=find_discovery_executable(),
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        )
    )
    shell = flink_gpu_on_path(tmp_path, child_env(**simulator.environment(devices=0)))  # a host without GPUs
    doc = json.loads(cli("doctor", conf, "--json", env=shell).stdout)
    fix = only(doc, "script-run", "error")["fix"]
    assert f"`flink-gpu coordination clean --file {coord}`" in fix, fix
    listed = subprocess.run(["bash", "-c", fix.split("`")[1] + " --json"], env=shell, capture_output=True, text=True)
    assert json.loads(listed.stdout)["coordination"]["path"] == str(coord)  # the command runs as printed


def test_doctor_run_it_by_hand_command_runs_as_printed(tmp_path):
    # named as the stock script, so doctor gives it a scratch coordination file; it fails on its own
    # unless the file it is given can be created
    script = write_script(tmp_path / "nvidia-gpu-discovery.sh", 'touch "$4" || exit 9\necho broken; exit 3\n')
    doc = run_doctor(
        tmp_path, gpu_conf(discovery_script_path=script, discovery_script_args="--enable-coordination-mode"), expect=1
    )
    fix = only(doc, "script-run", "error")["fix"]
    assert fix.startswith("Run it by hand: ")
    proc = subprocess.run(
        ["bash", "-c", fix.removeprefix("Run it by hand: ")], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 3 and proc.stdout == "broken\n", (fix, proc.stderr)
    # and the command a passing run shows
    (tmp_path / "ok").mkdir()
    good = write_script(tmp_path / "ok" / "nvidia-gpu-discovery.sh", 'touch "$4" || exit 9\necho 0\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good, discovery_script_args="--enable-coordination-mode"))
    command = only(doc, "script-run", "ok")["message"].split("`")[1]
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "0\n", (command, proc.stderr)
