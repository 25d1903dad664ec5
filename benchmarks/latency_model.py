#!/usr/bin/env python3
"""GPU discovery on the simulator's latency model (issue 32), every path side by side in one interleaved run.

    PYTHONPATH=src:tests python benchmarks/latency_model.py --rounds 5 [--write benchmarks/README.md]

The host: 8 idle, healthy GPUs joined as the h100-hgx-8 profile's (18 NVLinks each to four NVSwitches, a
PCIe switch and root port per GPU, two NUMA nodes), every NVML call under the driver's one lock
(``driver_lock``), on five latency profiles (:data:`PROFILES`; in one the GPUs' memory shows use, so that
their process lists are read). The paths (:data:`PATHS`), each a claim of 1 or 2 GPUs from
an empty coordination file in coordination mode (a claim of 2 under ``topology: prefer``, the default, reads
the topology once per process; the ``-ignore`` paths of :data:`TOPOLOGY_PATHS`, claims of 2 only, read none):

* ``stock``: Flink's ``nvidia-gpu-discovery.sh`` as Flink runs it, with ``standin/nvidia-smi.c`` first on
  ``PATH``: an nvidia-smi built against the simulator that makes only init, count, and handle + index
  per GPU (a real one makes more): a lower bound for the stock path;
* ``discovery-<busy-gpus>``: ``flink-gpu-discovery`` as a process;
* ``first-<busy-gpus>``: the in-process driver's first call in a fresh interpreter (after ``import
  flink_gpu``): a new coordinated ``GPUDriver``, ``retrieve_resource_info``, ``close`` (NVML's load and
  start-up included), timed inside that process;
* ``warm-<busy-gpus>``: the same call in a worker that has made one before (NVML started, first handles
  paid), as a TaskManager's Python worker makes it for each later task, timed inside the worker.

After one untimed pass over the profiles that take milliseconds (the files every path runs into the page
cache) and one claim of two per path on the others (the first claim on a host reads the whole topology and
leaves the copy every later claim adopts, docs/design.md §9.6; what that first claim costs is
``tools/topology_times.py``'s), a round runs every (profile, amount, path) once, in an order shuffled per
round, so that a busy neighbour slows every path alike; the figures are the medians over the rounds. NVML calls are the
simulator's counters of the process that made them (``FLINK_GPU_SIM_COUNTERS_FILE`` for the processes,
``simulator.counters()`` in the interpreters), with the time the driver lock was held.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
STANDIN_SOURCE = BENCH_DIR / "standin" / "nvidia-smi.c"
GPUS = 8
AMOUNTS = (1, 2)
#: rounds of a full run: with persistence mode off each process pays 8 first handles (1.6 s)
ROUNDS = 5
BUSY_GPUS = ("avoid", "ignore")
KINDS = ("discovery", "first", "warm")
#: the paths with ``topology: ignore`` (busy-gpus avoid): claims of 2 only (a claim of 1 reads no topology)
TOPOLOGY_PATHS = tuple(f"{kind}-avoid-ignore" for kind in KINDS)
PATHS = ("stock",) + tuple(f"{kind}-{busy}" for kind in KINDS for busy in BUSY_GPUS) + TOPOLOGY_PATHS
#: the query families the issue's "other queries" cover: tens of µs each
_OTHER_MS = 0.02


def _latencies(process_list_ms: float) -> dict[str, float]:
    from flink_gpu import simulator

    latency = {family: _OTHER_MS for family in simulator.QUERY_FAMILIES}
    latency.update(
        processes=process_list_ms,
        memory=0.0116,  # measured on an H100 (csrc/simulator/profiles/README.md)
        power=0.4,
        first_handle=2,  # a GPU's first handle in a process, with persistence mode on
        first_handle_without_persistence=200,  # ... and with it off: the driver initialises the GPU
    )
    return latency


def _joined() -> list[dict]:
    """Per GPU the ``pcie`` and ``nvlinks`` of the h100-hgx-8 profile (an NVSwitch host of 8 GPUs)."""
    here = Path(__file__).resolve().parent.parent / "csrc" / "simulator" / "profiles" / "h100-hgx-8.json"
    devices = json.loads(here.read_text())["devices"]
    return [{key: device[key] for key in ("pcie", "nvlinks")} for device in devices[:GPUS]]


def _spec(latency_ms: dict[str, float] | None, persistence: str = "enabled", memory_used: int = 0) -> dict:
    device = {"persistence_mode": persistence, "memory_used": memory_used}
    spec: dict = {"devices": [{**device, **joined} for joined in _joined()], "driver_lock": True}
    if latency_ms is not None:
        spec["latency_ms"] = latency_ms
    return spec


#: profile name: the simulator spec of the 8-GPU host
PROFILES = {
    "instant": _spec(None),
    "persistence on": _spec(_latencies(0.1)),
    "persistence on, 4.5 ms process list": _spec(_latencies(4.5)),
    # memory in use but no process listed: the GPUs whose process lists are read (docs/design.md §9.1)
    "4.5 ms process list, memory in use": _spec(_latencies(4.5), memory_used=2**30),
    "persistence off": _spec(_latencies(0.1), persistence="disabled"),
}
#: the profiles a smoke run (pytest --benchmark-disable) takes: each path once, in well under a second each;
#: "persistence off" differs only in its first-handle latency (8 × 200 ms per process) and is left out there
SMOKE_PROFILES = (
    "instant",
    "persistence on",
    "persistence on, 4.5 ms process list",
    "4.5 ms process list, memory in use",
)


def expected(amount: int) -> str:
    """What every path answers for a claim of ``amount`` from an empty coordination file."""
    return ",".join(str(i) for i in range(amount))


@dataclass
class Sample:
    seconds: float
    calls: dict[str, int]  # NVML function: calls, all devices together
    lock_ns: int  # the time the simulated driver lock was held


def _totals(counted: dict) -> tuple[dict[str, int], int]:
    calls = {function: sum(per_device.values()) for function, per_device in counted["calls"].items()}
    return calls, int(counted["driver_lock_held_ns"])


def build_standin(directory: Path) -> Path:
    """``standin/nvidia-smi.c`` compiled into ``directory/nvidia-smi``, linked against the simulator's
    ``libnvidia-ml.so.1`` (found at run time by its soname, as the real nvidia-smi finds the driver's)."""
    from flink_gpu import simulator

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        compiler = "cc"
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "nvidia-smi"
    proc = subprocess.run(
        [compiler, "-O2", "-o", str(out), str(STANDIN_SOURCE), simulator.library_path()],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"Cannot compile {STANDIN_SOURCE} with {compiler}: {proc.stderr.strip()}")
    return out


# A fresh interpreter's first claim (argv: busy-gpus, coordination file, amount, topology): its time and
# counters.
FIRST = r"""
import json, sys, time
from flink_gpu import GPUDriver, simulator
config = {"discovery-mode": "nvml", "busy-gpus": sys.argv[1], "topology": sys.argv[4],
          "discovery-script.args": "--enable-coordination-mode --coordination-file " + sys.argv[2]}
start = time.perf_counter()
with GPUDriver(config) as driver:
    got = ",".join(sorted((info.index for info in driver.retrieve_resource_info(int(sys.argv[3]))), key=int))
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "indices": got, "counters": simulator.counters()}))
"""

# A worker that has claimed once (argv: busy-gpus, coordination file, topology), then claims the amount of
# each line it reads: the time and counters of that claim alone.
WARM = r"""
import json, sys, time
from flink_gpu import GPUDriver, simulator
config = {"discovery-mode": "nvml", "busy-gpus": sys.argv[1], "topology": sys.argv[3],
          "discovery-script.args": "--enable-coordination-mode --coordination-file " + sys.argv[2]}
def claim(amount):
    with GPUDriver(config) as driver:
        return ",".join(sorted((info.index for info in driver.retrieve_resource_info(amount)), key=int))
claim(2)  # NVML's start-up, first handles and topology read, as a worker's first task pays them
print("ready", flush=True)
for line in sys.stdin:
    simulator.reset_counters()
    start = time.perf_counter()
    got = claim(int(line))
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "indices": got, "counters": simulator.counters()}), flush=True)
"""


class WarmWorker:
    def __init__(self, env: dict[str, str], busy_gpus: str, coordination_file: Path, topology: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WARM, busy_gpus, str(coordination_file), topology],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()
        if line != "ready\n":
            raise RuntimeError(f"the warm worker did not start (exit {self.proc.wait(timeout=60)}): {line!r}")

    def claim(self, amount: int) -> dict:
        self.proc.stdin.write(f"{amount}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm worker ended (exit {self.proc.wait(timeout=60)})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _parts(path: str) -> tuple[str, str, str]:
    """(kind, busy-gpus, topology) of a path's name: "warm-avoid-ignore" is ("warm", "avoid", "ignore")."""
    parts = path.split("-")
    return parts[0], parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else "prefer"


def measured(path: str, amount: int) -> bool:
    """Whether ``path`` is run for ``amount``: the topology-ignore paths only for claims of 2."""
    return amount >= 2 or path not in TOPOLOGY_PATHS


def _package_root() -> str:
    import flink_gpu

    return str(Path(flink_gpu.__file__).resolve().parent.parent)


def _discovery_executable() -> str:
    from support.interop import find_discovery_executable

    return find_discovery_executable()


class Host:
    """One simulated host (a profile) with everything its paths need: environments, coordination files,
    the stock script and stand-in, warm workers (started by :meth:`start`)."""

    def __init__(self, name: str, spec: dict, workdir: Path, stock_script: Path, standin: Path) -> None:
        from flink_gpu import simulator
        from support.interop import stock_env

        self.name = name
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
        base["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)
        self.counters_file = self.dir / "counters.json"
        self.env = {**base, **simulator.environment(spec=spec)}
        self.process_env = {**self.env, "FLINK_GPU_SIM_COUNTERS_FILE": str(self.counters_file)}
        # the stock script's: no LD_PRELOAD (support.interop.stock_env says why), the stand-in first on PATH
        self.stock_env = {k: v for k, v in self.process_env.items() if k != "LD_PRELOAD"}
        self.stock_env["PATH"] = stock_env(standin.parent)["PATH"]
        self.stock_script = stock_script
        self.discovery = _discovery_executable()
        self.workers: dict[str, WarmWorker] = {}

    def start(self) -> None:
        for path in PATHS:
            kind, busy, topology = _parts(path)
            if kind == "warm":
                self.workers[path] = WarmWorker(self.env, busy, self._coordination_file(path), topology)

    def wait_ready(self) -> None:
        for worker in self.workers.values():
            worker.wait_ready()

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()

    def _coordination_file(self, path: str) -> Path:
        return self.dir / f"coordination-{path}"

    def _process(self, argv: list[str], env: dict[str, str], amount: int) -> Sample:
        self.counters_file.unlink(missing_ok=True)
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        seconds = time.perf_counter() - start
        if done.returncode != 0 or done.stdout != expected(amount) + "\n":
            raise RuntimeError(
                f"{argv[0]} on {self.name!r}: exit {done.returncode}, {done.stdout!r}, {done.stderr.strip()!r}"
            )
        from flink_gpu import simulator

        return Sample(seconds, *_totals(simulator.counters(self.counters_file)))

    def measure(self, path: str, amount: int) -> Sample:
        kind, busy, topology = _parts(path)
        coordination = self._coordination_file(path)
        coordination.write_text("")  # a claim from an empty file each time
        if kind == "stock":
            argv = [str(self.stock_script), str(amount), "--enable-coordination-mode", "--coordination-file"]
            return self._process(argv + [str(coordination)], self.stock_env, amount)
        if kind == "discovery":
            argv = [self.discovery, str(amount), "--enable-coordination-mode", "--coordination-file"]
            argv += [str(coordination), "--busy-gpus", busy, "--topology", topology]
            return self._process(argv, self.process_env, amount)
        if kind == "first":
            argv = [sys.executable, "-c", FIRST, busy, str(coordination), str(amount), topology]
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"first call on {self.name!r}: exit {done.returncode}, {done.stderr.strip()}")
            answer = json.loads(done.stdout)
        else:
            answer = self.workers[path].claim(amount)
        if answer["indices"] != expected(amount):
            raise RuntimeError(f"{path} on {self.name!r} claimed {answer['indices']!r}, not {expected(amount)!r}")
        return Sample(answer["seconds"], *_totals(answer["counters"]))


@dataclass
class Results:
    rounds: int
    profiles: list[str]
    samples: dict[tuple[str, int, str], list[Sample]] = field(default_factory=dict)

    def median_ms(self, profile: str, amount: int, path: str) -> float:
        return statistics.median(s.seconds for s in self.samples[profile, amount, path]) * 1e3

    def calls(self, profile: str, amount: int, path: str) -> dict[str, int]:
        """The calls of one run of the path (every run of it makes the same ones)."""
        runs = self.samples[profile, amount, path]
        if any(run.calls != runs[0].calls for run in runs):
            raise RuntimeError(f"{path} made different NVML calls in different rounds on {profile!r}: {runs}")
        return runs[0].calls

    def lock_ms(self, profile: str, amount: int, path: str) -> float:
        return statistics.median(s.lock_ns for s in self.samples[profile, amount, path]) / 1e6


class _ExactSleeps:
    """The simulator models a call's time in the driver as a ``nanosleep``, which the kernel lets overrun by
    the thread's timer slack (50 µs by default): more than the "tens of µs" queries themselves. Within
    this block the calling thread's slack is 1 ns, and the processes it starts inherit that (prctl(2):
    across fork and execve, and to their threads), so that a call costs the model's time, not the slack's."""

    _SET, _GET = 29, 30  # PR_SET_TIMERSLACK, PR_GET_TIMERSLACK

    def __enter__(self) -> None:
        import ctypes

        self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        self._saved = self._prctl(self._GET, 0, 0, 0, 0)
        if self._saved < 0 or self._prctl(self._SET, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_TIMERSLACK) failed")

    def __exit__(self, *exc_info: object) -> None:
        self._prctl(self._SET, self._saved, 0, 0, 0)


def run(rounds: int, profiles=tuple(PROFILES), warm_up: bool = True, log=None) -> Results:
    """``rounds`` interleaved rounds of every (profile, amount, path), after an untimed pass over those of
    :data:`SMOKE_PROFILES` unless not ``warm_up``."""
    import tempfile

    from support.interop import executable_stock_script

    with _ExactSleeps(), tempfile.TemporaryDirectory(prefix="latency-model-") as tmp:
        root = Path(tmp)
        stock = executable_stock_script(root / "stock")
        standin = build_standin(root / "bin")
        hosts = [Host(name, PROFILES[name], root / f"host{i}", stock, standin) for i, name in enumerate(profiles)]
        try:
            for host in hosts:
                host.start()  # the workers' start-ups overlap
            for host in hosts:
                host.wait_ready()
            results = Results(rounds, list(profiles))
            cells = [(h, amount, path) for h in hosts for amount in AMOUNTS for path in PATHS if measured(path, amount)]
            # untimed: the files each path runs into the page cache; on the slow profiles one claim of two per
            # path, so that the copy of the host's topology a first claim leaves is there (docs/design.md §9.6)
            for host, amount, path in cells:
                if warm_up and (host.name in SMOKE_PROFILES or (amount > 1 and path != "stock")):
                    host.measure(path, amount)
            for r in range(rounds):
                order = list(cells)
                random.Random(r).shuffle(order)
                for host, amount, path in order:
                    sample = host.measure(path, amount)
                    results.samples.setdefault((host.name, amount, path), []).append(sample)
                if log:
                    log(f"round {r + 1}/{rounds} done")
            return results
        finally:
            for host in hosts:
                host.close()


# ---- the tables ---------------------------------------------------------------------------------------

#: each path's name in the tables
LABELS = {
    "stock": "stock script",
    "discovery-avoid": "`flink-gpu-discovery` (avoid)",
    "discovery-ignore": "`flink-gpu-discovery` (ignore)",
    "first-avoid": "in-process first call (avoid)",
    "first-ignore": "in-process first call (ignore)",
    "warm-avoid": "in-process warm (avoid)",
    "warm-ignore": "in-process warm (ignore)",
    "discovery-avoid-ignore": "`flink-gpu-discovery` (avoid, topology ignore)",
    "first-avoid-ignore": "in-process first call (avoid, topology ignore)",
    "warm-avoid-ignore": "in-process warm (avoid, topology ignore)",
}


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def times_table(results: Results) -> str:
    """Medians in ms per profile and amount, each with the stock script's median ÷ its own."""
    # a heading repeated from the column before it is left to its busy-gpus value
    headings = [
        LABELS[p]
        if i == 0 or LABELS[p].split(" (")[0] != LABELS[PATHS[i - 1]].split(" (")[0]
        else "(" + LABELS[p].split(" (")[1]
        for i, p in enumerate(PATHS)
    ]
    lines = [_row(["profile", "amount"] + headings), _row(["---"] * (len(PATHS) + 2))]
    for profile in results.profiles:
        for amount in AMOUNTS:
            stock = results.median_ms(profile, amount, "stock")
            cells = [profile, str(amount), _ms(stock)]
            for path in PATHS[1:]:
                if not measured(path, amount):
                    cells.append("")
                    continue
                median = results.median_ms(profile, amount, path)
                cells.append(f"{_ms(median)} ({stock / median:.3g}×)")
            lines.append(_row(cells))
    return "\n".join(lines)


def calls_table(results: Results) -> str:
    """NVML calls of one run of each path, per function, and the median time the driver lock was held; a
    cell reads "amount 1 / amount 2" where the amounts differ, and names the profiles where those differ."""
    profiles = results.profiles

    def cell(path: str, of) -> str:  # of(the calls of one run) -> a number
        per_amount = []
        for amount in AMOUNTS:
            if not measured(path, amount):
                per_amount.append("–")
                continue
            values = {profile: of(results.calls(profile, amount, path)) for profile in profiles}
            common = statistics.mode(values.values())  # the first profile's among equally common ones
            others = [f"{v} on “{p}”" for p, v in values.items() if v != common]
            per_amount.append("; ".join([str(common)] + others))
        return per_amount[0] if len(set(per_amount)) == 1 else " / ".join(per_amount)

    functions = sorted(
        {f for key in results.samples for f in results.calls(*key)},
        key=lambda f: (-max(results.calls(*key).get(f, 0) for key in results.samples), f),
    )
    lines = [_row(["NVML calls"] + [LABELS[p] for p in PATHS]), _row(["---"] * (len(PATHS) + 1))]
    for function in functions:
        cells = [cell(path, lambda calls, f=function: calls.get(f, 0)) for path in PATHS]
        lines.append(_row([f"`{function}`"] + [c if c != "0" else "" for c in cells]))
    totals = [cell(path, lambda calls: sum(calls.values())) for path in PATHS]
    lines.append(_row(["**all**"] + [f"**{c}**" for c in totals]))
    for profile in profiles:
        held = [
            " / ".join(_ms(results.lock_ms(profile, a, path)) if measured(path, a) else "–" for a in AMOUNTS)
            for path in PATHS
        ]
        lines.append(_row([f"driver lock held, {profile} (ms, 1 / 2 GPUs)"] + held))
    return "\n".join(lines)


def main(argv=None) -> None:
    import platform

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--profile", action="append", choices=PROFILES, help="only this profile (repeatable; default: all)"
    )
    parser.add_argument("--write", type=Path, help="replace the latency-model section of this file")
    args = parser.parse_args(argv)
    profiles = args.profile or list(PROFILES)
    started = time.monotonic()
    results = run(args.rounds, profiles, log=lambda text: print(text, file=sys.stderr, flush=True))
    command = f"PYTHONPATH=src:tests python benchmarks/latency_model.py --rounds {args.rounds}" + "".join(
        f" --profile '{p}'" for p in args.profile or ()
    )
    text = "\n\n".join(
        [
            times_table(results),
            calls_table(results),
            f"`{command}`: {args.rounds} round{'s' if args.rounds > 1 else ''} in {time.monotonic() - started:.0f} s, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f} when it ended.",
        ]
    )
    if args.write:
        from bench_figures import write_section

        write_section(args.write, "latency-model", text)
    else:
        print(text)


if __name__ == "__main__":
    main()
