"""flink_gpu.binding: GPUs bound to the holders inside one TaskManager or service, with real processes,
real threads, real signals and the real native core (csrc/coordination/bindings.cpp)."""

import collections
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from flink_gpu import GPUInfo, NotEnoughGpusError, binding, simulator
from flink_gpu.binding import BindingError, bind
from support.orphans import TASKMANAGER, orphaned_worker, read_until
from support.orphans import stop as stop_process
from support.waiting import SOURCE as WAITING_SOURCE
from support.waiting import wait_until


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "coordination.bindings")


def infos(n):
    return [GPUInfo(str(i), {"uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000"}) for i in range(n)]


def child_env():
    import flink_gpu

    root = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


# A worker process: binds, prints what it got (or the error), holds the binding until stdin closes.
WORKER = textwrap.dedent("""
    import sys
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind, BindingError
    path, n, count, share, placement = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    try:
        b = bind([GPUInfo(str(i)) for i in range(n)], count, share, path=path, placement=placement)
        print(",".join(b.indices), flush=True)
    except BindingError as error:
        print("error:", error, flush=True)
    sys.stdin.read()
    """)


def start_workers(path, count, n=4, per_worker=1, share=1, placement="spread"):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, path, str(n), str(per_worker), str(share), placement],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    return procs, [p.stdout.readline().strip() for p in procs]


def stop(procs):
    for p in procs:
        p.stdin.close()
        p.wait(30)


@pytest.mark.parametrize("share", [1, 2])
def test_concurrent_worker_processes_share_each_gpu_at_most_k_times(path, share):
    procs, got = start_workers(path, 4 * share, share=share)
    try:
        assert collections.Counter(got) == {str(i): share for i in range(4)}, got
        more, extra = start_workers(path, 1, share=share)
        stop(more)
        assert extra[0].startswith("error: Could not bind 1 GPU"), extra
    finally:
        stop(procs)


