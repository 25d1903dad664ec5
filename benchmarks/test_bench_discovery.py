"""Side by side, on the simulator with 4 GPUs (see conftest.py), in one run:

* ``retrieve``: ``retrieve_resource_info(2)`` in-process through the NVML backend (which reads
  every GPU's state and ranks them on each call), and pynvml;
* ``state``: that state read and ranking alone (``states()`` + ``rank_gpus``);
* ``claim+release``: a coordinated claim and release of 2 GPUs: a new driver in coordination mode,
  retrieve, close; the same through ``flink_gpu.coordination``; pynvml + ``fcntl.flock``;
* ``process`` / ``process-coordinated``: Flink's stock ``nvidia-gpu-discovery.sh`` (fake
  ``nvidia-smi``) and ``flink-gpu-discovery`` as processes, run directly as Flink runs them, and the
  stock script through ``GPUDriver``'s script backend;
* ``bind+release``: one subtask's binding of 1 GPU and its release (a process holder, a thread-mode
  slot, PyFlink's ``bind_gpus`` in process mode with its TaskManager lookup), next to a plain
  coordinated claim + release of 1 GPU and the syscall floor of that claim;
* ``import``: fresh interpreters importing flink_gpu (and pynvml, and nothing);
* ``contention``: N processes claiming and releasing concurrently on one file.

Each benchmark checks its result, so a fast wrong answer fails. ``benchmarks/bench_figures.py ratios``
turns a ``--benchmark-json`` file into the target ratios. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import baseline_pynvml
import flink_gpu
import syscall_floor
from flink_gpu import GPUDriver, coordination, simulator
from support.interop import executable_stock_script

AMOUNT = 2
INDICES = [str(i) for i in range(4)]
EXPECTED = "0,1"
PROCESS_ROUNDS = 40
PYTHON_ROUNDS = 15
BENCH_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = str(Path(flink_gpu.__file__).resolve().parent.parent)


def coordinated(path: Path) -> dict[str, str]:
    return {"discovery-mode": "nvml", "discovery-script.args": f"--enable-coordination-mode --coordination-file {path}"}


def indices(infos) -> str:
    return ",".join(sorted((info.index for info in infos), key=int))


def child_env(**extra: str) -> dict[str, str]:
    """os.environ (simulator and all) with the flink_gpu under test importable."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


def run(argv, env) -> bytes:
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    if proc.returncode != 0:
        raise AssertionError(f"{argv} failed ({proc.returncode}): {proc.stdout!r} {proc.stderr!r}")
    return proc.stdout


@pytest.fixture(scope="session")
def executable_stock(stock_script, tmp_path_factory) -> Path:
    return executable_stock_script(tmp_path_factory.mktemp("stock"))


def truncate(path: Path):
    """pedantic() set-up: an empty coordination file, so every round claims from scratch."""

    def setup():
        os.truncate(path, 0)

    return setup


# ---- retrieve: not coordinated, in-process --------------------------------------------------------


@pytest.mark.benchmark(group="retrieve")
def test_retrieve_flink_gpu_nvml(benchmark):
    driver = GPUDriver({"discovery-mode": "nvml"})
    assert driver.mode == "nvml"
    got = benchmark(driver.retrieve_resource_info, AMOUNT)
    assert indices(got) == EXPECTED
    assert all(info.get_property("uuid") for info in got)
    driver.close()


@pytest.mark.benchmark(group="retrieve")
def test_retrieve_pynvml(benchmark):
    got = benchmark(baseline_pynvml.retrieve, AMOUNT)
    assert ",".join(info["index"] for info in got) == EXPECTED
    assert all(info["uuid"] for info in got)


@pytest.mark.benchmark(group="retrieve")
def test_retrieve_pynvml_user_cached(benchmark):
    """For reference: pynvml with the properties cached by the user (a list slice per call)."""
    cached = baseline_pynvml.retrieve(baseline_pynvml.device_count())
    got = benchmark(lambda amount: cached[:amount], AMOUNT)
    assert ",".join(info["index"] for info in got) == EXPECTED


# ---- state: what the checks of every choice cost (docs/design.md §9.1) ---------------------------


@pytest.mark.benchmark(group="state")
def test_state_read_and_rank(benchmark):
    """The core's one discovery, uncoordinated: every state read, judged and ranked in one call."""
    from flink_gpu import nvml, policy

    library = nvml.open_library()
    pid = os.getpid()

    def read_and_rank():
        return policy.discover(library, 0, INDICES, owner=pid)

    outcome = benchmark(read_and_rank)
    assert list(outcome.order) == INDICES and outcome.ranks == (0,) * len(INDICES) and outcome.left_out == ()


