#!/usr/bin/env python3
"""What the GPU-state checks (docs/design.md §9.1) add per retrieve and per coordinated claim.

    PYTHONPATH=src python benchmarks/state_cost.py [--counts 1,8,64] [--base-src DIR] [--write FILE]

For each GPU count, a child process against the simulator with that many GPUs measures this
tree's ``retrieve_resource_info(n)`` and coordinated cycle (new driver, retrieve, close), the
one native call that reads every GPU's state and the ranking, the same with a process on every
GPU (the process-tree walk), and ``flink-gpu-discovery n`` in coordination mode. ``--base-src``
names the ``src/`` of a build without the checks (e.g. ``git archive main`` built with
tools/dev_build.sh): the same rows are measured there in the same run, so the difference is what
the checks cost. ``--write`` replaces the ``figures:state`` section of FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_figures  # beside this script, and on pytest's pythonpath
from bench_figures import driver_costs, fmt_pair, machine, per_call, per_round, run_ok, table, write_section

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

ROWS = [
    ("retrieve", "`retrieve_resource_info(n)`, in-process"),
    ("driver_cycle", "coordinated: new driver, `retrieve_resource_info(n)`, close"),
    ("exe_coord", "`flink-gpu-discovery n`, coordination mode (process)"),
]
STATE_ROWS = [
    ("states", "of which `states()`: every GPU's health, memory and processes (one native call)"),
    ("rank", "`policy.discover(library, 0, indices)`: the same read, judged and ranked in one call"),
    ("states_busy", "`states()` with an unrelated process on every GPU (the /proc ancestry walk)"),
]


def child(n: int, with_checks: bool) -> dict:
    from support.interop import find_discovery_executable

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flink-gpu-coordination"
        out = driver_costs(n, path)
        expect = ",".join(map(str, range(n)))
        argv = [find_discovery_executable(), str(n), "--enable-coordination-mode", "--coordination-file", str(path)]
        out["exe_coord"] = per_round(run_ok(argv, os.environ, expect), lambda: path.write_text(""))
    if with_checks:
        from flink_gpu import nvml as faces
        from flink_gpu import policy

        library = faces.open_library()
        pid = os.getpid()
        states = library.states(pid, None)
        assert len(states) == n and all(s.health == "ok" for s in states)
        indices = [s.gpu_index for s in states]
        out["states"] = per_call(lambda: library.states(pid, None))
        out["rank"] = per_call(lambda: policy.discover(library, 0, indices, owner=pid))
    return out


def child_busy(n: int) -> dict:
    """``states()`` when every GPU lists one process (an unrelated ``sleep``): NVML's process
    lists plus the walk of its /proc ancestry."""
    from flink_gpu import nvml as faces

    library = faces.open_library()
    states = library.states(os.getpid(), None)
    assert all(s.busy for s in states), "every GPU should list the foreign process"
    return {"states_busy": per_call(lambda: library.states(os.getpid(), None))}


def _measure(kind: str, n: int, src: str, spec: "dict | None" = None) -> dict:
    from flink_gpu import simulator

    env = dict(os.environ, **simulator.environment(devices=None if spec else n, spec=spec))
    if spec:
        env.pop("FLINK_GPU_SIM_DEVICES", None)
    # the tree measured first; then baseline_pynvml and support (tests/), as pytest's pythonpath has
    paths = (src, str(BENCH), str(REPO / "tests"), os.environ.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    proc = subprocess.run([sys.executable, __file__, "_child", kind, str(n)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"measuring {kind} {n} with {src} failed:\n{proc.stderr}")
    print(f"  {kind} {n} ({src}): done", file=sys.stderr)
    return {key: tuple(pair) for key, pair in json.loads(proc.stdout).items()}


def figures(counts: "list[int]", base_src: "str | None") -> str:
    import flink_gpu

    src = str(Path(flink_gpu.__file__).resolve().parent.parent)
    header = ["per call, min (median)"] + [f"{n} GPU{'s' if n > 1 else ''}" for n in counts]
    rows = []
    sleeper = subprocess.Popen(["sleep", "3600"])
    try:
        ours, base, busy = {}, {}, {}
        for n in counts:
            ours[n] = _measure("checks", n, src)
            if base_src:
                base[n] = _measure("base", n, base_src)
            spec = {
                "devices": [
                    {"processes": [{"pid": sleeper.pid, "used_memory": 2**30, "kind": "compute"}]} for _ in range(n)
                ]
            }
            busy[n] = _measure("busy", n, src, spec)
    finally:
        sleeper.kill()
        sleeper.wait()
    for key, text in ROWS:
        rows.append([text + ", with the checks"] + [fmt_pair(ours[n][key]) for n in counts])
        if base_src:
            rows.append([text + ", before them"] + [fmt_pair(base[n][key]) for n in counts])
    for key, text in STATE_ROWS:
        source = busy if key == "states_busy" else ours
        rows.append([text] + [fmt_pair(source[n][key]) for n in counts])
    return table(header, rows) + f"\n\nMachine: {machine()}."


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="figures")
    parser.add_argument("kind", nargs="?")
    parser.add_argument("n", nargs="?", type=int)
    parser.add_argument("--counts", type=bench_figures.counts, default=[1, 8, 64])
    parser.add_argument("--base-src", help="src/ of a build without the checks")
    parser.add_argument("--write", type=Path, help="replace the figures:state section of FILE")
    args = parser.parse_args(argv)
    if args.mode == "_child":
        from support.simulated import use_simulator

        if "FLINK_GPU_SIM_DEVICES" in os.environ:
            use_simulator(int(os.environ["FLINK_GPU_SIM_DEVICES"]))
        if args.kind == "busy":
            print(json.dumps(child_busy(args.n)))
        else:
            print(json.dumps(child(args.n, with_checks=args.kind == "checks")))
        return
    text = figures(args.counts, args.base_src)
    if args.write:
        write_section(args.write, "state", text)
    else:
        print(text)


if __name__ == "__main__":
    main()
