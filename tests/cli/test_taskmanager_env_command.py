"""`flink-gpu taskmanager-env` (flink_gpu.cli.taskmanager_env_command): the environment a TaskManager is started
with."""

import os
import subprocess
import sys

from conftest import child_env
from flink_gpu import simulator
from support.cli import cli_json, flink_gpu_on_path
from support.interop import find_discovery_executable


def test_taskmanager_env_gives_a_process_started_after_eval_the_simulated_gpus(tmp_path):
    shell = flink_gpu_on_path(tmp_path, child_env())
    discovery = find_discovery_executable()
    script = f'eval "$(flink-gpu --simulate 2 taskmanager-env)" && {discovery} 2 && {discovery} 3; echo "$PYTHONPATH"'
    proc = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert lines[0] == "0,1", proc.stdout + proc.stderr  # the two simulated GPUs
    assert "Could not get enough GPU resources" in proc.stdout + proc.stderr  # and no third
    import sysconfig

    assert sysconfig.get_path("purelib") in lines[-1].split(os.pathsep)  # thread mode's Python finds pemja
    doc = cli_json("taskmanager-env", env=shell)
    assert doc["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "FLINK_GPU_NVML_LIBRARY" not in doc["environment"]  # the host's driver
    # a shell on the simulator already: not twice on the library path; a relative PYTHONPATH made absolute
    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [{}]}')
    env = {**shell, **simulator.environment(devices=2), "PYTHONPATH": shell["PYTHONPATH"] + os.pathsep + "rel"}
    doc = cli_json("--simulate-spec", "spec.json", "taskmanager-env", env=env, cwd=tmp_path)
    library_dir = os.path.dirname(simulator.library_path())
    assert doc["environment"]["LD_LIBRARY_PATH"].split(os.pathsep).count(library_dir) == 1
    assert str(tmp_path / "rel") in doc["environment"]["PYTHONPATH"].split(os.pathsep)
    assert doc["environment"]["FLINK_GPU_SIM_SPEC"] == str(spec) and doc["environment"]["FLINK_GPU_SIM_DEVICES"] == ""


def test_the_flink_gpu_this_shell_imports_comes_before_the_venvs_installed_copy(tmp_path):
    # a checkout on PYTHONPATH (here: a directory holding this flink_gpu) over a venv that also has one
    # installed: the TaskManager's workers must import the checkout's, the code the shell runs
    import flink_gpu

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "flink_gpu").symlink_to(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
    env = {**child_env(), "PYTHONPATH": str(checkout)}
    code = "from flink_gpu.deploy.taskmanager_env import taskmanager_environment as e; print(e()['PYTHONPATH'])"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    import sysconfig

    paths = proc.stdout.strip().split(os.pathsep)
    assert paths[0] == str(checkout), paths
    assert sysconfig.get_path("purelib") in paths[1:]