def test_threads_of_distinct_slots_get_distinct_gpus(path):
    results, errors = {}, []
    barrier = threading.Barrier(4)
    hold = threading.Event()

    def subtask(slot):
        try:
            barrier.wait()
            results[slot] = bind(infos(4), slot=slot, taskmanager_pid=os.getpid(), path=path).indices
            hold.wait(30)  # the slot's binding lives as long as this thread
        except Exception as error:  # reported to the test
            errors.append(error)

    threads = [threading.Thread(target=subtask, args=(f"slot{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    tids = []
    try:
        while len(results) + len(errors) < 4 and all(t.is_alive() for t in threads):
            threading.Event().wait(0.01)
        assert not errors
        assert sorted(i for indices in results.values() for i in indices) == ["0", "1", "2", "3"]
        with pytest.raises(BindingError, match="Could not bind 1 GPU to slot late"):
            bind(infos(4), slot="late", taskmanager_pid=os.getpid(), path=path)
        tids = [t.native_id for t in threads]
    finally:
        hold.set()
        for t in threads:
            t.join()
    # join() returns before the kernel has reaped a thread: wait until /proc no longer shows them
    wait_until(lambda: not any(os.path.exists(f"/proc/self/task/{tid}") for tid in tids), "the threads are reaped", 10)
    # their threads ended: the slots' bindings went with them
    assert bind(infos(4), 4, slot="late", taskmanager_pid=os.getpid(), path=path).indices == ("0", "1", "2", "3")


def test_a_sigkilled_holder_frees_its_binding(path):
    procs, got = start_workers(path, 1, n=1)
    assert got == ["0"]
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait(30)
    with bind(infos(1), path=path) as b:
        assert b.indices == ("0",)


def test_the_same_process_gets_the_same_binding_topped_up_and_the_last_release_frees_it(path):
    first = bind(infos(4), path=path)
    second = bind(infos(4), 2, path=path)
    assert first.indices == ("0",) and second.indices == ("0", "1")
    first.release()
    assert binding.snapshot(path).by_taskmanager() == {(None, None): {f"pid {os.getpid()}": ("0", "1")}}
    second.release()
    second.release()  # idempotent
    assert binding.snapshot(path).entries == ()


def test_a_forked_child_binds_nothing_new(path):
    parent = bind(infos(4), path=path)
    before = open(path).read()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a DataLoader worker
        code = 1
        try:
            shared = bind(infos(4), path=path)
            try:
                bind(infos(4), 2, path=path)
                more = "bound more"
            except BindingError as error:
                more = "refused" if "binds nothing new" in str(error) else str(error)
            shared.release()
            parent.release()  # the parent's handle, inherited: does nothing here
            os.write(write_end, f"{','.join(shared.indices)} {more}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 1000).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == "0 refused"
    assert open(path).read() == before  # the child wrote nothing and released nothing
    parent.release()


def test_infos_are_the_given_objects_and_cuda_visible_devices_names_them(path):
    given = infos(3)
    with bind(given, 2, path=path) as b:
        assert b.infos == frozenset(given[:2])
        assert all(any(info is g for g in given) for info in b.infos)
        assert b.cuda_visible_devices == ",".join(info.get_property("uuid") for info in given[:2])
        assert "pid" in repr(b)


def test_the_error_names_each_gpus_holders(path):
    procs, got = start_workers(path, 2, n=2)
    try:
        with pytest.raises(BindingError) as caught:  # the name bind's failures had, still catching them
            bind(infos(2), path=path)
        assert type(caught.value) is NotEnoughGpusError
        message = str(caught.value)
        assert f"GPU 0 is bound by pid {procs[0].pid}" in message or f"GPU 0 is bound by pid {procs[1].pid}" in message
        assert "(1 of at most 1)" in message and f"Bindings file: {path}" in message
    finally:
        stop(procs)


@pytest.mark.parametrize(
    "count, share, error",
    [
        (0, 1, ValueError),
        (-1, 1, ValueError),
        (1, 0, ValueError),
        (1, 1025, ValueError),
        (True, 1, TypeError),
        (1.0, 1, TypeError),
        (1, "2", TypeError),
    ],
)
def test_bad_counts_are_refused_before_the_file_is_touched(path, count, share, error):
    with pytest.raises(error):
        bind(infos(2), count, share, path=path)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    "count, share, named",
    [
        (1, True, "holders_per_gpu (how many holders may share one GPU) must be a whole number (an int), got True"),
        (1, 1.5, "holders_per_gpu (how many holders may share one GPU) must be a whole number (an int), got 1.5"),
        (1.0, 1, "count (the GPUs to bind) must be a whole number (an int), got 1.0"),
    ],
)
def test_a_count_that_is_not_a_whole_number_names_the_parameter(path, count, share, named):
    with pytest.raises(TypeError, match=re.escape(named)):
        bind(infos(2), count, share, path=path)


@pytest.mark.parametrize("interval", [0.5, 0, -1, True, "5 s"])
def test_a_metrics_interval_the_gauges_may_not_read_at_is_refused_before_the_file_is_touched(path, interval):
    with pytest.raises(ValueError, match=re.escape("must be at least 1 s, got " + repr(interval))):
        bind(infos(2), 1, path=path, metrics_interval=interval)
    assert not os.path.exists(path)


def test_only_gpu_infos_can_be_bound(path):
    with pytest.raises(TypeError, match="GPUInfo"):
        bind(["0"], path=path)


def test_a_slot_bound_without_a_lease_names_its_process_not_its_thread(path, caplog):
    """The lease is the process's: the WARN of a slot bound without one names the pid whose death other
    namespaces cannot see, never the binding thread's id."""
    os.mkdir(f"{path}.lease")  # no lease can be taken on a directory: the bind goes on without one
    found = {}

    def subtask():
        found["tid"] = threading.get_native_id()
        bind(infos(1), slot="s", path=path).release()

    with caplog.at_level(logging.WARNING, logger="flink_gpu.binding"):
        thread = threading.Thread(target=subtask)
        thread.start()
        thread.join(30)
    assert found["tid"] != os.getpid()
    (warning,) = [r.getMessage() for r in caplog.records if "without a lease" in r.getMessage()]
    assert f"when pid {os.getpid()} dies" in warning and f"pid {found['tid']}" not in warning


def test_a_bad_slot_id_names_it(path):
    with pytest.raises(ValueError, match="Invalid slot id 'a/b'"):
        bind(infos(1), slot="a/b", path=path)


def test_devices_are_the_cuda_ordinals_of_the_bound_gpus_in_this_process(tmp_path):
    from conftest import run_python, simulated_env

    code = f"""
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(levelname)s %(message)s")
        from flink_gpu import GPUInfo
        from flink_gpu.binding import bind
        # thread mode: Flink's Java infos carry the index only; NVML gives the rest
        with bind([GPUInfo("1"), GPUInfo("3")], 2, path={str(tmp_path / "b")!r}) as b:
            print("devices", b.devices)
        """
    env = simulated_env(devices=4)
    pci = run_python(code, env={**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,2,1"})
    assert "devices (2, 0)" in pci.stdout and "WARN" not in pci.stdout
    default = run_python(code, env={k: v for k, v in env.items() if not k.startswith("CUDA_")})
    assert "devices (1, 3)" in default.stdout
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in default.stdout  # the one WARN: fastest-first cannot be derived


# Binds `count` of the TaskManager's GPUs 0..n-1 on a simulated host, after creating the file `lose` (a
# spec's trigger) when one is given; prints what it got and the WARNs, or the error (and what `devices`
# says of a binding made before).
BIND_ON_STATE = """
import json, logging, sys, time
from flink_gpu import GPUInfo
from flink_gpu.binding import BindingError, bind
from flink_gpu.nvml import open_library
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("flink_gpu").addHandler(Keep())
path, n, count, lose, options = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
library = open_library().library_path
# a binding made before the GPU is lost (lose given), as a slot bound at the TaskManager's start
earlier = bind([GPUInfo("0")], 1, path=path + ".earlier", library_path=library) if lose else None
if lose:
    open(lose, "x").close()
out = {}
try:
    start = time.monotonic()
    got = bind([GPUInfo(str(i)) for i in range(n)], count, path=path, library_path=library, **options)
    out["bound"] = list(got.indices)
    out["memory_limit"] = got.memory_limit
    out["environment"] = got.memory_environment(mps=True) if got.memory_limit else None
except BindingError as error:
    out["error"] = str(error)
except ValueError as error:
    out["value_error"] = str(error)
out["seconds"] = time.monotonic() - start
try:
    out["earlier_devices"] = list(earlier.devices) if earlier else None
except Exception as error:
    out["earlier_devices"] = f"{type(error).__name__}: {error}"
out["warnings"] = warnings
print(json.dumps(out))
"""


def bind_on_state(path, spec, n, count, lose="", **options):
    from conftest import simulated_env

    env = {**child_env(), **simulated_env(spec=spec)}
    proc = subprocess.run(
        [sys.executable, "-c", BIND_ON_STATE, path, str(n), str(count), lose, json.dumps(options)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bind_never_binds_a_gpu_lost_since_discovery_while_a_healthy_one_is_free(path, tmp_path):
    lost = str(tmp_path / "gpu0-lost")
    got = bind_on_state(path, {"devices": [{"health": {"lost_handle_when_exists": lost}}, {}]}, 2, 1, lose=lost)
    assert got["bound"] == ["1"]
    assert got["warnings"] == [
        # one sentence for a GPU left out, the discovery's too (it read "Left out: GPU 0 is unhealthy: ...")
        "GPU 0 left out: unhealthy: GPU is lost (nvmlDeviceGetHandleByIndex_v2 "
        "returned NVML_ERROR_GPU_IS_LOST); binding among GPU(s) 1."
    ]
    # what CUDA is told of a binding made before the GPU was lost: that it is lost
    assert got["earlier_devices"].startswith("CudaDeviceError: GPU 0")
    assert "cannot be used now" in got["earlier_devices"] and "GPU_IS_LOST" in got["earlier_devices"]


# Binds 1 of the given GPUs 5 and 6 of 8 and prints what it bound and the simulator's calls in the bind.
BIND_COUNTING = """
import json, sys
from flink_gpu import GPUInfo, simulator
from flink_gpu.binding import bind
from flink_gpu.nvml import open_library
library = open_library().library_path
simulator.reset_counters()
bound = bind([GPUInfo("5"), GPUInfo("6")], 1, path=sys.argv[1], library_path=library)
print(json.dumps({"bound": list(bound.indices), "calls": simulator.counters()["calls"]}))
"""


def test_bind_reads_the_given_gpus_and_no_other(path):
    """A slot binds among its TaskManager's GPUs: the host's other GPUs cost it no handle and no read."""
    from conftest import simulated_env

    env = {**child_env(), **simulated_env(devices=8)}
    proc = subprocess.run(
        [sys.executable, "-c", BIND_COUNTING, path], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["bound"] == ["5"]
    per_gpu = {gpu for function, by_gpu in out["calls"].items() for gpu in by_gpu if gpu != "host"}
    assert per_gpu == {"5", "6"}, out["calls"]
    assert set(out["calls"]["nvmlDeviceGetMemoryInfo_v2"]) == {"5", "6"}  # both given GPUs' state is read


@pytest.mark.parametrize("health", [{"inforom_corrupted": True}, {"state_error": "RESET_REQUIRED"}])
def test_bind_says_so_when_the_taskmanager_has_no_usable_gpu(path, health):
    got = bind_on_state(path, {"devices": [{"health": health}, {}]}, 1, 1)
    assert "bound" not in got
    assert got["error"].startswith(
        "Could not bind: 1 GPU requested, but 0 of the 1 given are usable: GPU 0 is left out (unhealthy: "
    )


def test_bind_never_binds_a_gpu_whose_state_read_does_not_return(path, tmp_path):
    """docs/design.md §9.5: bind reads the TaskManager's GPUs with the 5 s deadline; one whose NVML query
    does not return is unknown and left out like an unhealthy one, and so are those after it stuck behind
    it on the (simulated) driver's lock, each on a worker of its own."""
    from flink_gpu import simulator

    hang_file = tmp_path / "hang"

    def spec(device):
        return {
            "devices": [{}, {}],
            "hang": [{"query": "field_values", "device": device, "while_exists": str(hang_file)}],
        }

    with simulator.hanging(hang_file):
        later = bind_on_state(path, spec(1), 2, 1)
    assert later.get("bound") == ["0"], later
    assert later["warnings"] == [
        "GPU 1 left out: unknown: nvmlDeviceGetFieldValues did not return within 5 s; binding among GPU(s) 0."
    ]
    with simulator.hanging(hang_file):
        first = bind_on_state(path + "2", spec(0), 2, 1)
    assert first["error"].startswith(
        "Could not bind: 1 GPU requested, but 0 of the 2 given are usable: GPU 0 is left out (unknown: "
        "nvmlDeviceGetFieldValues did not return within 5 s); GPU 1 is left out (unknown: "
        "nvmlDeviceGetHandleByIndex_v2 did not return within 5 s (behind "
        "GPU 0's nvmlDeviceGetFieldValues, which has not returned for "
    ), first["error"]
    assert first["error"].endswith(")). Repair the GPU (nvidia-smi -q -i <index> says more) or ask for fewer.")


def test_bind_judges_health_by_the_checks_the_resource_enforces(path):
    """A TaskManager whose driver leaves out the InfoROM check (health-checks: all,-inforom) hands out a GPU
    whose InfoROM is corrupt; its slots bind it with the same checks."""
    spec = {"devices": [{"health": {"inforom_corrupted": True}}]}
    assert bind_on_state(path, spec, 1, 1, health_checks="all,-inforom")["bound"] == ["0"]
    assert bind_on_state(path + "2", spec, 1, 1, health_checks=["ecc", "remapped-rows"])["bound"] == ["0"]
    refused = bind_on_state(path + "3", spec, 1, 1)  # every check: the driver's default
    assert refused["error"].startswith(
        "Could not bind: 1 GPU requested, but 0 of the 1 given are usable: GPU 0 is left out (unhealthy: "
    )


@pytest.mark.parametrize("nvml_timeout", [0.3, "300 ms"])
def test_bind_reads_the_gpus_within_the_resources_nvml_timeout(path, tmp_path, nvml_timeout):
    """With GPU 1 stuck in the driver and nvml-timeout 300 ms a slot binds GPU 0 at once: it waited the
    default 5 s before bind took the resource's deadline."""
    from flink_gpu import simulator

    hang_file = tmp_path / "hang"
    spec = {"devices": [{}, {}], "hang": [{"query": "field_values", "device": 1, "while_exists": str(hang_file)}]}
    with simulator.hanging(hang_file):
        got = bind_on_state(path, spec, 2, 1, nvml_timeout=nvml_timeout)
    assert got.get("bound") == ["0"], got
    assert got["warnings"] == [
        "GPU 1 left out: unknown: nvmlDeviceGetFieldValues did not return within 300 ms; binding among GPU(s) 0."
    ]
    assert got["seconds"] < 3.0  # 0.3 s and the bind; the default deadline alone is 5 s


@pytest.mark.parametrize(
    "options, words",
    [
        # the option's text, read by the core's settings reader with the driver's and flink-gpu-discovery's
        # sentence, naming bind's parameter
        (
            {"health_checks": "all,-nothing"},
            "Invalid value 'all,-nothing' for health_checks: '-nothing' is not a health check; use all, inforom,",
        ),
        ({"nvml_timeout": "-1 s"}, "Invalid value '-1 s' for nvml_timeout: expected a positive duration such as '5 s'"),
        ({"nvml_timeout": "later"}, "Invalid value 'later' for nvml_timeout: expected a positive duration"),
        # names and seconds, by the core's checks of them (an iterable of names is never the option's grammar)
        ({"health_checks": ["inforom", "fans"]}, "Invalid health_checks: 'fans' is not a health check; use inforom,"),
        ({"health_checks": ["all"]}, "Invalid health_checks: 'all' is not a health check"),
        ({"health_checks": ["-inforom"]}, "Invalid health_checks: '-inforom' is not a health check"),
        ({"nvml_timeout": 0}, "Invalid nvml_timeout 0: it must be a positive, finite number of seconds."),
        ({"nvml_timeout": float("inf")}, "Invalid nvml_timeout inf: it must be a positive, finite number of seconds."),
        ({"nvml_timeout": True}, "nvml_timeout True is not a deadline: give seconds or a Flink duration"),
    ],
)
def test_bind_refuses_health_checks_or_an_nvml_timeout_it_cannot_use_before_touching_the_file(path, options, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        bind([GPUInfo("0")], path=path, **options)
    assert not os.path.exists(path)


@pytest.mark.parametrize("first", [{"health": {"row_remap_pending": True}}, "busy"])
def test_bind_binds_a_degraded_or_busy_gpu_last(path, first):
    """As the driver ranks them (busy-gpus: avoid): a GPU with a pending row remap, or running a process
    that is not the TaskManager's, comes after the healthy idle ones."""
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        device = {"processes": [{"pid": stranger.pid, "kind": "compute"}]} if first == "busy" else first
        got = bind_on_state(path, {"devices": [device, {}]}, 2, 1)
        assert got["bound"] == ["1"] and got["warnings"] == []
        assert bind_on_state(path + "2", {"devices": [device, {}]}, 2, 2)["bound"] == ["0", "1"]  # when needed
    finally:
        stranger.kill()
        stranger.wait()


def test_bind_prefers_no_gpu_by_state_on_a_healthy_host(path):
    got = bind_on_state(path, {"devices": [{}, {}]}, 2, 1)
    assert got["bound"] == ["0"] and got["warnings"] == []


# -- topology and placement (docs/design.md §9.6) ----------------------------------------------------------


def bridged_spec():
    """The rtx3090-bridged-4 profile: NVLink bridges on GPUs 0-2 and 1-3, which index order splits."""
    return json.loads(Path(simulator.profile_path("rtx3090-bridged-4")).read_text())


def test_a_bind_of_two_gets_the_bridged_pair_and_ignore_gets_index_order(path):
    spec = bridged_spec()
    assert bind_on_state(path, spec, 4, 2)["bound"] == ["0", "2"]
    assert bind_on_state(path + "i", spec, 4, 2, topology="ignore")["bound"] == ["0", "1"]
    # the same rule for the same words as the driver's parameter: case and blanks ignored
    assert bind_on_state(path + "c", spec, 4, 2, topology=" IGNORE ")["bound"] == ["0", "1"]


def test_a_bind_of_two_never_takes_a_degraded_gpu_for_its_bridge(path):
    spec = bridged_spec()
    spec["devices"][2]["health"] = {"row_remap_pending": True}
    assert bind_on_state(path, spec, 4, 2)["bound"] == ["1", "3"]


@pytest.mark.parametrize("placement, got", [("spread", ["0", "1"]), ("pack", ["0", "0"])])
def test_pack_fills_a_gpu_up_to_its_holders_before_the_next(path, placement, got):
    """Two holders of two GPUs that each take two: spread gives each its own GPU, pack fills GPU 0 first and
    leaves GPU 1 whole."""
    procs, bound = start_workers(path, 2, n=2, share=2, placement=placement)
    try:
        assert sorted(bound) == got
    finally:
        stop(procs)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"topology": "closest"}, "Invalid value 'closest' for topology: expected one of prefer, ignore."),
        ({"topology": 1}, "topology 1 is not a topology policy: give 'prefer' or 'ignore'."),
        ({"placement": "fill"}, "Invalid value 'fill' for placement: expected one of spread, pack."),
        ({"placement": None}, "Invalid value None for placement: expected one of spread, pack."),
    ],
)
def test_a_bad_topology_or_placement_is_refused_naming_it_before_the_file_is_touched(path, options, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        bind([GPUInfo("0")], path=path, **options)
    assert not os.path.exists(path)


# -- memory requests (docs/design.md §9.3, Memory) ---------------------------------------------------

GiB = 2**30


def run_on_simulator(code, path, **simulated):
    """conftest.run_python's child with ``path`` as its sys.argv[1], on the simulated host ``simulated``
    (simulated_env's arguments)."""
    from conftest import run_python, simulated_env

    return run_python(f"import sys\nsys.argv[1:] = [{str(path)!r}]\n" + code, env=simulated_env(**simulated))


# A worker process on the simulator: binds 1 of GPUs 0..n-1 with a memory request, prints what it got (or
# the error), holds the binding until stdin closes.
MEMORY_WORKER = textwrap.dedent("""
    import json, sys
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind, BindingError
    from flink_gpu.nvml import open_library
    path, n, share, memory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    try:
        b = bind([GPUInfo(str(i)) for i in range(n)], 1, share, path=path, library_path=open_library().library_path,
                 memory=memory)
        print(json.dumps({"bound": list(b.indices), "memory_limit": b.memory_limit}), flush=True)
    except BindingError as error:
        print(json.dumps({"error": str(error)}), flush=True)
    sys.stdin.read()
    """)


def start_memory_workers(path, count, memory, n=2, share=8, spec=None):
    from conftest import simulated_env

    env = {**child_env(), **(simulated_env(spec=spec) if spec is not None else simulated_env(devices=n))}
    procs = []
    reports = []
    for _ in range(count):  # one after the other: the spread is the ranking's, not the race's
        proc = subprocess.Popen(
            [sys.executable, "-c", MEMORY_WORKER, path, str(n), str(share), json.dumps(memory)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        reports.append(json.loads(proc.stdout.readline()))
    return procs, reports


def test_four_30_gib_requests_on_two_80_gib_gpus_spread_two_and_two_and_a_fifth_is_refused_naming_memory(path):
    procs, reports = start_memory_workers(path, 4, "30 gb")
    try:
        assert [report["bound"] for report in reports] == [["0"], ["1"], ["0"], ["1"]], reports
        assert {report["memory_limit"] for report in reports} == {30 * GiB}
        more, [fifth] = start_memory_workers(path, 1, "30 gb")
        stop(more)
        error = fifth["error"]
        assert error.startswith("Could not bind 1 GPU to pid ") and "and 30 GiB of memory on each" in error, error
        assert "GPU 0 is bound by pid " in error and "(2 of at most 8), 60 GiB of its 80 GiB requested" in error
        assert "Ask for less memory, run fewer subtasks per GPU, or give the TaskManager more GPUs." in error
        # a killed holder's request is free again, exactly when its binding is
        procs[1].kill()
        procs[1].wait(30)
        again, [report] = start_memory_workers(path, 1, 30 * GiB)
        stop(again)
        assert report == {"bound": ["1"], "memory_limit": 30 * GiB}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)


def test_a_gpu_with_11_gib_free_is_not_given_a_20_gib_request_while_another_fits(path):
    spec = {"devices": [{"memory_used": 69 * GiB}, {}]}
    assert bind_on_state(path, spec, 2, 1, memory="20 gb")["bound"] == ["1"]
    # without a request the ranking is as before
    assert bind_on_state(path + "2", spec, 2, 1)["bound"] == ["0"]
    # nowhere to fit: the shortage says what each GPU has
    refused = bind_on_state(path + "3", {"devices": [{"memory_used": 69 * GiB}]}, 1, 1, memory="20 gb")
    assert "GPU 0 is free, none of its 80 GiB requested, 11 GiB free" in refused["error"], refused


def test_memory_in_flink_syntax_is_the_binding_s_memory_limit_and_its_environment(path):
    got = bind_on_state(path, {"devices": [{}, {}]}, 2, 1, memory="10 gb", holders_per_gpu=4)
    assert got["memory_limit"] == 10 * 2**30
    assert got["environment"] == {
        "XLA_CLIENT_MEM_FRACTION": "0.125000",  # of the 80 GiB GPU
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.125000",  # its older name
        "CUPY_GPU_MEMORY_LIMIT": str(10 * 2**30),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    assert bind_on_state(path + "2", {"devices": [{}]}, 1, 1)["memory_limit"] is None


def test_a_memory_request_larger_than_any_gpu_is_refused_naming_it(path):
    got = bind_on_state(path, {"devices": [{}, {"memory_total": 40 * GiB}]}, 2, 1, memory="100 gb")
    assert got["value_error"] == (
        "Invalid memory request of 100 GiB (107374182400 bytes): it is larger than any GPU given (the largest, "
        "GPU 0, has 80 GiB). Ask for at most 85899345920 bytes."
    )
    largest = bind_on_state(path + "2", {"devices": [{}]}, 1, 1, memory=2**63 - 1)  # the most a request may be
    assert largest["value_error"].startswith("Invalid memory request of 8.0 EiB (9223372036854775807 bytes): "), largest


def test_a_request_only_an_unhealthy_gpu_could_take_is_a_shortage_naming_it_not_a_bad_request(path):
    """GPU 0 (80 GiB) has a corrupt InfoROM, GPU 1 has 40 GiB: 60 GiB is a shortage that names both, since
    the request would fit the GPU once it is repaired."""
    spec = {"devices": [{"health": {"inforom_corrupted": True}}, {"memory_total": 40 * GiB}]}
    got = bind_on_state(path, spec, 2, 1, memory="60 gb")
    assert "value_error" not in got, got
    assert "GPU 1 is free, none of its 40 GiB requested, 40 GiB free" in got["error"], got
    assert "GPU 0 is left out (unhealthy: " in got["error"], got


@pytest.mark.parametrize(
    "memory, error, words",
    [
        (0, ValueError, "memory must be more than 0 bytes, got 0: give a positive number of bytes or a Flink memory"),
        (-5, ValueError, "memory must be more than 0 bytes, got -5"),
        ("0 mb", ValueError, "memory must be more than 0 bytes, got '0 mb'"),
        ("lots", ValueError, "memory 'lots' is not a memory size: text does not start with a number"),
        ("1.5 gb", ValueError, "memory '1.5 gb' is not a memory size"),
        (2**63, ValueError, "Invalid memory 9223372036854775808: it must be at most 9223372036854775807 bytes."),
        (True, TypeError, "memory must be bytes (int) or a Flink memory size (str)"),
        (10.0, TypeError, "memory must be bytes (int) or a Flink memory size (str)"),
    ],
)
def test_a_bad_memory_request_is_refused_naming_it_before_the_file_is_touched(path, memory, error, words):
    with pytest.raises(error, match=re.escape(words)):
        bind([GPUInfo("0")], path=path, memory=memory)
    assert not os.path.exists(path)


def test_a_memory_request_without_nvml_says_no_gpu_s_memory_is_known(path, tmp_path):
    with pytest.raises(NotEnoughGpusError) as refused:
        bind([GPUInfo("0")], path=path, library_path=str(tmp_path / "libnvidia-ml.so.1"), memory="1 gb")
    message = str(refused.value)
    assert "GPU 0 is free, its memory not known (NVML did not read it)" in message
    assert message.endswith(
        "NVML could not be opened, so no GPU's memory is known: bind without `memory`, or repair NVML (flink-gpu "
        "doctor says more)."
    )
    assert "Ask for less memory" not in message  # no size would help


def test_a_holder_keeps_the_request_it_bound_with(path):
    code = textwrap.dedent("""
        import sys
        from flink_gpu import GPUInfo
        from flink_gpu.binding import bind
        from flink_gpu.nvml import open_library
        library = open_library().library_path
        first = bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory="8 gb")
        same = bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory=8 * 2**30)
        assert same.indices == first.indices and same.memory_limit == 8 * 2**30
        # another operator of the holder that names no request gets the binding's
        assert bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library).memory_limit == 8 * 2**30
        try:
            bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory="16 gb")
        except ValueError as error:
            print(error)
        """)
    proc = run_on_simulator(code, path, devices=1)
    assert "with a memory request of 16 GiB: it binds GPU 0 with a memory request of 8 GiB already" in proc.stdout


def test_a_holder_has_one_request_on_every_gpu_it_binds(path):
    code = textwrap.dedent("""
        import sys
        from flink_gpu import GPUInfo
        from flink_gpu.binding import bind
        from flink_gpu.nvml import open_library
        library = open_library().library_path
        first = bind([GPUInfo("0"), GPUInfo("1")], 2, 2, path=sys.argv[1], library_path=library, memory="30 gb")
        try:
            bind([GPUInfo("2"), GPUInfo("3")], 1, 2, path=sys.argv[1], library_path=library, memory="40 gb")
        except ValueError as error:
            print(error)
        # another operator of the holder that names no request gets the holder's, on GPUs of its own too
        print(bind([GPUInfo("2"), GPUInfo("3")], 1, 2, path=sys.argv[1], library_path=library).memory_limit)
        """)
    refused, adopted = run_on_simulator(code, path, devices=4).stdout.splitlines()
    assert "with a memory request of 40 GiB: it binds GPU 0 with a memory request of 30 GiB already" in refused
    assert adopted == str(30 * GiB)


FORKED_WITH_MEMORY = textwrap.dedent("""
    import os, sys
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind
    from flink_gpu.nvml import open_library
    library = open_library().library_path
    parent = bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory="8 gb")
    if os.fork() == 0:  # a DataLoader worker: shares the binding, request included
        shared = bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory="8 gb")
        print("child", shared.memory_limit, flush=True)
        try:
            bind([GPUInfo("0")], 1, 2, path=sys.argv[1], library_path=library, memory="4 gb")
        except ValueError as error:
            print("refused", error, flush=True)
        os._exit(0)
    os.wait()
    """)


def test_a_forked_child_shares_its_parents_memory_request(path):
    proc = run_on_simulator(FORKED_WITH_MEMORY, path, devices=1)
    child, refused = proc.stdout.splitlines()
    assert child == f"child {8 * GiB}"
    assert refused.startswith("refused This process (pid ") and "has a memory request of 8 GiB, not 4 GiB" in refused


# A process with stand-ins for PyTorch and CuPy (which need a CUDA GPU this machine has not):
# apply_memory_limit() hands each bound GPU's share to torch.cuda.set_per_process_memory_fraction, and the
# request to CuPy's default pool, per CUDA ordinal.
APPLY_TO_TORCH = textwrap.dedent("""
    import json, sys, types
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind
    from flink_gpu.nvml import open_library
    b = bind([GPUInfo("0"), GPUInfo("1")], 1, 1, path=sys.argv[1], library_path=open_library().library_path,
             memory="20 gb")
    try:
        b.apply_memory_limit()
    except RuntimeError as error:
        print(json.dumps({"without": str(error)}))
    calls, pool_limits = [], []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(set_per_process_memory_fraction=lambda f, d: calls.append([f, d]))
    sys.modules["torch"] = torch
    class Device:  # cupy.cuda.Device(ordinal): the current device inside the block
        current = None
        def __init__(self, ordinal):
            self.ordinal = ordinal
        def __enter__(self):
            Device.current = self.ordinal
        def __exit__(self, *exc):
            Device.current = None
    pool = types.SimpleNamespace(set_limit=lambda size: pool_limits.append([Device.current, size]))
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=Device)
    cupy.get_default_memory_pool = lambda: pool
    sys.modules["cupy"] = cupy
    print(json.dumps({"applied": b.apply_memory_limit(), "calls": calls, "pool_limits": pool_limits,
                      "devices": b.devices}))
    """)


def test_apply_memory_limit_gives_pytorch_and_cupy_the_limit_on_each_bound_gpu(path):
    # GPU 0 is taken by another holder, so this one binds GPU 1, a 40 GiB GPU: half of it
    spec = {"devices": [{}, {"memory_total": 40 * GiB}]}
    others, _ = start_memory_workers(path, 1, None, share=1, spec=spec)
    try:
        proc = run_on_simulator(APPLY_TO_TORCH, path, spec=spec)
    finally:
        stop(others)
    without, applied = [json.loads(line) for line in proc.stdout.splitlines()]
    assert without["without"].startswith("apply_memory_limit() limits PyTorch's or CuPy's allocator, and neither")
    assert applied["applied"] == ["torch", "cupy"]
    assert applied["calls"] == [[0.5, applied["devices"][0]]]
    assert applied["pool_limits"] == [[applied["devices"][0], 20 * GiB]]


# Two thread-mode slots of one TaskManager (this process) share GPU 0 with 12 and 20 GiB: the process's
# PyTorch limit on it is the sum, whichever slot applies it.
APPLY_IN_THREAD_MODE = textwrap.dedent("""
    import json, os, sys, threading, types
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind
    from flink_gpu.nvml import open_library
    library = open_library().library_path
    calls, bound, done = [], [], threading.Event()
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(set_per_process_memory_fraction=lambda f, d: calls.append([f, d]))
    sys.modules["torch"] = torch
    def subtask(slot, memory):
        bound.append(bind([GPUInfo("0")], 1, 4, slot=slot, taskmanager_pid=os.getpid(), path=sys.argv[1],
                          library_path=library, memory=memory))
        done.wait()  # a task thread lives while its slot binds
    threads = [threading.Thread(target=subtask, args=a) for a in (("slot-a", "12 gb"), ("slot-b", "20 gb"))]
    for t in threads:
        t.start()
    while len(bound) < 2:
        pass
    bound[0].apply_memory_limit()
    done.set()
    print(json.dumps({"calls": calls, "limits": sorted(b.memory_limit for b in bound)}))
    """)


def test_thread_mode_apply_memory_limit_sets_the_sum_of_the_taskmanager_s_slots_on_the_gpu(path):
    proc = run_on_simulator(APPLY_IN_THREAD_MODE, path, devices=1)
    got = json.loads(proc.stdout)
    assert got["limits"] == [12 * GiB, 20 * GiB]
    assert got["calls"] == [[32 / 80, 0]]  # both slots' requests, not the first one's alone


# Thread mode on a simulated 80 GiB GPU whose 75 GiB used are 60 GiB of this process (the TaskManager) and
# 15 GiB of others: slot-a's 60 GiB request fits (what the process uses may be its cached blocks), slot-b's
# 10 GiB does not (those 60 GiB are slot-a's), and slot-a restarted (its thread ended) binds its 60 GiB again.
THREAD_MODE_OWN_USE = textwrap.dedent("""
    import json, os, sys, threading
    from flink_gpu import GPUInfo
    from flink_gpu.binding import bind, BindingError
    from flink_gpu.nvml import open_library
    with open(sys.argv[2], "w") as spec:  # before NVML starts: the simulator reads it then
        process = {"pid": os.getpid(), "used_memory": 60 * 2**30, "kind": "compute"}
        json.dump({"devices": [{"memory_used": 75 * 2**30, "processes": [process]}]}, spec)
    library = open_library().library_path
    def subtask(slot, memory, hold):
        got, bound = {}, threading.Event()
        def run():
            try:
                b = bind([GPUInfo("0")], 1, 4, slot=slot, taskmanager_pid=os.getpid(), path=sys.argv[1],
                         library_path=library, memory=memory)
                got["bound"] = list(b.indices)
            except BindingError as error:
                got["error"] = str(error)
            bound.set()
            hold.wait()  # a task thread lives while its slot binds
        thread = threading.Thread(target=run)
        thread.start()
        bound.wait()
        return got, thread
    a_ends, the_others_end = threading.Event(), threading.Event()
    a, a_thread = subtask("slot-a", "60 gb", a_ends)
    b, b_thread = subtask("slot-b", "10 gb", the_others_end)
    a_ends.set()
    a_thread.join()
    restarted, restarted_thread = subtask("slot-a", "60 gb", the_others_end)
    the_others_end.set()
    print(json.dumps({"a": a, "b": b, "restarted": restarted}))
    """)


def test_thread_mode_counts_none_of_the_other_slots_memory_as_free_for_a_slot(path, tmp_path):
    from conftest import run_python, simulated_env

    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [{}]}')  # the child writes its own, naming its pid
    code = f"import sys\nsys.argv[1:] = [{path!r}, {str(spec)!r}]\n" + THREAD_MODE_OWN_USE
    got = json.loads(run_python(code, env=simulated_env(spec=str(spec))).stdout)
    assert got["a"] == {"bound": ["0"]}, got
    assert "GPU 0 is bound by slot slot-a of pid " in got["b"]["error"], got
    assert "(1 of at most 4), 60 GiB of its 80 GiB requested, 5 GiB free" in got["b"]["error"], got
    assert got["restarted"] == {"bound": ["0"]}, got


def test_apply_memory_limit_without_a_request_says_so(path):
    with bind(infos(1), path=path) as b:
        assert b.memory_limit is None and b.memory_environment() == {}
        with pytest.raises(ValueError, match=r"has no memory request to apply: bind with memory="):
            b.apply_memory_limit()


# A process-mode PyFlink worker's metric group (PyFlink's own class): gauges registered under
# add_group("gpu", <index>), read the way the worker reads them when it reports a bundle: after the
# sampler's next sample ("first"), and after the file argv's "lose" names is created (the simulator's
# state_error_when_exists) and the sampler's next sample ("later").
GAUGES = """
import json, sys
from pyflink.fn_execution.metrics.process.metric_impl import GenericMetricGroup
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
from flink_gpu.nvml import sample_metrics_now
root = GenericMetricGroup(None, None)
args = json.loads(sys.argv[1])
binding = bind([GPUInfo("0"), GPUInfo("1")], 2, path=args["path"], library_path=args["library"], memory=args["memory"])
binding.register_metrics(root)
def read():
    out = {}
    for key_group in root._sub_groups:
        for value_group in key_group._sub_groups:
            names, _ = value_group._get_metric_group_names_and_types()
            out[".".join(names)] = {name: gauge() for name, gauge in value_group._flink_gauge.items()}
    return out
assert sample_metrics_now()
first = read()
if args["lose"]:
    open(args["lose"], "x").close()  # the spec's trigger: the GPU is lost from now on
    assert sample_metrics_now()
print(json.dumps({"first": first, "later": read()}))
"""


def read_gauges(path, spec=None, lose=None, library=None, memory=None):
    """What the gauges of a binding of GPUs 0 and 1 read in a fresh process on the simulator (NVML
    initialises once per process): {"first": {"gpu.<index>": {gauge: value}}, "later": ... after the
    file ``lose`` was created}."""
    from conftest import simulated_env

    pytest.importorskip("pyflink", reason="the gauges are registered on PyFlink's metric group")
    env = {**child_env(), **(simulated_env(spec=spec) if spec is not None else simulated_env(devices=2))}
    args = json.dumps({"path": path, "library": library, "lose": lose, "memory": memory})
    proc = subprocess.run([sys.executable, "-c", GAUGES, args], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_register_metrics_adds_integer_gauges_per_bound_gpu(path):
    got = read_gauges(path)
    assert set(got["first"]) == {"gpu.0", "gpu.1"}
    for gauges in got["first"].values():
        assert set(gauges) == {"utilization", "memoryUsed", "temperature", "power", "health"}
        assert all(type(value) is int for value in gauges.values())
        assert 0 <= gauges["utilization"] <= 100 and 30 <= gauges["temperature"] <= 80
        assert 50 <= gauges["power"] <= 700 and gauges["memoryUsed"] >= 0 and gauges["health"] == 0


def test_a_binding_with_a_memory_request_has_a_memory_limit_gauge_in_mib(path):
    got = read_gauges(path, memory="12 gb")
    assert {gauges["memoryLimit"] for gauges in got["first"].values()} == {12 * 1024}


def test_a_gauge_nvml_cannot_answer_is_minus_one(path):
    # (a GPU lost before the binding is never bound: test_bind_never_binds_a_gpu_lost_since_discovery...)
    spec = {
        "devices": [
            {"not_supported": ["utilization", "temperature", "power"]},
            {"not_supported": ["utilization", "temperature", "power", "memory", "memory_v2"]},
        ]
    }
    got = read_gauges(path, spec)["first"]
    assert got["gpu.0"] == {"utilization": -1, "memoryUsed": 0, "temperature": -1, "power": -1, "health": 0}
    assert got["gpu.1"] == {"utilization": -1, "memoryUsed": -1, "temperature": -1, "power": -1, "health": 0}


def test_a_gpu_lost_mid_run_reads_minus_one_with_health_unhealthy(path, tmp_path):
    lose = str(tmp_path / "lost")
    spec = {
        "devices": [
            {
                "utilization": 37,
                "temperature": 55,
                "power": 300,
                "memory_used": 5 * 1024**2,
                "health": {"state_error": "GPU_IS_LOST", "state_error_when_exists": lose},
            },
            {},
        ]
    }
    got = read_gauges(path, spec, lose=lose)
    assert got["first"]["gpu.0"] == {"utilization": 37, "memoryUsed": 5, "temperature": 55, "power": 300, "health": 0}
    assert got["later"]["gpu.0"] == {"utilization": -1, "memoryUsed": -1, "temperature": -1, "power": -1, "health": 2}
    assert got["later"]["gpu.1"]["health"] == 0  # the other GPU goes on


def test_gauges_without_a_loadable_nvml_are_minus_one_with_health_unknown(path, tmp_path):
    got = read_gauges(path, library=str(tmp_path / "no-libnvidia-ml.so.1"))["first"]
    assert all(
        gauges == {"utilization": -1, "memoryUsed": -1, "temperature": -1, "power": -1, "health": 3}
        for gauges in got.values()
    )


# -- handles, holders and bad input ---------------------------------------------------------------


@pytest.mark.parametrize("second_call", ["another taskmanager_pid", "another spelling of the path"])
def test_releasing_one_handle_keeps_what_another_handle_of_the_same_process_holds(path, second_call):
    """The native core knows one process holder per pid and file: a handle of it that is still out keeps
    the GPUs bound, whatever taskmanager_pid or path spelling each call gave."""
    first = bind(infos(1), path=path)
    if second_call == "another taskmanager_pid":
        second = bind(infos(1), taskmanager_pid=os.getppid(), path=path)
    else:
        second = bind(infos(1), path=os.path.join(os.path.dirname(path), ".", os.path.basename(path)))
    assert second.indices == first.indices == ("0",)
    first.release()
    try:
        procs, got = start_workers(path, 1, n=1)  # another worker process of the TaskManager
        stop(procs)
        assert got[0].startswith("error: Could not bind 1 GPU"), f"GPU 0 bound twice: {got}"
    finally:
        second.release()


def test_an_empty_slot_id_is_refused_naming_it(path):
    with pytest.raises(ValueError, match="Invalid slot id ''"):
        bind(infos(1), slot="", path=path)
    assert not os.path.exists(path)


def test_a_count_too_large_for_the_core_is_a_clear_error_naming_it(path):
    with pytest.raises((ValueError, BindingError), match=str(2**64)):
        bind(infos(2), 2**64, path=path)


def test_asking_for_more_gpus_than_given_says_how_many_were_given(path):
    with pytest.raises(BindingError) as caught:
        bind(infos(2), 3, path=path)
    message = str(caught.value)
    # not just "GPU 0 is free; GPU 1 is free": the reason is that 3 is more than the 2 given
    assert "2 GPUs" in message or "only 2" in message, message


def test_a_slot_id_with_control_characters_is_shown_escaped(path):
    """As a bad GPU index is: the message must not carry a newline or a terminal escape sequence."""
    with pytest.raises(ValueError) as caught:
        bind(infos(1), slot="a\x1b[2J\nb", path=path)
    message = str(caught.value)
    assert "\x1b" not in message and "\n" not in message, repr(message)
    assert "a\\x1b[2J\\x0ab" in message


@pytest.mark.parametrize("taskmanager", [0, -3, 2**31])
def test_a_bad_taskmanager_pid_is_refused_naming_the_parameter(path, taskmanager):
    """The core's one pid rule (csrc/base/process_id.hpp), naming bind's parameter."""
    with pytest.raises(ValueError) as caught:
        bind(infos(1), taskmanager_pid=taskmanager, path=path)
    assert str(caught.value) == (
        f"Invalid taskmanager_pid {taskmanager}: it must be a positive process id, at most 2147483647."
    )


@pytest.mark.parametrize("taskmanager", [True, "12", 12.0])
def test_a_taskmanager_pid_that_is_no_int_is_a_type_error(path, taskmanager):
    with pytest.raises(TypeError, match=f"taskmanager_pid must be a process id \\(int\\), got {taskmanager!r}"):
        bind(infos(1), taskmanager_pid=taskmanager, path=path)


class EmbeddedMetricGroup:
    """PyFlink's thread-mode metric group as the binding sees it (the real one wraps Java through pemja,
    which loads only inside the TaskManager JVM; the cluster test uses it): Java-held values only."""

    __module__ = "pyflink.fn_execution.metrics.embedded.metric_impl"

    def __init__(self, scope=()):
        self.scope, self.values, self.groups = scope, {}, []

    def add_group(self, name, extra=None):
        group = EmbeddedMetricGroup(self.scope + (name, extra))
        self.groups.append(group)
        return group

    def gauge(self, name, obj):
        raise AssertionError("a Python gauge on a thread-mode group can crash the TaskManager JVM")

    def distribution(self, name):
        group = self

        class Value:
            def update(self, value):
                group.values.setdefault(name, []).append(value)

        return Value()


def _class_source(name: str) -> str:
    """The source of this file's class ``name`` (inspect cannot find one whose __module__ is PyFlink's)."""
    import ast

    text = open(__file__, encoding="utf-8").read()
    [node] = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == name]
    return ast.get_source_segment(text, node)


#: EmbeddedMetricGroup's source, for a child interpreter
EMBEDDED_GROUP = _class_source("EmbeddedMetricGroup")


def test_thread_mode_gauges_are_java_held_values_pushed_by_update_metrics(path, tmp_path):
    from flink_gpu import binding as bindings
    from flink_gpu.nvml import sample_metrics_now

    group = EmbeddedMetricGroup()
    # no loadable NVML here: every reading is -1 and health 3, what matters is when values are pushed
    with bind(infos(2), 1, path=path, library_path=str(tmp_path / "no-libnvidia-ml.so.1")) as b:
        b.register_metrics(group)
        [gpu] = group.groups
        assert gpu.scope == ("gpu", "0") and set(gpu.values) == set(bindings.GAUGES)
        unknown = {name: [-1] for name in bindings.GAUGES} | {"health": [3]}
        assert gpu.values == unknown  # pushed once when registered
        # two samples since the registration: its GPUs' values are in (here: unknown, for good), so
        # pushes are paced from the next one on
        assert sample_metrics_now() and sample_metrics_now()
        b.update_metrics()  # pushes when the registration's push predates the samples
        pushed = {name: list(values) for name, values in gpu.values.items()}
        b.update_metrics()  # within a second of the last push: nothing pushed
        assert gpu.values == pushed
        b.update_metrics(force=True)
        assert gpu.values == {name: values + values[:1] for name, values in pushed.items()}
        assert all(set(values) == set(unknown[name]) for name, values in gpu.values.items())


def test_thread_mode_pushes_the_first_sample_when_it_comes(path, tmp_path):
    """Before the process's first sample update_metrics pushes on every call (a short job's gauges would
    otherwise keep the registration's unknown values for a second); in a fresh process, as a
    TaskManager's first slot, whose first sample is held in the simulated driver until the test lets go."""
    from conftest import run_python, simulated_env

    stuck = str(tmp_path / "stuck")
    spec = {"devices": [{"utilization": 7, "power": 100}], "hang": [{"query": "power", "while_exists": stuck}]}
    got = run_python(
        f"""
import json
from flink_gpu import GPUInfo, simulator
from flink_gpu.binding import bind
from flink_gpu.nvml import sample_metrics_now
{EMBEDDED_GROUP}
group = EmbeddedMetricGroup()
b = bind([GPUInfo("0")], 1, path={path!r})
with simulator.hanging({stuck!r}):
    b.register_metrics(group)  # its first sample is stuck in the power query
    b.update_metrics()  # no sample yet: pushed again
    before = {{name: list(values) for name, values in group.groups[0].values.items()}}
assert sample_metrics_now()
b.update_metrics()  # within a second of the last push, but the first sample has come
print(json.dumps({{"before": before, "after": group.groups[0].values}}))
""",
        env={**child_env(), **simulated_env(spec=spec)},
    )
    got = json.loads(got.stdout.splitlines()[-1])
    assert got["before"]["health"] == [3, 3] and got["before"]["power"] == [-1, -1]
    assert got["after"]["health"] == [3, 3, 0] and got["after"]["power"] == [-1, -1, 100]
    assert got["after"]["utilization"][-1] == 7


def test_thread_mode_pushes_the_first_sample_of_a_slot_that_binds_after_another(path, tmp_path):
    """A TaskManager's second slot binds after the process has sampled the first one's GPU: its
    registration pushes unknown values, and its next update_metrics pushes its GPU's first sample when
    it comes (it waited a second, or for ever on a short job, when the process had sampled anything)."""
    from conftest import run_python, simulated_env

    stuck = str(tmp_path / "stuck")
    spec = {
        "devices": [{"power": 50}, {"utilization": 9, "power": 100}],
        "hang": [{"query": "power", "device": 1, "while_exists": stuck}],
    }
    got = run_python(
        f"""
import json, time
from flink_gpu import GPUInfo, simulator
from flink_gpu.binding import bind
from flink_gpu.nvml import sample_metrics_now, sampled_metrics
{WAITING_SOURCE}
{EMBEDDED_GROUP}
first, second = EmbeddedMetricGroup(), EmbeddedMetricGroup()
a = bind([GPUInfo("0")], 1, path={path!r})
a.register_metrics(first)
assert sample_metrics_now()
b = bind([GPUInfo("1")], 1, path={path!r})
with simulator.hanging({stuck!r}):
    b.register_metrics(second)  # GPU 1's first sample is stuck in its power query
# GPU 1's first sample comes: a read the sampler waited its margin for may still be late on a loaded
# machine, and the one after it is not
wait_until(lambda: not sample_metrics_now() or sampled_metrics("1").health != 3, "GPU 1's first sample has come", 10)
b.update_metrics()  # within a second of the registration's push, but GPU 1's first sample has come
print(json.dumps(second.groups[0].values))
""",
        env={**child_env(), **simulated_env(spec=spec)},
    )
    values = json.loads(got.stdout.splitlines()[-1])
    assert values["health"][0] == 3 and values["power"][0] == -1  # the registration's push
    assert values["health"][-1] == 0 and values["power"][-1] == 100 and values["utilization"][-1] == 9


@pytest.mark.filterwarnings("ignore")  # importing PyFlink warns about its own deprecations
def test_process_mode_gauges_say_they_travel_with_bundles_and_name_the_setting(path, caplog):
    import logging

    pytest.importorskip("pyflink", reason="the gauges are registered on PyFlink's metric group")
    from pyflink.fn_execution.metrics.process.metric_impl import GenericMetricGroup

    with bind(infos(1), path=path) as b, caplog.at_level(logging.INFO, logger="flink_gpu.binding"):
        b.register_metrics(GenericMetricGroup(None, None))  # a process-mode worker's group
    assert "python.fn-execution.bundle.size" in caplog.text and "when a bundle ends" in caplog.text


def test_register_metrics_without_a_metric_group_registers_nothing(path, caplog):
    import logging

    with bind(infos(1), path=path) as b, caplog.at_level(logging.INFO, logger="flink_gpu.binding"):
        b.register_metrics(None)  # PyFlink with python.metric.enabled: false
        b.update_metrics()
    assert "python.metric.enabled is false" in caplog.text


class ForkedChild:
    """``body()`` run in a forked child of this process (a DataLoader worker); :meth:`report` waits for it and
    gives what it returned, or ``"error: <the BindingError>"``."""

    def __init__(self, body):
        self._read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.close(self._read)
                try:
                    got = body()
                except BindingError as error:
                    got = f"error: {error}"
                os.write(write, got.encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)

    def report(self) -> str:
        _, status = os.waitpid(self.pid, 0)
        with os.fdopen(self._read, "rb") as reader:
            got = reader.read().decode()
        assert os.waitstatus_to_exitcode(status) == 0, got
        return got


def test_a_forked_child_does_not_share_a_binding_its_parent_released(path):
    """The child's view of its parent's binding is taken at fork: after the parent's release() another
    worker binds that GPU alone, and the child must not be handed it as well."""
    parent = bind(infos(1), path=path)
    parent_done, parent_done_w = os.pipe()

    def dataloader_worker():  # binds after its parent closed and another slot took the GPU
        os.close(parent_done_w)
        os.read(parent_done, 1)
        return ",".join(bind(infos(1), path=path).indices)

    child = ForkedChild(dataloader_worker)
    os.close(parent_done)
    parent.release()
    procs, got = start_workers(path, 1, n=1)  # another worker process now binds GPU 0 alone
    try:
        assert got == ["0"]
        os.write(parent_done_w, b"x")
        os.close(parent_done_w)
        report = child.report()
    finally:
        stop(procs)
    assert report.startswith("error:"), f"the forked child was handed GPU {report}, bound alone by another worker"


def test_a_bindings_path_whose_real_path_changed_binds_alive_in_the_new_file(tmp_path):
    """A directory symlink retargeted between two binds of one process (a relative path after chdir() is the
    same): the second bind writes into the file the path names now, and its lines must be judged alive
    there, else another worker binds the same GPU alone."""
    old, new, link = tmp_path / "old", tmp_path / "new", tmp_path / "current"
    old.mkdir()
    new.mkdir()
    new_file = str(new / "coordination.bindings")
    bind(infos(1), path=new_file).release()  # a holder came and went there: its lease file stays
    link.symlink_to(old)
    spelled = str(link / "coordination.bindings")
    first = bind(infos(1), path=spelled)
    link.unlink()
    link.symlink_to(new)
    second = bind(infos(1), path=spelled)
    try:
        assert second.indices == ("0",)
        procs, got = start_workers(new_file, 1, n=1)
        stop(procs)
        assert got != ["0"], (
            f"another worker was given GPU 0 alone while this process binds it in {new_file}: {open(new_file).read()!r}"
        )
    finally:
        first.release()
        second.release()


# A slot's thread binds and ends without release() (its end frees the slot); then the kernel gives a new
# thread the same id (ns_last_pid: its tid reuse, made to happen at once). Each test adds what happens then.
TID_REUSE_SETUP = (
    WAITING_SOURCE
    + """
import json, os, sys, threading, time
from flink_gpu import GPUInfo, binding
from flink_gpu.binding import bind
path = sys.argv[1]
gpus = [GPUInfo("0"), GPUInfo("1")]
handles = []
first = threading.Thread(target=lambda: handles.append(bind(gpus, slot="s", taskmanager_pid=os.getpid(), path=path)))
first.start()
first.join()
wait_until(lambda: not os.path.exists(f"/proc/self/task/{first.native_id}"), "the first thread has ended", 10)
try:
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(first.native_id - 1))
except OSError as error:
    print(json.dumps({"skip": f"cannot set ns_last_pid: {error}"}))
    sys.exit(0)
# start times count clock ticks (10 ms): a thread id reused within one tick cannot be told apart (the
# kernel reuses ids only after going round the pid space; the test forces it at once)
time.sleep(0.05)
out, bound, done = {}, threading.Event(), threading.Event()
"""
)


def with_reused_thread_id(then, path):
    """What ``TID_REUSE_SETUP`` + ``then`` prints, run in a fresh pid namespace until the kernel gives the
    second thread the first one's id (it sometimes hands out another); skips where that cannot be done."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    for _ in range(20):
        if os.path.exists(path):
            os.unlink(path)
        proc = subprocess.run(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                sys.executable,
                "-c",
                TID_REUSE_SETUP + textwrap.dedent(then),
                path,
            ],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0 and not proc.stdout:
            pytest.skip(f"cannot create a pid namespace here: {proc.stderr.strip()}")
        out = json.loads(proc.stdout)
        if "skip" in out or out["reused"]:
            break
    if "skip" in out or not out["reused"]:
        pytest.skip(out.get("skip", "the kernel did not give the thread id again"))
    return out


def test_a_thread_reusing_an_ended_binders_id_frees_its_binding_on_release(path):
    out = with_reused_thread_id(
        """
        def second():
            out["reused"] = threading.get_native_id() == first.native_id
            bind(gpus, slot="s", taskmanager_pid=os.getpid(), path=path).release()
            out["bound_after_release"] = sorted(e.index for e in binding.snapshot(path).entries if e.alive)
            done.wait(30)
        t = threading.Thread(target=second)
        t.start()
        wait_until(lambda: "bound_after_release" in out or not t.is_alive(), "the second thread has released", 30)
        done.set()
        t.join()
        print(json.dumps(out))
        """,
        path,
    )
    assert out["bound_after_release"] == [], "release() left the slot's GPU bound while its thread lives"


def test_releasing_an_ended_threads_handle_keeps_what_a_thread_reusing_its_id_binds(path):
    # the ended thread's handle is released while the new thread binds (close() on another thread, as
    # handles allow)
    out = with_reused_thread_id(
        """
        def second():
            out["reused"] = threading.get_native_id() == first.native_id
            with bind(gpus, slot="s", taskmanager_pid=os.getpid(), path=path):
                bound.set()
                done.wait(30)
        t = threading.Thread(target=second)
        t.start()
        bound.wait(30)
        handles[0].release()
        out["bound_while_second_lives"] = sorted(e.index for e in binding.snapshot(path).entries if e.alive)
        done.set()
        t.join()
        print(json.dumps(out))
        """,
        path,
    )
    assert out["bound_while_second_lives"] == ["0"], (
        "the ended thread's release() removed the line of the live thread that reuses its id"
    )


def hold_lock(path):
    """flock(1) holding LOCK_EX on ``path`` until killed (-o: the sleep does not inherit the lock)."""
    holder = subprocess.Popen(
        ["flock", "-o", str(path), "-c", "echo locked; exec sleep 600"], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_a_release_that_timed_out_can_be_retried(path):
    handle = bind(infos(2), path=path, timeout=0.2)
    holder = hold_lock(path)
    try:
        with pytest.raises(TimeoutError):
            handle.release()
    finally:
        holder.kill()
        holder.wait(10)
    handle.release()
    assert binding.snapshot(path).entries == (), "the GPU stays bound after a retried release()"
    assert "released" in repr(handle)


def test_a_forked_child_of_a_holder_binds_in_another_file_as_a_holder_of_its_own(tmp_path):
    """Inheritance is of the file the parent bound in: elsewhere the child is a holder like any other."""
    parents, elsewhere = str(tmp_path / "a.bindings"), str(tmp_path / "b.bindings")
    parent = bind(infos(2), path=parents)

    def bind_elsewhere():
        with bind(infos(2), path=elsewhere) as own:
            return f"{','.join(own.indices)} {own.holder}"

    child = ForkedChild(bind_elsewhere)
    report = child.report()
    parent.release()
    assert report == f"0 pid {child.pid}"


def test_a_forked_child_binds_as_a_holder_of_its_own_once_its_parent_released(path):
    """The inheritance lasts as long as the parent's binding in the file: after its release() the child
    binds like any holder (topped up when it asks for more), instead of being told that it binds nothing."""
    parent = bind(infos(2), path=path)
    released, released_w = os.pipe()

    def dataloader_worker():
        os.close(released_w)
        os.read(released, 1)
        first = bind(infos(2), path=path)
        more = bind(infos(2), 2, path=path)
        got = f"{','.join(first.indices)} {','.join(more.indices)} {more.holder}"
        first.release()
        more.release()
        return got

    child = ForkedChild(dataloader_worker)
    os.close(released)
    parent.release()
    os.close(released_w)
    assert child.report() == f"0 0,1 pid {child.pid}"
    assert binding.snapshot(path).entries == ()


# A holder forks a child and is SIGKILLed; the child, handed to a reaper, binds once its parent is gone.
ORPHANED_CHILD = (
    WAITING_SOURCE
    + r"""
import json, os, signal, sys, time
from flink_gpu import GPUInfo, binding
from flink_gpu.binding import bind
path = sys.argv[1]
gpus = [GPUInfo("0"), GPUInfo("1")]
parent = bind(gpus, path=path)
me = os.getpid()
if os.fork() == 0:
    # gone once its lease is free: the child is handed to the reaper as the parent's first thread ends,
    # while another of its threads (NVML's worker) may still hold its files, the lease among them
    wait_until(lambda: os.getppid() != me and not any(e.alive and e.pid == me for e in binding.snapshot(path).entries),
               "the parent was killed", 30)
    try:
        own = bind(gpus, path=path)
        print(json.dumps({"pid": os.getpid(), "parent": me, "bound": list(own.indices), "holder": own.holder}))
    except Exception as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
    os._exit(0)
os.kill(me, signal.SIGKILL)
"""
)


def test_a_forked_child_whose_parent_died_binds_as_a_holder_of_its_own(path):
    # the child holds the parent's stdout: reading to its end waits for the child
    done = subprocess.run(
        [sys.executable, "-c", ORPHANED_CHILD, path], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    got = json.loads(done.stdout)
    assert (got.get("bound"), got.get("holder")) == (["0"], f"pid {got.get('pid')}"), got


# Run as pid 1 of a fresh pid namespace: a holder binds, forks a child and dies; a stranger is then given
# the holder's pid (ns_last_pid) and binds in the same file; then the child binds.
PID_REUSED_BY_A_STRANGER = r"""
import json, os, subprocess, sys
path = sys.argv[1]
HOLDER = '''
import json, os, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
from flink_gpu.coordination import process_start_time
path = sys.argv[1]
gpus = [GPUInfo("0"), GPUInfo("1")]
holder = bind(gpus, path=path)
child = os.fork()
if child == 0:
    sys.stdin.readline()  # the stranger binds first
    own = bind(gpus, path=path)
    print(json.dumps({"pid": os.getpid(), "bound": list(own.indices), "holder": own.holder}), flush=True)
    os._exit(0)
print(json.dumps({"pid": os.getpid(), "start": process_start_time(os.getpid()), "child": child}), flush=True)
os._exit(0)  # dies without a release: its lines stay, dead
'''
STRANGER = '''
import json, os, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
from flink_gpu.coordination import process_start_time
own = bind([GPUInfo("0"), GPUInfo("1")], path=sys.argv[1])
print(json.dumps({"pid": os.getpid(), "start": process_start_time(os.getpid()), "bound": list(own.indices),
                  "holder": own.holder}), flush=True)
sys.stdin.read()
'''
def run(code):
    pipe = subprocess.PIPE
    return subprocess.Popen([sys.executable, "-c", code, path], stdin=pipe, stdout=pipe, text=True)
holder = run(HOLDER)
out = {"holder": json.loads(holder.stdout.readline())}
holder.wait()
try:
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(out["holder"]["pid"] - 1))
except OSError as error:
    print(json.dumps({"skip": f"cannot set ns_last_pid: {error}"}))
    sys.exit(0)
stranger = run(STRANGER)
out["stranger"] = json.loads(stranger.stdout.readline())
holder.stdin.write("bind\n")
holder.stdin.flush()
out["child"] = json.loads(holder.stdout.readline())
stranger.stdin.close()
stranger.wait()
out["reused"] = out["stranger"]["pid"] == out["holder"]["pid"] and out["stranger"]["start"] != out["holder"]["start"]
print(json.dumps(out))
"""


def test_a_forked_child_whose_parents_pid_a_stranger_reuses_binds_as_a_holder_of_its_own(path):
    # the child matched its parent's lines by pid (and namespace) alone: the stranger's live lines passed
    # for its parent's, and the child shared the stranger's GPU
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    for _ in range(20):  # until the kernel gives the stranger the holder's pid (it sometimes gives another)
        if os.path.exists(path):
            os.unlink(path)
        proc = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PID_REUSED_BY_A_STRANGER, path],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0 and not proc.stdout:
            pytest.skip(f"cannot create a pid namespace here: {proc.stderr.strip()}")
        out = json.loads(proc.stdout)
        if "skip" in out or out["reused"]:
            break
    if "skip" in out or not out["reused"]:
        pytest.skip(out.get("skip", "the kernel did not give the holder's pid again"))
    pid = out["holder"]["pid"]
    assert (out["stranger"]["bound"], out["stranger"]["holder"]) == (["0"], f"pid {pid}"), out
    child = out["child"]
    assert (child["bound"], child["holder"]) == (["1"], f"pid {child['pid']}"), out


@pytest.mark.parametrize("spelling", ["00:01", "0:", ":1", "0:1:2"])
def test_another_spelling_of_a_gpu_or_unit_is_refused_naming_it(path, spelling):
    """'00:01' would be bound alone beside a holder of GPU 0."""
    with bind(infos(1), path=path):
        with pytest.raises(ValueError, match=f"Invalid GPU index '{spelling}'"):
            bind([GPUInfo(spelling)], slot="s", path=path)


def test_errors_about_the_bindings_file_and_its_lease_file_call_them_so(path, caplog):
    os.mkdir(path + ".lease")  # the lease cannot be taken: the binding says why, naming that file
    with caplog.at_level("WARNING", logger="flink_gpu.binding"):
        bind(infos(1), path=path).release()
    assert f"the lease file {path}.lease: " in caplog.text and "coordination file" not in caplog.text
    os.unlink(path)
    os.mkdir(path)
    with pytest.raises(OSError) as caught:
        bind(infos(1), path=path)
    assert f"the bindings file {path}: " in str(caught.value) and "coordination file" not in str(caught.value)


def test_asking_for_more_names_what_the_holder_binds_already_as_gpus(path):
    with bind(infos(2), path=path):
        with pytest.raises(BindingError) as caught:
            bind(infos(2), 3, path=path)
    assert "; it binds GPU 0 already" in str(caught.value), str(caught.value)


def test_a_huge_slot_id_is_shown_by_its_start_and_length(path):
    with pytest.raises(ValueError) as caught:
        bind(infos(1), slot="x" * 1_000_000, path=path)
    message = str(caught.value)
    assert len(message) < 300 and f"'{'x' * 64}...' (1000000 bytes)" in message, message[:300]


def test_a_taskmanager_pid_that_is_no_process_is_refused(path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(ValueError, match=f"taskmanager_pid {gone.pid} is not a running process"):
        bind(infos(1), taskmanager_pid=gone.pid, path=path)
    assert not os.path.exists(path)


# -- a binding made for a TaskManager ends with it (docs/design.md §9.3, §9.4) ----------------------------

ONE_GPU = {"devices": [{}]}  # 80 GiB, idle


def test_a_binding_whose_taskmanager_was_sigkilled_counts_for_no_other_bind(path):
    """A process-mode TaskManager SIGKILLed (as the OOM killer does) while its worker, reparented, lives on
    with GPU 0 and 60 GiB of its 80 (stopped: it cannot give them up itself). Another holder binds GPU 0 with
    60 GiB: the orphan's line counts for nothing, and stays while the orphan runs, to name it."""
    with orphaned_worker(path, ONE_GPU, memory="60 gb", stopped=True) as orphan:
        assert orphan.bound == ["0"]
        [line] = binding.snapshot(path).entries
        assert (line.pid, line.taskmanager, line.state, line.alive) == (
            orphan.pid,
            orphan.taskmanager,
            "taskmanager gone",
            False,
        )
        got = bind_on_state(path, ONE_GPU, 1, 1, memory="60 gb")
        assert (got.get("bound"), got.get("memory_limit")) == (["0"], 60 * GiB), got
        assert [e.state for e in binding.snapshot(path).entries if e.pid == orphan.pid] == ["taskmanager gone"]
    # once the orphan is gone, the next bind removes its line
    bind_on_state(path, ONE_GPU, 1, 1)
    assert not [e for e in binding.snapshot(path).entries if e.pid == orphan.pid]


def test_a_worker_gives_its_binding_up_when_its_taskmanager_dies(path):
    with orphaned_worker(path, ONE_GPU, memory="60 gb") as orphan:
        said = (
            f"TaskManager pid {orphan.taskmanager} is gone: the binding of GPU(s) 0 to pid {orphan.pid} in {path} was "
            "released."
        )
        orphan.read_stderr(until=said)  # logged once the lines went
        assert binding.snapshot(path).entries == ()
        stderr = orphan.finish()
    assert stderr.count(" is gone") == 1, stderr


def test_a_shortage_of_memory_names_an_orphan_that_still_runs_on_the_gpu_and_how_to_end_it(path):
    """The orphan's line no longer counts, but its allocations do: 70 GiB of GPU 0's 80 are used. A bind of
    20 GiB is refused saying who holds the memory and how to end it, not to ask for less."""
    with orphaned_worker(path, ONE_GPU, memory="60 gb", stopped=True) as orphan:
        refused = bind_on_state(path, {"devices": [{"memory_used": 70 * GiB}]}, 1, 1, memory="20 gb")
    error = refused["error"]
    assert "GPU 0 is free, none of its 80 GiB requested, 10 GiB free." in error, error
    assert (
        f" pid {orphan.pid}, a worker of TaskManager {orphan.taskmanager} which is gone, still runs on GPU 0: end "
        f"it (kill {orphan.pid}). Bindings file: {path}." in error
    ), error
    assert "Ask for less memory" not in error


# A worker binds GPU 0 in the bindings file argv[1] for its TaskManager (its parent); a child it forks (a
# DataLoader worker) binds GPU 0 in argv[2] as a holder of its own, for the same TaskManager. Each prints its
# pid; both hold until stdin closes.
FORKING_WORKER = """
import json, os, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
first, second = sys.argv[1:3]
taskmanager = os.getppid()
bind([GPUInfo("0")], path=first, taskmanager_pid=taskmanager)
child = os.fork()
if child == 0:
    bind([GPUInfo("0")], path=second, taskmanager_pid=taskmanager)
    print(json.dumps({"child": os.getpid()}), flush=True)
    sys.stdin.read()
    os._exit(0)
print(json.dumps({"worker": os.getpid()}), flush=True)
sys.stdin.read()
os.waitpid(child, 0)
"""


def test_a_forked_child_watches_the_taskmanager_for_its_own_binding_and_never_for_its_parents(path):
    """The worker is stopped when its TaskManager dies: its binding stays until it runs again and gives it
    up itself. Its child, which forked while the worker's watch ran, gives up its own binding at once and
    leaves the worker's alone."""
    other = path + "2"
    taskmanager = subprocess.Popen(
        [sys.executable, "-c", TASKMANAGER, FORKING_WORKER, path, other],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids, stderr = {}, ""
    said = "TaskManager pid {} is gone: the binding of GPU(s) 0 to pid {} in {} was released."
    try:
        for _ in range(2):
            pids.update(json.loads(taskmanager.stdout.readline()))
        worker, tm = pids["worker"], taskmanager.pid
        stop_process(worker)
        taskmanager.kill()
        taskmanager.wait(30)
        stderr = read_until(taskmanager.stderr, stderr, said.format(tm, pids["child"], other))
        assert binding.snapshot(other).entries == ()  # logged once its lines went
        assert [(e.pid, e.state) for e in binding.snapshot(path).entries] == [(worker, "taskmanager gone")]
        os.kill(worker, signal.SIGCONT)
        stderr = read_until(taskmanager.stderr, stderr, said.format(tm, worker, path))
        assert binding.snapshot(path).entries == ()
    finally:
        for pid in pids.values():
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGCONT)
        taskmanager.stdin.close()  # the worker and its child end
        stderr = read_until(taskmanager.stderr, stderr, "\0")  # to its end: both have ended
        taskmanager.stdout.close()
        taskmanager.stderr.close()
    assert stderr.count(" is gone") == 2, stderr
