"""The claim path on the simulator's latency model (docs/design.md §9.1 "Query plan", issue 22), side by
side in one run, per ``busy-gpus`` value:

* ``latency-claim``: a coordinated claim + release of 2 of 8 GPUs through a new ``GPUDriver`` in a
  worker process that has claimed before (NVML initialised, first handles paid), as a TaskManager's
  Python worker does for each task;
* ``latency-discovery``: ``flink-gpu-discovery 2 --enable-coordination-mode`` as a process, as Flink
  runs it: NVML's start-up (8 first handles) and one claim.

The host is an 8-GPU spec with the latencies measured on real drivers (issue 22): a process list
4.5 ms, power 0.4 ms, memory info 11.6 µs, a GPU's first handle in a process 200 ms, every call under
the driver's one lock. The session's own simulator (conftest.py: 4 instant GPUs) is not used: each
host runs in processes of its own. How many queries a claim makes is asserted by
tests/test_nvml_discovery.py (test_a_claim_asks_each_needed_query_once_per_gpu_and_no_more), not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flink_gpu
from flink_gpu import simulator

PACKAGE_ROOT = str(Path(flink_gpu.__file__).resolve().parent.parent)
GPUS = 8
#: issue 22's latency model (ms per call of each query family)
LATENCY_MS = {"processes": 4.5, "power": 0.4, "memory": 0.0116, "first_handle": 200}
BUSY_GPUS = ("avoid", "exclude", "ignore")


@pytest.fixture(scope="module")
def latency_env(tmp_path_factory) -> dict[str, str]:
    spec = tmp_path_factory.mktemp("latency") / "h100-like-8.json"
    spec.write_text(json.dumps({"devices": [{} for _ in range(GPUS)], "latency_ms": LATENCY_MS, "driver_lock": True}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env.update(simulator.environment(spec=str(spec)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


# A worker that claims and releases on each line it reads, answering with the GPUs it got.
WORKER = r"""
import sys
from flink_gpu import GPUDriver
config = {"discovery-mode": "nvml", "busy-gpus": sys.argv[1],
          "discovery-script.args": "--enable-coordination-mode --coordination-file " + sys.argv[2]}
def claim():
    with GPUDriver(config) as driver:
        return ",".join(sorted(info.index for info in driver.retrieve_resource_info(2)))
claim()  # NVML's start-up and the enumeration, as a worker's first task pays them
print("ready", flush=True)
for line in sys.stdin:
    print(claim(), flush=True)
"""


class ClaimWorker:
    def __init__(self, env: dict[str, str], busy_gpus: str, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, busy_gpus, str(path)],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout.readline() == "ready\n"

    def claim(self) -> str:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.mark.parametrize("busy_gpus", BUSY_GPUS)
@pytest.mark.benchmark(group="latency-claim")
def test_latency_claim_release_2_of_8(benchmark, latency_env, tmp_path, busy_gpus):
    worker = ClaimWorker(latency_env, busy_gpus, tmp_path / "coord")
    try:
        assert benchmark.pedantic(worker.claim, rounds=10, iterations=1, warmup_rounds=1) == "0,1"
    finally:
        worker.close()


@pytest.mark.parametrize("busy_gpus", BUSY_GPUS)
@pytest.mark.benchmark(group="latency-discovery")
def test_latency_flink_gpu_discovery_2_of_8(benchmark, latency_env, discovery_exe, tmp_path, busy_gpus):
    coord = tmp_path / "coord"
    command = [
        discovery_exe,
        "2",
        "--enable-coordination-mode",
        "--coordination-file",
        str(coord),
        "--busy-gpus",
        busy_gpus,
    ]

    def run() -> str:
        coord.write_text("")  # a claim from an empty file each time
        done = subprocess.run(command, env=latency_env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0) == "0,1\n"
