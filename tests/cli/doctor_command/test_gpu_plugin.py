"""doctor's check of a GPU resource as its TaskManager builds the driver (flink_gpu.cli.doctor_command.gpu_plugin): the
Java plugin's jar and script, our factory's backends and options."""

import json

import pytest

from conftest import child_env
from support.cli import JAVA_FACTORY, cli, findings, gpu_conf, only, run_doctor, write_script
from support.interop import find_discovery_executable


def flink_home(tmp_path, with_plugin):
    home = tmp_path / "flink"
    (home / "conf").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "opt" / "external-resource-gpu").mkdir(parents=True)
    if with_plugin:
        plugin = home / "plugins" / "external-resource-gpu"
        plugin.mkdir(parents=True)
        (plugin / "flink-external-resource-gpu-2.3.0.jar").write_bytes(b"PK")
        write_script(plugin / "nvidia-gpu-discovery.sh", 'echo "0"\n')
    return home


def test_doctor_plugin_jar_and_default_script_missing(tmp_path):
    home = flink_home(tmp_path, with_plugin=False)
    (home / "conf" / "config.yaml").write_text(
        "external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n"
        f"    driver-factory:\n      class: {JAVA_FACTORY}\n"
    )
    proc = cli("doctor", "--simulate", "4", "--json", env=child_env(FLINK_CONF_DIR=str(home / "conf")))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["configuration"] == str(home / "conf" / "config.yaml")
    assert doc["flink_home"] == str(home)  # found from the conf directory
    plugin = only(doc, "plugin", "error")
    assert plugin["fix"] == f"cp -r {home}/opt/external-resource-gpu {home}/plugins/"
    script = only(doc, "script", "error")
    assert script["message"] == (
        f"The gpu discovery script does not exist in path {home}/plugins/external-resource-gpu/nvidia-gpu-discovery.sh."
    )
    assert "cp -r" in script["fix"] and find_discovery_executable() in script["fix"]


def test_doctor_plugin_installed(tmp_path):
    home = flink_home(tmp_path, with_plugin=True)
    (home / "conf" / "flink-conf.yaml").write_text(gpu_conf())
    proc = cli(
        "doctor", "--simulate", "4", "--taskmanagers-per-host", "1", "--json", env=child_env(FLINK_HOME=str(home))
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "flink-external-resource-gpu-2.3.0.jar" in only(doc, "plugin", "ok")["message"]
    assert "nvidia-gpu-discovery.sh 1 null` gave GPU 0" in only(doc, "script-run", "ok")["message"]


def test_doctor_nvml_backend_and_gpu_count(tmp_path):
    text = gpu_conf(amount=2, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=0)
    assert "nvml backend" in only(doc, "driver", "ok")["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]
    assert not findings(doc, "script-run")

    text = gpu_conf(amount=5, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    doc = run_doctor(tmp_path, text, expect=1)
    assert "is 5, but this host has 4 GPUs" in only(doc, "gpu-count", "error")["message"]

    # nvml mode without a driver
    env = child_env(FLINK_GPU_NVML_LIBRARY=str(tmp_path / "missing.so"))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"))
    proc = cli("doctor", conf, "--json", env=env)
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "driver", "error")
    assert "missing.so" in error["message"] and "Install the NVIDIA driver" in error["fix"]


def test_doctor_flags_gpu_params_the_plugin_does_not_read(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script) + (
        "external-resource.gpu.param.discovery-script-args: --enable-coordination-mode\n"
        "external-resource.gpu.param.discovery-mode: nvml\n"
        "external-resource.gpu.param.nvml-timeout: 2 s\n"
        "external-resource.gpu.param.health-checks: all\n"
    )
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=0)
    warning = only(doc, "params", "warning")  # every option of ours is known: only the typo is warned
    assert "param.discovery-script-args is not an option" in warning["message"]
    assert warning["fix"] == "Did you mean external-resource.gpu.param.discovery-script.args?"
    # with Flink's Java factory, flink_gpu's own options do nothing in the TaskManager; bind_gpus reads some
    notes = {f["message"].split(" ")[0]: f["message"] for f in findings(doc, "params") if f["level"] == "note"}
    plugin_ignores = "is a flink_gpu option: Flink's Java plugin ignores it and always runs the discovery script"
    assert notes["external-resource.gpu.param.discovery-mode"].endswith(f"{plugin_ignores}.")
    for key in ("nvml-timeout", "health-checks"):
        assert notes[f"external-resource.gpu.param.{key}"].endswith(
            f"{plugin_ignores}, but bind_gpus reads it from the TaskManager's configuration."
        )


def test_doctor_fails_a_malformed_option_that_bind_gpus_reads_of_a_java_plugin_taskmanager(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script) + "external-resource.gpu.param.metrics.interval: soon\n"
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=1)
    error = only(doc, "params", "error")
    assert error["message"].startswith(
        "Invalid value 'soon' for key 'external-resource.gpu.param.metrics.interval': expected a duration of at least"
    )
    assert error["message"].endswith(
        "Flink's Java plugin does not read it, but bind_gpus does, and refuses to bind with it."
    )
    assert error["fix"] == f"Correct it in {tmp_path / 'flink-conf.yaml'}."


