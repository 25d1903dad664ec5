#!/usr/bin/env python3
"""The topology a host reports and what reading it costs a claim (issue 46), for tools/real_gpu_check.sh.

    tools/topology_times.py [--runs N] [--simulate PROFILE]

Prints ``nvidia-smi topo -m`` (where nvidia-smi is found) and ``flink-gpu list --topology`` (what flink-gpu
reads), then times ``flink-gpu-discovery 2`` in coordination mode (a fresh process each run), interleaved:
``--topology ignore`` (Flink's index order, no topology read), ``--topology prefer`` as the first claim on a host
(a new coordination file: the whole topology read, the copy left beside it) and as a later claim (the copy
adopted); each one's median, the pair each took, and what the topology costs the first and a later claim. A
host of one GPU reads no topology (a claim of one never does): it says so. ``--simulate PROFILE`` runs the same
on a simulator profile (CI, a host without a GPU).
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
    listed = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list", "--topology"], env=env, capture_output=True, text=True
    )
    print("$ flink-gpu list --topology")
    print((listed.stdout or listed.stderr).rstrip())
    print()
    discovery = find_discovery_executable()
    # ignore: no topology; first: a claim on a host without the copy (a fresh coordination file: it reads every
    # GPU's part and leaves the copy); later: a claim that finds the copy (the same file, emptied)
    kinds = ("ignore", "first", "later")
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    chosen: dict[str, set[str]] = {kind: set() for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="topology-times-") as scratch:
        kept = os.path.join(scratch, "coordination-kept")
        for run in range(args.runs):
            for kind in kinds if run % 2 == 0 else tuple(reversed(kinds)):
                path = kept if kind == "later" else os.path.join(scratch, f"coordination-{kind}-{run}")
                if kind == "later" and not os.path.exists(kept + ".topology"):
                    subprocess.run(
                        [discovery, "2", "--enable-coordination-mode", "--coordination-file", kept],
                        env=env,
                        capture_output=True,
                        timeout=120,
                    )
                open(path, "w").close()
                argv_ = [discovery, "2", "--enable-coordination-mode", "--coordination-file", path]
                policy = "ignore" if kind == "ignore" else "prefer"
                start = time.perf_counter()
                done = subprocess.run(
                    argv_ + ["--topology", policy], env=env, capture_output=True, text=True, timeout=120
                )
                times[kind].append(time.perf_counter() - start)
                if done.returncode != 0:
                    print(f"flink-gpu-discovery 2 --topology {policy}: exit {done.returncode}: {done.stderr.strip()}")
                    return 1
                chosen[kind].add(done.stdout.strip())
    host = f"{gpus} GPUs" + (f" ({args.simulate})" if args.simulate else "")
    print(f"flink-gpu-discovery 2 --enable-coordination-mode, {args.runs} runs each, {host}:")
    label = {
        "ignore": "--topology ignore",
        "first": "--topology prefer, first claim on the host (reads the topology, leaves the copy)",
        "later": "--topology prefer, a later claim (adopts the copy)",
    }
    for kind in kinds:
        median = statistics.median(times[kind]) * 1e3
        print(f"  {label[kind]}: median {median:.1f} ms, took {' / '.join(sorted(chosen[kind]))}")
    for kind in ("first", "later"):
        cost = (statistics.median(times[kind]) - statistics.median(times["ignore"])) * 1e3
        print(f"  the topology's cost to a {kind} claim: {cost:+.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
