"""flink_gpu.simulator's limits are the C++ simulator's (csrc/simulator): the Python side checks
them before the simulator runs, so each pair is held together by what the simulator does."""

import json
import re
import subprocess

import pytest

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


@pytest.mark.parametrize("device, key, words", [
    ({"utilization": 101}, "utilization", "must be a whole number (0..100)"),
    ({"utilization": 2.5}, "utilization", "must be a whole number (0..100)"),
    ({"temperature": -1}, "temperature", "must be a whole number (0..200)"),
    ({"temperature": "hot"}, "temperature", "must be a whole number (0..200)"),
    ({"power": -0.001}, "power", "must be a number of watts (0..4294967.295)"),
    ({"power": 4294967.296}, "power", "must be a number of watts (0..4294967.295)"),
    ({"power": "250W"}, "power", "must be a number of watts (0..4294967.295)"),
    ({"power": True}, "power", "must be a number of watts (0..4294967.295)"),
    ({"not_supported": ["fan"]}, "not_supported", "utilization, temperature, power"),
    ({"health": {"state_error": "GPU_IS_LOST", "state_error_after_s": -1}}, "health.state_error_after_s",
     "must be a whole number"),
    ({"health": {"state_error": "GPU_IS_LOST", "state_error_after_s": 1.5}}, "health.state_error_after_s",
     "must be a whole number"),
])
def test_a_bad_live_reading_is_rejected_naming_the_key_by_both_checkers(discovery_exe, tmp_path, device, key, words):
    with pytest.raises((TypeError, ValueError), match=re.escape(f"devices[0].{key}")) as raised:
        simulator.environment(spec={"devices": [device]})
    assert words in str(raised.value)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [device]}))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"devices[0].{key}" in proc.stderr and words in proc.stderr


def test_the_live_readings_at_their_limits_are_accepted_by_both(discovery_exe, tmp_path):
    spec = {"devices": [{"utilization": 100, "temperature": 200, "power": 4294967.295,
                         "not_supported": ["utilization", "temperature", "power"]},
                        {"utilization": 0, "temperature": 0, "power": 0, "no_permission": ["power"]}]}
    simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr


def test_a_mig_instance_has_no_live_readings_to_pin():
    with pytest.raises(ValueError, match=re.escape("devices[0].mig.instances[0] has unknown keys ['power']")):
        simulator.environment(spec={"devices": [{"mig": {"mode": "enabled", "instances": [{"slot": 0, "power": 1}]}}]})
