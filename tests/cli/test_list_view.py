"""How ``flink-gpu list`` shows what it found (flink_gpu.cli.list_view): persistence mode per GPU, in
its JSON and under its state table, on the bundled NVML simulator."""

import json
import subprocess
import sys

from flink_gpu import simulator

from conftest import child_env

SPEC = {"devices": [{}, {"persistence_mode": "disabled"}, {"not_supported": ["persistence_mode"]},
                    {"persistence_mode": "disabled"}]}


def flink_gpu_list(tmp_path, *args):
    """``flink-gpu list`` on SPEC's simulated host, with a coordination file of its own."""
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "list", "--file", str(tmp_path / "coordination"),
                           *args], env=child_env(**simulator.environment(spec=SPEC)), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_list_json_gives_each_gpus_persistence_mode_and_null_where_the_driver_cannot_say(tmp_path):
    doc = json.loads(flink_gpu_list(tmp_path, "--json"))
    assert [g["persistence_mode"] for g in doc["gpus"]] == ["enabled", "disabled", None, "disabled"]


def test_list_says_the_first_claim_on_a_gpu_without_persistence_mode_may_take_seconds(tmp_path):
    out = flink_gpu_list(tmp_path)
    [off] = [line.strip() for line in out.splitlines() if "persistence mode is off" in line]
    assert off.startswith("GPU 1, 3: persistence mode is off: the first claim on each GPU may take seconds")
    assert "the driver initialises a GPU when a process first asks for its handle" in off
    assert "nvidia-persistenced" in off
    assert "GPU 2: persistence mode unknown (the driver cannot say)." in out


def test_list_says_nothing_of_persistence_when_every_gpu_has_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "list", "--file", str(tmp_path / "coordination")],
                          env=child_env(**simulator.environment(devices=2)), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "persistence mode" not in proc.stdout
