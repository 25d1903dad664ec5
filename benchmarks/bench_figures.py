#!/usr/bin/env python3
"""Regenerates the figures of benchmarks/README.md.

    PYTHONPATH=src python benchmarks/bench_figures.py suite --runs 3   # the benchmark suite, 3 runs: ratios
    PYTHONPATH=src python benchmarks/bench_figures.py ratios RUN.json... # ratios of saved --benchmark-json runs
    PYTHONPATH=src python benchmarks/bench_figures.py gpus               # cost against the number of GPUs
    PYTHONPATH=src python benchmarks/bench_figures.py entries            # ... against coordination-file lines
    PYTHONPATH=src python benchmarks/bench_figures.py all --write benchmarks/README.md

Each prints Markdown; ``--write FILE`` replaces the section between ``<!-- figures:NAME -->`` and
``<!-- /figures:NAME -->`` in FILE instead. Scaling measurements run in a child process per point
(NVML is initialised once per process, so each device count needs its own), against the NVML
simulator. Times are the minimum and the median over repeats: on a shared machine the minimum is
the cost of the work, the median what a busy neighbour leaves of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"

# target: (description, slow benchmark, fast benchmark, bound, "≥" or "≤"): slow ÷ fast, by minimum
# and by median, must be at least / at most the bound
TARGETS = [
    ("in-process retrieve vs stock script", "test_process_stock_script", "test_retrieve_flink_gpu_nvml", 1000, "≥"),
    ("in-process retrieve vs pynvml", "test_retrieve_pynvml", "test_retrieve_flink_gpu_nvml", 2, "≥"),
    (
        "`coordination` claim + release ÷ the syscall floor",
        "test_claim_release_flink_gpu_coordination_api",
        "test_claim_release_syscall_floor",
        1.25,
        "≤",
    ),
    (
        "new coordinated driver + retrieve(2) + close ÷ the syscall floor",
        "test_claim_release_flink_gpu_driver",
        "test_claim_release_syscall_floor",
        1.5,
        "≤",
    ),
    (
        "`binding.bind` (process holder) + release ÷ the syscall floor of a 1-GPU claim",
        "test_bind_release_process_holder",
        "test_bind_reference_syscall_floor_one_gpu",
        1.5,
        "≤",
    ),
    (
        "`binding.bind` (thread-mode slot) + release ÷ the syscall floor of a 1-GPU claim",
        "test_bind_release_thread_mode_slot",
        "test_bind_reference_syscall_floor_one_gpu",
        1.5,
        "≤",
    ),
    (
        "`pyflink.bind_gpus` (process mode, with its TaskManager lookup) + release ÷ that floor",
        "test_bind_gpus_release_pyflink_process_mode",
        "test_bind_reference_syscall_floor_one_gpu",
        1.5,
        "≤",
    ),
    (
        "flink-gpu-discovery vs stock script, coordination mode",
        "test_process_stock_script_coordinated",
        "test_process_flink_gpu_discovery_coordinated",
        5,
        "≥",
    ),
]

# (description, contention benchmark, the floor's, required factor): throughput ÷ the floor's
THROUGHPUT_TARGETS = [
    (
        "8 processes: new driver, retrieve, close ÷ the floor's throughput",
        "test_contention[flink_gpu-8]",
        "test_contention[floor-8]",
        0.7,
    ),
    (
        "8 processes: `coordination` claim + release ÷ the floor's throughput",
        "test_contention[coordination_api-8]",
        "test_contention[floor-8]",
        0.7,
    ),
]


# ---- formatting -----------------------------------------------------------------------------------


def fmt_time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def fmt_pair(pair) -> str:
    low, mid = pair
    return f"{fmt_time(low)} ({fmt_time(mid)})"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    load = os.getloadavg()[0]
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load:.1f} when it ended, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


# ---- the suite and its ratios ---------------------------------------------------------------------


def run_suite(runs: int, json_dir: Path) -> list[Path]:
    files = []
    for i in range(runs):
        out = json_dir / f"run{i + 1}.json"
        subprocess.run(
            [sys.executable, "-m", "pytest", str(BENCH), "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"],
            cwd=REPO,
            check=True,
            env=_src_env(),
            stdout=sys.stderr,
        )
        files.append(out)
    return files


def load_run(path: Path) -> dict[str, dict]:
    data = json.loads(Path(path).read_text())
    return {b["name"]: b for b in data["benchmarks"]}


def ratios(files: list[Path]) -> str:
    runs = [load_run(f) for f in files]
    header = ["target", "needs"] + [f"run {i + 1}: min (median)" for i in range(len(runs))] + ["holds"]
    rows = []

    def verdict(held):
        return "yes" if held and all(held) else "no" if not any(held) else f"{sum(held)} of {len(held)} runs"

    for text, slow, fast, bound, sense in TARGETS:
        cells, held = [], []
        for run in runs:
            if slow not in run or fast not in run:
                cells.append("n/a")
                continue
            by_min = run[slow]["stats"]["min"] / run[fast]["stats"]["min"]
            by_median = run[slow]["stats"]["median"] / run[fast]["stats"]["median"]
            digits = 1 if bound >= 10 else 2
            cells.append(f"{by_min:,.{digits}f}× ({by_median:,.{digits}f}×)")
            held.append(all(r >= bound if sense == "≥" else r <= bound for r in (by_min, by_median)))
        rows.append([text, f"{sense} {bound}×"] + cells + [verdict(held)])
    for text, ours, floor, factor in THROUGHPUT_TARGETS:
        cells, held = [], []
        for run in runs:
            if ours not in run or floor not in run:
                cells.append("n/a")
                continue
            ratio = run[ours]["extra_info"]["throughput_per_s"] / run[floor]["extra_info"]["throughput_per_s"]
            cells.append(f"{ratio:.2f}× (mean of the rounds)")
            held.append(ratio >= factor)
        rows.append([text, f"≥ {factor}×"] + cells + [verdict(held)])
    out = [table(header, rows), ""]

    contention = sorted(
        (n for n in {n for run in runs for n in run} if n.startswith("test_contention[")),
        key=lambda n: (n.split("[")[1].split("-")[0], int(n.rstrip("]").split("-")[1])),
    )
    header = ["implementation", "processes"] + [f"run {i + 1}: cycles/s, p50, p99" for i in range(len(runs))]
    rows = []
    for name in contention:
        impl, processes = name[len("test_contention[") : -1].rsplit("-", 1)
        cells = []
        for run in runs:
            extra = run[name]["extra_info"] if name in run else None
            cells.append(
                "n/a"
                if extra is None
                else f"{extra['throughput_per_s']:,}/s, {extra['p50_us']} µs, {extra['p99_us']} µs"
            )
        rows.append([impl.replace("_", "-"), processes] + cells)
    out += [
        "Contention: N processes at once, each claiming 1 GPU and releasing it, 400 times.",
        "",
        table(header, rows),
        "",
    ]

    names = sorted(
        (n for n in {n for run in runs for n in run} if n not in contention),
        key=lambda n: (runs[0].get(n, {}).get("group") or "", n),
    )
    header = ["group", "benchmark"] + [f"run {i + 1}: min (median)" for i in range(len(runs))]
    rows = []
    for name in names:
        group = next(run[name]["group"] for run in runs if name in run) or ""
        cells = []
        for run in runs:
            b = run.get(name)
            if b is None:
                cells.append("n/a")
                continue
            cell = fmt_pair((b["stats"]["min"], b["stats"]["median"]))
            extra = b.get("extra_info") or {}
            if "import_time_us" in extra:
                cell += f"; -X importtime {extra['import_time_us'] / 1000:.1f} ms"
            cells.append(cell)
        rows.append([group, name.replace("test_", "", 1)] + cells)
    out.append(table(header, rows))
    out.append("")
    out.append(f"Machine: {machine()}.")
    return "\n".join(out)


def _src_env(**extra) -> dict[str, str]:
    env = dict(os.environ, **extra)
    import flink_gpu

    root = str(Path(flink_gpu.__file__).resolve().parent.parent)
    # the children import baseline_pynvml (benchmarks/) and support (tests/), as pytest's pythonpath does
    paths = (root, str(BENCH), str(REPO / "tests"), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


# ---- timing helpers (run in the children) ---------------------------------------------------------


def per_call(fn, *, repeats: int = 5, budget: float = 0.25):
    """(min, median) seconds per call of ``fn``, each repeat a loop sized to ~budget/repeats."""
    fn()
    loops, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= budget / repeats / 4 or loops >= 1 << 20:
            break
        loops *= 4
    loops = max(1, int(loops * (budget / repeats) / max(elapsed, 1e-9)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops)
    return min(samples), statistics.median(samples)


def per_round(fn, setup=None, *, rounds: int = 7):
    """(min, median) seconds of ``fn`` over ``rounds`` rounds, ``setup`` untimed before each."""
    samples = []
    for _ in range(rounds + 1):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples = samples[1:]  # the first warms caches
    return min(samples), statistics.median(samples)


def run_ok(argv, env, expect: str | None = None):
    def run():
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0 or (expect is not None and proc.stdout.strip() != expect):
            raise RuntimeError(f"{argv[0]} gave {proc.returncode}: {proc.stdout!r} {proc.stderr!r}")

    return run


# ---- scaling with the number of GPUs --------------------------------------------------------------

GPU_ROWS = [
    ("first_retrieve", "first `retrieve_resource_info(n)` in a process (NVML init + enumeration)"),
    ("retrieve", "`retrieve_resource_info(n)`, in-process, not coordinated"),
    ("pynvml_retrieve", "pynvml: the same n devices with properties"),
    ("driver_cycle", "coordinated: new driver, `retrieve_resource_info(n)`, close"),
    ("pynvml_cycle", "pynvml + flock: claim n, release"),
    ("exe", "`flink-gpu-discovery n` (process)"),
    ("stock", "stock `nvidia-gpu-discovery.sh n` (process)"),
    ("exe_coord", "`flink-gpu-discovery n`, coordination mode"),
    ("stock_coord", "stock script `n`, coordination mode"),
]


def driver_costs(n: int, path: Path) -> dict:
    """Per call, on a simulated host with ``n`` GPUs: ``retrieve``, an in-process
    ``retrieve_resource_info(n)``; ``driver_cycle``, a new driver in coordination mode on ``path``,
    retrieve n, close (benchmarks/state_cost.py measures the same rows)."""
    from flink_gpu import GPUDriver

    driver = GPUDriver({"discovery-mode": "nvml"})
    assert len(driver.retrieve_resource_info(n)) == n
    out = {"retrieve": per_call(lambda: driver.retrieve_resource_info(n))}
    config = {
        "discovery-mode": "nvml",
        "discovery-script.args": f"--enable-coordination-mode --coordination-file {path}",
    }

    def driver_cycle():
        d = GPUDriver(config)
        assert len(d.retrieve_resource_info(n)) == n
        d.close()

    out["driver_cycle"] = per_call(driver_cycle)
    return out


def child_gpus(n: int) -> dict:
    import baseline_pynvml
    from support.interop import executable_stock_script, fake_nvidia_smi, find_discovery_executable

    out = {}
    samples = []
    for _ in range(5):  # NVML initialises once per process: a fresh interpreter per sample
        code = (
            "import time, sys; t = time.perf_counter()\n"
            "from flink_gpu import GPUDriver\n"
            f"d = GPUDriver({{'discovery-mode': 'nvml'}}); assert len(d.retrieve_resource_info({n})) == {n}\n"
            "print(time.perf_counter() - t)"
        )
        proc = subprocess.run([sys.executable, "-c", code], env=_src_env(), capture_output=True, text=True, check=True)
        samples.append(float(proc.stdout))
    out["first_retrieve"] = (min(samples), statistics.median(samples))

    out["pynvml_retrieve"] = per_call(lambda: baseline_pynvml.retrieve(n))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flink-gpu-coordination"
        out.update(driver_costs(n, path))
        out["pynvml_cycle"] = per_call(
            lambda: (baseline_pynvml.claim(n, str(path)), baseline_pynvml.release(str(path)))
        )
        expect = ",".join(map(str, range(n)))
        exe = find_discovery_executable()
        stock = executable_stock_script(Path(tmp) / "stock")
        smi_env = dict(os.environ, PATH=f"{fake_nvidia_smi(Path(tmp) / 'smi', n)}{os.pathsep}{os.environ['PATH']}")
        coord = ["--enable-coordination-mode", "--coordination-file", str(path)]
        empty = lambda: path.write_text("")  # noqa: E731
        out["exe"] = per_round(run_ok([exe, str(n)], os.environ, expect))
        out["stock"] = per_round(run_ok([str(stock), str(n)], smi_env, expect))
        out["exe_coord"] = per_round(run_ok([exe, str(n), *coord], os.environ, expect), empty)
        out["stock_coord"] = per_round(run_ok([str(stock), str(n), *coord], smi_env, expect), empty)
    return out


def gpus(counts: list[int]) -> str:
    results = {n: _in_child("gpus", n, devices=n) for n in counts}
    header = ["per call, min (median)"] + [f"{n} GPU{'s' if n > 1 else ''}" for n in counts]
    rows = [[text] + [fmt_pair(results[n][key]) for n in counts] for key, text in GPU_ROWS]
    return table(header, rows) + f"\n\nMachine: {machine()}."


# ---- scaling with the lines in the coordination file ----------------------------------------------

ENTRY_ROWS = [
    ("api_cycle", "`coordination.claim(2)` + `release()`"),
    ("driver_cycle", "coordinated: new driver, `retrieve_resource_info(2)`, close"),
    ("pynvml_cycle", "pynvml + flock: claim 2, release"),
    ("exe_coord", "`flink-gpu-discovery 2`, coordination mode (process)"),
    ("stock_coord", "stock script `2`, coordination mode (process)"),
]


def child_entries(lines: int) -> dict:
    import baseline_pynvml
    from flink_gpu import GPUDriver, coordination
    from support.interop import executable_stock_script, fake_nvidia_smi, find_discovery_executable

    live = subprocess.Popen(["sleep", "3600"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        # other GPUs' lines (indices 4 and up), every other one owned by a live process, the
        # rest by a dead one; GPUs 0-3 are free, so every claim scans the file and appends
        content = "".join(f"{4 + j} {live.pid if j % 2 else gone.pid}\n" for j in range(lines))
        out = {}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "flink-gpu-coordination"
            path.write_text(content)
            indices = ["0", "1", "2", "3"]
            config = {
                "discovery-mode": "nvml",
                "discovery-script.args": f"--enable-coordination-mode --coordination-file {path}",
            }

            def driver_cycle():
                d = GPUDriver(config)
                assert len(d.retrieve_resource_info(2)) == 2
                d.close()

            out["api_cycle"] = per_call(
                lambda: (coordination.claim(2, indices, path=path), coordination.release(path=path))
            )
            out["driver_cycle"] = per_call(driver_cycle)
            out["pynvml_cycle"] = per_call(
                lambda: (baseline_pynvml.claim(2, str(path)), baseline_pynvml.release(str(path)))
            )
            assert path.read_text() == content, "a cycle left the file changed"
            exe = find_discovery_executable()
            stock = executable_stock_script(Path(tmp) / "stock")
            smi_env = dict(os.environ, PATH=f"{fake_nvidia_smi(Path(tmp) / 'smi', 4)}{os.pathsep}{os.environ['PATH']}")
            coord = ["--enable-coordination-mode", "--coordination-file", str(path)]
            reset = lambda: path.write_text(content)  # noqa: E731
            out["exe_coord"] = per_round(run_ok([exe, "2", *coord], os.environ, "0,1"), reset)
            out["stock_coord"] = per_round(run_ok([str(stock), "2", *coord], smi_env, "0,1"), reset)
        return out
    finally:
        live.kill()
        live.wait()


def entries(counts: list[int]) -> str:
    results = {k: _in_child("entries", k, devices=4) for k in counts}
    header = ["per call, min (median)"] + [f"{k} lines" for k in counts]
    rows = [[text] + [fmt_pair(results[k][key]) for k in counts] for key, text in ENTRY_ROWS]
    return table(header, rows) + f"\n\nMachine: {machine()}."


# ---- plumbing -------------------------------------------------------------------------------------


def _in_child(kind: str, value: int, devices: int) -> dict:
    from flink_gpu import simulator

    env = _src_env(**simulator.environment(devices=devices))
    proc = subprocess.run(
        [sys.executable, __file__, "_child", kind, str(value)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"measuring {kind} {value} failed:\n{proc.stderr}")
    print(f"  {kind} {value}: done", file=sys.stderr)
    return {key: tuple(pair) for key, pair in json.loads(proc.stdout).items()}


def write_section(path: Path, name: str, text: str) -> None:
    content = path.read_text()
    begin, end = f"<!-- figures:{name} -->", f"<!-- /figures:{name} -->"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        raise SystemExit(f"{path} has no {begin} ... {end} section")
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", content))


def counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("suite", help="run the benchmark suite RUNS times, print the ratios")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json-dir", type=Path, help="keep the runs' JSON here (default: a temp dir)")
    p = sub.add_parser("ratios", help="ratios from saved pytest-benchmark JSON files")
    p.add_argument("files", nargs="+", type=Path)
    p = sub.add_parser("gpus", help="cost against the number of simulated GPUs")
    p.add_argument("--counts", type=counts, default=[1, 2, 4, 8, 16, 32, 64])
    p = sub.add_parser("entries", help="cost against the lines in the coordination file")
    p.add_argument("--counts", type=counts, default=[0, 10, 100, 1000])
    p = sub.add_parser("all", help="suite, gpus and entries")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json-dir", type=Path)
    for p in sub.choices.values():
        p.add_argument("--write", type=Path, help="replace the figures sections of this file")
    child = sub.add_parser("_child")
    child.add_argument("kind")
    child.add_argument("value", type=int)
    args = parser.parse_args(argv)

    if args.command == "_child":
        from support.simulated import use_simulator

        use_simulator(int(os.environ["FLINK_GPU_SIM_DEVICES"]))
        result = child_gpus(args.value) if args.kind == "gpus" else child_entries(args.value)
        print(json.dumps(result))
        return

    def emit(name: str, text: str) -> None:  # each section as soon as it is measured
        if args.write:
            write_section(args.write, name, text)
        else:
            print(f"## {name}\n\n{text}\n", flush=True)

    if args.command in ("suite", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            json_dir = args.json_dir or Path(tmp)
            json_dir.mkdir(parents=True, exist_ok=True)
            emit("ratios", ratios(run_suite(args.runs, json_dir)))
    if args.command == "ratios":
        emit("ratios", ratios(args.files))
    if args.command in ("gpus", "all"):
        emit("gpus", gpus(getattr(args, "counts", None) or [1, 2, 4, 8, 16, 32, 64]))
    if args.command in ("entries", "all"):
        emit("entries", entries(getattr(args, "counts", None) or [0, 10, 100, 1000]))


if __name__ == "__main__":
    main()
