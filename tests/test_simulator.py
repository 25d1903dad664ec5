"""flink_gpu.simulator's limits are the C++ simulator's (csrc/simulator): the Python side checks
them before the simulator runs, so each pair is held together by what the simulator does."""

import json
import subprocess

from flink_gpu import simulator
from flink_gpu.regular_files import MAX_FILE_SIZE
from conftest import child_env


def discover(discovery_exe, **env):
    """flink-gpu-discovery 1 against the simulator, configured by ``env`` alone (no Python check)."""
    environment = child_env(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), **env)
    return subprocess.run([discovery_exe, "1"], env=environment, capture_output=True, text=True,
                          timeout=60)


def test_max_devices_is_the_most_the_simulator_takes(discovery_exe):
    proc = discover(discovery_exe, FLINK_GPU_SIM_DEVICES=str(simulator.MAX_DEVICES))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr
    proc = discover(discovery_exe, FLINK_GPU_SIM_DEVICES=str(simulator.MAX_DEVICES + 1))
    assert proc.returncode == 1 and proc.stdout == ""
    assert (f"FLINK_GPU_SIM_DEVICES={simulator.MAX_DEVICES + 1} is not a device count "
            f"(0..{simulator.MAX_DEVICES})") in proc.stderr


def test_the_spec_size_limit_is_the_one_for_every_file(discovery_exe, tmp_path):
    spec = tmp_path / "spec.json"
    document = json.dumps({"devices": [{}, {}]}).encode()
    spec.write_bytes(document + b" " * (MAX_FILE_SIZE - len(document)))  # exactly the limit
    assert len(simulator.read_spec(spec)["devices"]) == 2
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr
    with open(spec, "ab") as handle:
        handle.write(b" ")
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"cannot use FLINK_GPU_SIM_SPEC={spec}: it is larger than 16 MiB" in proc.stderr
    assert MAX_FILE_SIZE == 16 * 2**20  # the size the simulator's message names
