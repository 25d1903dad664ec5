"""doctor's check of the environment a TaskManager runs the discovery script with
(flink_gpu.cli.doctor_command.taskmanager_env)."""

import json
import os
import subprocess
import sys
import sysconfig

from conftest import child_env
from flink_gpu import simulator
from support.cli import cli, findings, flink_gpu_on_path, gpu_conf, only
from support.interop import find_discovery_executable


def test_doctor_simulate_fails_unless_the_taskmanagers_shell_has_that_simulator_and_says_how(tmp_path):
    conf = tmp_path / "conf" / "config.yaml"
    conf.parent.mkdir()
    conf.write_text(
        gpu_conf(
            amount=2,
            discovery_script_path=find_discovery_executable(),
            discovery_script_args="--enable-coordination-mode",
        )
    )
    shell = flink_gpu_on_path(tmp_path, child_env())  # no simulator: a TaskManager started here gets no GPU
    proc = cli("doctor", conf, "--simulate", "4", "--json", env=shell)
    assert proc.returncode == 1, proc.stdout
    error = only(json.loads(proc.stdout), "taskmanager-env", "error")
    assert "--simulate 4 simulates GPUs for doctor only" in error["message"]
    assert "no FLINK_GPU_NVML_LIBRARY" in error["message"]
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in error["fix"]
    # the fix as printed, then doctor as a TaskManager's shell would run it: nothing left to fix
    script = f"{error['fix'].split(': ', 1)[1].split(';')[0]}; flink-gpu doctor {conf}"
    proc = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problem found" in proc.stdout
    assert "runs the discovery script with FLINK_GPU_NVML_LIBRARY=" in proc.stdout
    assert "(the simulator: 4 GPUs)" in proc.stdout


def test_doctor_says_what_a_thread_mode_taskmanager_lacks(tmp_path):
    home = tmp_path / "flink"
    (home / "lib").mkdir(parents=True)
    (home / "opt").mkdir()
    (home / "opt" / "flink-python-2.3.0.jar").write_bytes(b"")
    (home / "conf").mkdir()
    (home / "conf" / "config.yaml").write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    env = child_env(**simulator.environment(devices=4))
    env.pop("CUDA_DEVICE_ORDER", None)
    # a shell whose PYTHONPATH does not name the virtualenv (child_env names it where flink_gpu is installed
    # there, as in CI; a dev tree's src/ stays, the interpreter finds the rest itself)
    site = os.path.realpath(sysconfig.get_path("purelib"))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.realpath(p) != site
    )
    doc = json.loads(cli("doctor", home / "conf", "--json", env=env).stdout)
    notes = {f["message"].split(":")[0]: f for f in findings(doc, "taskmanager-env", "note")}
    jar = notes[f"{home / 'lib'} has no flink-python jar"]
    assert jar["fix"] == f"cp {home / 'opt' / 'flink-python-2.3.0.jar'} {home / 'lib'}/"
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID in this shell" in notes
    if sys.prefix != sys.base_prefix:  # a virtualenv's packages reach the JVM's Python only through PYTHONPATH
        assert any("No module named 'pemja'" in f["message"] for f in notes.values())


def test_a_taskmanager_library_that_does_not_load_is_one_failure_never_followed_by_an_ok(tmp_path):
    """The discovery's run fails to load the shell's NVML: that failure is the one finding about the library."""
    missing = tmp_path / "no-driver" / "libnvidia-ml.so.1"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    proc = cli(
        "doctor", conf, "--taskmanagers-per-host", "1", "--json", env=child_env(FLINK_GPU_NVML_LIBRARY=str(missing))
    )
    doc = json.loads(proc.stdout)
    about_library = [f for f in doc["findings"] if str(missing) in f["message"]]
    assert [(f["check"], f["level"]) for f in about_library] == [("script-run", "error")], doc["findings"]
    assert findings(doc, "taskmanager-env", "ok") == []


def test_the_taskmanagers_nvml_is_the_one_its_discovery_loads(tmp_path):
    """flink_gpu's NVML backend with nvml.library-path loads that library, whatever the shell says: no finding
    about the shell's (here one that does not load)."""
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        gpu_conf(factory="flink_gpu.GPUDriverFactory")
        + f"external-resource.gpu.param.nvml.library-path: {simulator.library_path()}\n"
    )
    shell = child_env(FLINK_GPU_SIM_DEVICES="4", FLINK_GPU_NVML_LIBRARY=str(tmp_path / "libnvidia-ml.so.1"))
    proc = cli("doctor", conf, "--taskmanagers-per-host", "1", "--json", env=shell)
    assert proc.returncode == 0, proc.stdout
    doc = json.loads(proc.stdout)
    assert f"NVML loaded from {simulator.library_path()}" in only(doc, "driver", "ok")["message"]
    assert not [f for f in doc["findings"] if "libnvidia-ml" in f["message"] and f["check"] == "taskmanager-env"]
