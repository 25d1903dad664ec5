#!/usr/bin/env python3
"""The topology a host reports and what reading it costs a claim (issue 46), for tools/real_gpu_check.sh.

    tools/topology_times.py [--runs N] [--simulate PROFILE]

Prints ``nvidia-smi topo -m`` (where nvidia-smi is found), then times ``flink-gpu-discovery 2`` in
coordination mode (a fresh process and an empty coordination file each run) with ``--topology prefer`` (the
default: the candidates' topology is read once, the best joined pair taken) and ``--topology ignore``
(Flink's index order, no topology read), alternating, and prints each one's median, the pair each took and
the difference: what the topology read costs a process. A host of one GPU reads no topology (a claim of one
never does): it says so. ``--simulate PROFILE`` runs the same on a simulator profile (CI, a host without a GPU).
Read-only for the GPUs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each policy (default 5)")
    parser.add_argument("--simulate", metavar="PROFILE", help="a simulator profile instead of the real driver")
    args = parser.parse_args(argv)

    from flink_gpu import simulator
    from flink_gpu.nvml import open_library
    from support.interop import find_discovery_executable

    env = dict(os.environ)
    if args.simulate:
        env.update(simulator.environment(profile=args.simulate))
        os.environ.update(env)  # this process's NVML too
    elif shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60)
        print("$ nvidia-smi topo -m")
        print(done.stdout.rstrip() or done.stderr.rstrip())
        print()
    else:
        print("nvidia-smi: not found (no topology matrix to print)\n")

    gpus = len(open_library().devices().devices)
    if gpus < 2:
        print(f"{gpus} GPU(s): a claim of two is not possible, and a claim of one reads no topology.")
        return 0
    discovery = find_discovery_executable()
    times: dict[str, list[float]] = {"prefer": [], "ignore": []}
    chosen: dict[str, set[str]] = {"prefer": set(), "ignore": set()}
    with tempfile.TemporaryDirectory(prefix="topology-times-") as scratch:
        for run in range(args.runs):
            for policy in ("prefer", "ignore") if run % 2 == 0 else ("ignore", "prefer"):
                path = os.path.join(scratch, f"coordination-{policy}-{run}")
                argv_ = [discovery, "2", "--enable-coordination-mode", "--coordination-file", path]
                start = time.perf_counter()
                done = subprocess.run(
                    argv_ + ["--topology", policy], env=env, capture_output=True, text=True, timeout=120
                )
                times[policy].append(time.perf_counter() - start)
                if done.returncode != 0:
                    print(f"flink-gpu-discovery 2 --topology {policy}: exit {done.returncode}: {done.stderr.strip()}")
                    return 1
                chosen[policy].add(done.stdout.strip())
    host = f"{gpus} GPUs" + (f" ({args.simulate})" if args.simulate else "")
    print(f"flink-gpu-discovery 2, {args.runs} runs each, {host}:")
    for policy in ("prefer", "ignore"):
        median = statistics.median(times[policy]) * 1e3
        print(f"  --topology {policy}: median {median:.1f} ms, took {' / '.join(sorted(chosen[policy]))}")
    cost = (statistics.median(times["prefer"]) - statistics.median(times["ignore"])) * 1e3
    print(f"  the topology read (prefer - ignore): {cost:+.1f} ms per process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