@pytest.mark.parametrize("discovery", ["custom", "flink-gpu-discovery"])
def test_doctor_says_once_that_a_malformed_nvml_timeout_flag_of_the_args_breaks_what_reads_it(
    tmp_path, good_script, discovery
):
    """A script that passes --nvml-timeout by: bind_gpus still reads it, and refuses; flink-gpu-discovery reads it
    and fails, which is the one finding about it."""
    script = good_script if discovery == "custom" else find_discovery_executable()
    text = gpu_conf(discovery_script_path=script, discovery_script_args="--nvml-timeout 3q")
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=1)
    naming = [(f["check"], f["level"]) for f in doc["findings"] if "'3q' for --nvml-timeout" in f["message"]]
    assert naming == ([("params", "error")] if discovery == "custom" else [("script-run", "error")]), doc["findings"]


# doctor on a Java-plugin configuration ignores discovery-script.timeout, as Flink does


def test_doctor_java_plugin_run_does_not_read_our_timeout_option(tmp_path):
    import json

    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 1\n"
        "external-resource.gpu.driver-factory.class: "
        "org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
        f"external-resource.gpu.param.discovery-script.path: {script}\n"
        # not an option of Flink's Java plugin: a TaskManager never reads it
        "external-resource.gpu.param.discovery-script.timeout: soon\n"
    )
    proc = cli("doctor", conf, "--json", "--simulate", "2", "--taskmanagers-per-host", "1")
    doc = json.loads(proc.stdout)
    assert "error" not in doc, doc
    run = [f for f in doc["findings"] if f["check"] == "script-run"]
    assert [f["level"] for f in run] == ["ok"], run
    assert any(f["check"] == "params" and "discovery-script.timeout" in f["message"] for f in doc["findings"])


# doctor: a bad flink_gpu option does not hide the checks of the script and its arguments


def test_doctor_java_plugin_resource_with_bad_flink_gpu_options_is_still_checked(tmp_path):
    # Flink's Java plugin reads neither discovery-mode nor discovery-script.timeout
    doc = run_doctor(
        tmp_path,
        gpu_conf(
            discovery_script_path=find_discovery_executable(),
            discovery_script_args="--enable-coordination",
            discovery_mode="sometimes",
            discovery_script_timeout="soon",
        ),
        "--taskmanagers-per-host",
        "1",
        expect=1,
    )
    assert "'--enable-coordination-mode'" in only(doc, "args", "error")["fix"]
    assert "gave GPU 0" in only(doc, "script-run", "ok")["message"]
    assert not findings(doc, "driver")


def test_doctor_python_resource_with_a_bad_mode_still_checks_args_and_gpus(tmp_path):
    doc = run_doctor(
        tmp_path,
        gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="sometimes", discovery_script_args="--verbose"),
        expect=1,
    )
    assert "'sometimes'" in only(doc, "driver", "error")["message"]
    assert "'--verbose'" in only(doc, "args", "warning")["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("busy-gpus: sometimes", "'busy-gpus': expected one of avoid, exclude, ignore"),
        (
            "health-checks: all,-inform",
            "for key 'health-checks': '-inform' is not a health check; use all, inforom, "
            "remapped-rows, ecc, recovery-action, fabric, retired-pages, nvlink",
        ),
    ],
)
def test_doctor_reports_a_bad_option_of_ours_and_still_checks_the_gpus(tmp_path, line, expected):
    conf = gpu_conf(factory="flink_gpu.GPUDriverFactory") + f"external-resource.gpu.param.{line}\n"
    doc = run_doctor(tmp_path, conf, expect=1)
    error = only(doc, "driver", "error")
    assert expected in error["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]