# ---- claim + release: coordinated, in-process -----------------------------------------------------


@pytest.mark.benchmark(group="claim+release")
def test_claim_release_flink_gpu_driver(benchmark, coordination_file):
    config = coordinated(coordination_file)

    def cycle():
        driver = GPUDriver(config)
        got = driver.retrieve_resource_info(AMOUNT)
        driver.close()
        return got

    got = benchmark(cycle)
    assert indices(got) == EXPECTED
    assert coordination_file.read_text() == ""  # released


@pytest.mark.benchmark(group="claim+release")
def test_claim_release_flink_gpu_coordination_api(benchmark, coordination_file):
    def cycle():
        got = coordination.claim(AMOUNT, INDICES, path=coordination_file).taken
        coordination.release(path=coordination_file)
        return got

    assert ",".join(benchmark(cycle)) == EXPECTED
    assert coordination_file.read_text() == ""


@pytest.mark.benchmark(group="claim+release")
def test_claim_release_pynvml_flock(benchmark, coordination_file):
    path = str(coordination_file)

    def cycle():
        got = baseline_pynvml.claim(AMOUNT, path)
        baseline_pynvml.release(path)
        return got

    got = benchmark(cycle)
    assert ",".join(info["index"] for info in got) == EXPECTED
    assert coordination_file.read_text() == ""


@pytest.mark.benchmark(group="claim+release")
def test_claim_release_syscall_floor(benchmark, coordination_file, floor_library):
    """For reference: only the syscalls a claim + release needs (floor/coordination_floor.c: open,
    flock, read, take the lease, write; open, flock, read, truncate, drop the lease), writing the
    bytes a real claim writes, without NVML, parsing or checks."""
    lines = syscall_floor.real_lines(coordination_file, AMOUNT, INDICES)
    assert lines.count(b"\n") == AMOUNT and b"lease=" in lines
    floor = syscall_floor.Floor(floor_library, coordination_file, lines)
    benchmark(floor.cycle)
    assert coordination_file.read_text() == ""


# ---- PyFlink: an operator's open() in process mode ------------------------------------------------


def taskmanager_conf(tmp_path, coordination_file) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 2\n"
        "external-resource.gpu.driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
        f"external-resource.gpu.param.discovery-script.args: --enable-coordination-mode "
        f"--coordination-file {coordination_file}\n"
    )
    return conf


@pytest.mark.benchmark(group="pyflink")
def test_pyflink_process_mode_open(benchmark, coordination_file, tmp_path, monkeypatch):
    """``get_external_resource_infos(None, "gpu")`` as a process-mode operator's open() calls it:
    reads the TaskManager's config.yaml, the coordination file, the process ancestry, NVML's
    properties. Its TaskManager (here: this process) holds GPUs 0 and 1."""
    from flink_gpu.pyflink import get_external_resource_infos

    monkeypatch.setenv("FLINK_CONF_DIR", str(taskmanager_conf(tmp_path, coordination_file)))
    coordination.claim(AMOUNT, INDICES, path=coordination_file)
    try:
        got = benchmark(get_external_resource_infos, None, "gpu")
    finally:
        coordination.release(path=coordination_file)
    assert indices(got) == EXPECTED
    assert all(info.get_property("uuid") for info in got)


# ---- bind + release: one GPU for one subtask -----------------------------------------------------


@pytest.mark.benchmark(group="bind+release")
def test_bind_release_process_holder(benchmark, coordination_file):
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind, bindings_path

    gpus = [GPUInfo(index) for index in INDICES[:AMOUNT]]
    path = bindings_path(coordination_file)

    def cycle():
        binding = bind(gpus, 1, path=path)
        binding.release()
        return binding.indices

    assert benchmark(cycle) == ("0",)
    assert Path(path).read_text() == ""


@pytest.mark.benchmark(group="bind+release")
def test_bind_release_thread_mode_slot(benchmark, coordination_file):
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind, bindings_path

    gpus = [GPUInfo(index) for index in INDICES[:AMOUNT]]
    path = bindings_path(coordination_file)

    def cycle():
        binding = bind(gpus, 1, slot="0123456789abcdef0123456789abcdef", taskmanager_pid=os.getpid(), path=path)
        binding.release()
        return binding.indices

    assert benchmark(cycle) == ("0",)
    assert Path(path).read_text() == ""


