"""What the NVML deadline's hand-off (csrc/nvml/deadline.*, docs/design.md §9.5) costs per warm
``retrieve_resource_info(2)`` on the simulator with 4 GPUs: wall time, context switches and futex
calls, for one or more builds side by side in one run (each a ``src`` directory with the native
parts built into it, e.g. this tree's and an older one's)::

    python benchmarks/handoff_cost.py src /tmp/old/src [--retrieves 4000] [--rounds 5]

Each round runs every build once, interleaved, in a fresh process: it warms up, then times
``--retrieves`` retrieves and reads the context switches of all its threads (/proc/self/task/*/status)
before and after. The futex calls come from ``strace -f -c -e trace=futex`` over a run with the
retrieves less one without them (the start-up's own futex calls cancel out), when strace is installed.
Medians per build, and each build's ratio to the first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import glob, json, sys, time
from flink_gpu import GPUDriver
n = int(sys.argv[1])
driver = GPUDriver({"discovery-mode": "nvml"})
assert driver.mode == "nvml", driver.reason
for _ in range(200):
    driver.retrieve_resource_info(2)

def switches():
    total = 0
    for status in glob.glob("/proc/self/task/*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total

before, start = switches(), time.perf_counter()
for _ in range(n):
    got = driver.retrieve_resource_info(2)
elapsed, after = time.perf_counter() - start, switches()
assert n == 0 or sorted(i.index for i in got) == ["0", "1"]
print(json.dumps({"us": elapsed / max(n, 1) * 1e6, "switches": (after - before) / max(n, 1)}))
"""


SIMULATOR_ENVIRONMENT = (
    "import json; from flink_gpu import simulator; print(json.dumps(simulator.environment(devices=4)))"
)


def environment(src: str) -> dict[str, str]:
    """The children's environment: ``src``'s flink_gpu on a 4-GPU simulator (asked of that build, in a child)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env["PYTHONPATH"] = os.path.abspath(src)
    sim = subprocess.run(
        [sys.executable, "-c", SIMULATOR_ENVIRONMENT], env=env, capture_output=True, text=True, check=True
    )
    env.update(json.loads(sim.stdout))
    return env


def timed(src: str, retrieves: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(retrieves)], env=environment(src), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def futex_calls(src: str, retrieves: int) -> int:
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run(
            ["strace", "-f", "-c", "-e", "trace=futex", "-o", out.name, sys.executable, "-c", CHILD, str(retrieves)],
            env=environment(src),
            capture_output=True,
            check=True,
        )
        text = out.read()
    match = re.search(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?futex\s*$", text, re.M)
    return int(match.group(1)) if match else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", help="src directories, the first is the reference")
    parser.add_argument("--retrieves", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in args.builds}
    for _ in range(args.rounds):
        for build in args.builds:
            runs[build].append(timed(build, args.retrieves))
    futexes: dict[str, float] = {}
    if shutil.which("strace"):
        for build in args.builds:
            futexes[build] = (futex_calls(build, args.retrieves) - futex_calls(build, 0)) / args.retrieves
    reference = args.builds[0]

    def median(build: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[build])

    def figure(value: float, reference_value: float, digits: int) -> str:
        return f"{value:8.{digits}f} ({value / max(reference_value, 1e-9):.2f}×)"

    print(f"{'build':40} {'µs/retrieve':>16} {'ctx sw/retrieve':>16} {'futex/retrieve':>16}")
    for build in args.builds:
        line = f"{build:40} {figure(median(build, 'us'), median(reference, 'us'), 1)}"
        line += f" {figure(median(build, 'switches'), median(reference, 'switches'), 2)}"
        if build in futexes:
            line += f" {figure(futexes[build], futexes[reference], 2)}"
        print(line)


if __name__ == "__main__":
    main()