@pytest.mark.benchmark(group="bind+release")
def test_bind_gpus_release_pyflink_process_mode(benchmark, coordination_file, tmp_path, monkeypatch):
    """``bind_gpus(None, "gpu")`` + ``release()`` as a process-mode operator's open()/close() call them:
    the TaskManager lookup (config.yaml, coordination file, ancestry, NVML properties), then the bind."""
    from flink_gpu.binding import bindings_path
    from flink_gpu.pyflink import bind_gpus

    monkeypatch.setenv("FLINK_CONF_DIR", str(taskmanager_conf(tmp_path, coordination_file)))
    coordination.claim(AMOUNT, INDICES, path=coordination_file)

    def cycle():
        binding = bind_gpus(None, "gpu")
        binding.release()
        return binding.indices

    try:
        assert benchmark(cycle) == ("0",)
    finally:
        coordination.release(path=coordination_file)
    assert Path(bindings_path(coordination_file)).read_text() == ""


@pytest.mark.benchmark(group="bind+release")
def test_bind_reference_claim_release_one_gpu(benchmark, coordination_file):
    def cycle():
        got = coordination.claim(1, INDICES[:AMOUNT], path=coordination_file).taken
        coordination.release(path=coordination_file)
        return got

    assert benchmark(cycle) == ["0"]


@pytest.mark.benchmark(group="bind+release")
def test_bind_reference_syscall_floor_one_gpu(benchmark, coordination_file, floor_library):
    lines = syscall_floor.real_lines(coordination_file, 1, INDICES[:AMOUNT])
    floor = syscall_floor.Floor(floor_library, coordination_file, lines)
    benchmark(floor.cycle)
    assert coordination_file.read_text() == ""


# ---- discovery as a process -----------------------------------------------------------------------


@pytest.mark.benchmark(group="process")
def test_process_stock_script(benchmark, executable_stock, smi_env):
    out = benchmark.pedantic(
        run, ([str(executable_stock), str(AMOUNT)], smi_env), rounds=PROCESS_ROUNDS, warmup_rounds=1
    )
    assert out.decode().strip() == EXPECTED


@pytest.mark.benchmark(group="process")
def test_process_flink_gpu_discovery(benchmark, discovery_exe):
    out = benchmark.pedantic(run, ([discovery_exe, str(AMOUNT)], os.environ), rounds=PROCESS_ROUNDS, warmup_rounds=1)
    assert out.decode().strip() == EXPECTED


@pytest.mark.benchmark(group="process")
def test_process_stock_script_through_gpudriver(benchmark, executable_stock, smi_env, monkeypatch):
    """Our script backend running the stock script (what discovery-mode: script costs)."""
    monkeypatch.setenv("PATH", smi_env["PATH"])
    driver = GPUDriver({"discovery-mode": "script", "discovery-script.path": str(executable_stock)})
    got = benchmark.pedantic(driver.retrieve_resource_info, (AMOUNT,), rounds=PROCESS_ROUNDS, warmup_rounds=1)
    assert indices(got) == EXPECTED


@pytest.mark.benchmark(group="process-coordinated")
def test_process_stock_script_coordinated(benchmark, executable_stock, smi_env, coordination_file):
    argv = [
        str(executable_stock),
        str(AMOUNT),
        "--enable-coordination-mode",
        "--coordination-file",
        str(coordination_file),
    ]
    out = benchmark.pedantic(
        run, (argv, smi_env), setup=truncate(coordination_file), rounds=PROCESS_ROUNDS, warmup_rounds=1
    )
    assert out.decode().strip() == EXPECTED
    assert coordination_file.read_text() == f"0 {os.getpid()}\n1 {os.getpid()}\n"


@pytest.mark.benchmark(group="process-coordinated")
def test_process_flink_gpu_discovery_coordinated(benchmark, discovery_exe, coordination_file):
    argv = [discovery_exe, str(AMOUNT), "--enable-coordination-mode", "--coordination-file", str(coordination_file)]
    out = benchmark.pedantic(
        run, (argv, os.environ), setup=truncate(coordination_file), rounds=PROCESS_ROUNDS, warmup_rounds=1
    )
    assert out.decode().strip() == EXPECTED
    owners = {line.split()[1] for line in coordination_file.read_text().splitlines()}
    assert owners == {str(os.getpid())}  # the parent owns them, as with the stock script


@pytest.mark.benchmark(group="process-coordinated")
def test_process_stock_script_coordinated_through_gpudriver(
    benchmark, executable_stock, smi_env, coordination_file, monkeypatch
):
    monkeypatch.setenv("PATH", smi_env["PATH"])
    driver = GPUDriver(
        {
            "discovery-mode": "script",
            "discovery-script.path": str(executable_stock),
            "discovery-script.args": f"--enable-coordination-mode --coordination-file {coordination_file}",
        }
    )
    got = benchmark.pedantic(
        driver.retrieve_resource_info,
        (AMOUNT,),
        setup=truncate(coordination_file),
        rounds=PROCESS_ROUNDS,
        warmup_rounds=1,
    )
    assert indices(got) == EXPECTED


# ---- import cost ----------------------------------------------------------------------------------

IMPORTS = {
    "nothing": "pass",
    "flink_gpu": "import flink_gpu",
    "GPUInfo": "from flink_gpu import GPUInfo",
    "first_retrieve": (
        "from flink_gpu import GPUDriver\n"
        "assert len(GPUDriver({'discovery-mode': 'nvml'}).retrieve_resource_info(2)) == 2"
    ),
    "pynvml": "import pynvml",
    "pynvml_first_retrieve": "import baseline_pynvml\nassert len(baseline_pynvml.retrieve(2)) == 2",
}


def top_level_imports(code: str, env) -> dict[str, int]:
    """Top-level module -> its cumulative import time in µs, from ``python -X importtime``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True
    )
    found = {}
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)  # one space: top level
        if match:
            found[match.group(2)] = int(match.group(1))
    return found


def import_time_us(code: str, env) -> int:
    """What ``code`` imports beyond what every interpreter imports at start-up (site, codecs...)."""
    startup = top_level_imports("pass", env)
    return sum(us for name, us in top_level_imports(code, env).items() if name not in startup)


@pytest.mark.benchmark(group="import")
@pytest.mark.parametrize("what", list(IMPORTS))
def test_import(benchmark, what):
    env = child_env()
    env["PYTHONPATH"] += os.pathsep + str(BENCH_DIR)
    code = IMPORTS[what]
    benchmark.extra_info["import_time_us"] = import_time_us(code, env)
    benchmark.pedantic(run, ([sys.executable, "-c", code], env), rounds=PYTHON_ROUNDS, warmup_rounds=1)


# ---- contention -----------------------------------------------------------------------------------


def start_workers(impl: str, processes: int, cycles: int, path: Path, floor_library: Path):
    env = child_env(**simulator.environment(devices=max(4, processes)), FLINK_GPU_BENCH_FLOOR=str(floor_library))
    workers = [
        subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "_contend.py"), impl, str(path), str(cycles), "1", str(worker)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for worker in range(processes)
    ]
    for worker in workers:
        if worker.stdout.readline().strip() != "ready":
            raise AssertionError(f"{impl} worker {worker.pid} did not start")
    return (workers,), {}


def go(workers):
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()
    results = []
    for worker in workers:
        out, _ = worker.communicate()
        assert worker.returncode == 0, f"worker {worker.pid} failed"
        results.append(json.loads(out))
    return results


@pytest.mark.benchmark(group="contention")
@pytest.mark.parametrize("processes", [1, 2, 4, 8])
@pytest.mark.parametrize("impl", ["flink_gpu", "coordination_api", "pynvml", "floor"])
def test_contention(benchmark, impl, processes, coordination_file, floor_library):
    """``processes`` workers, each claiming 1 GPU and releasing it, all at once on one file."""
    cycles = 20 if benchmark.disabled else 400
    rounds = []

    def timed(workers):
        rounds.append(go(workers))

    benchmark.pedantic(
        timed,
        setup=lambda: start_workers(impl, processes, cycles, coordination_file, floor_library),
        rounds=1 if benchmark.disabled else 3,
    )
    latencies = sorted(ns for results in rounds for r in results for ns in r["latencies_ns"])
    walls = [max(r["end"] for r in results) - min(r["start"] for r in results) for results in rounds]
    assert len(latencies) == len(rounds) * processes * cycles
    assert coordination_file.read_text() == ""
    benchmark.extra_info.update(
        cycles_per_process=cycles,
        throughput_per_s=round(processes * cycles / (sum(walls) / len(walls))),
        p50_us=round(latencies[len(latencies) // 2] / 1000, 1),
        p99_us=round(latencies[int(len(latencies) * 0.99)] / 1000, 1),
    )
