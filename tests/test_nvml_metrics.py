"""Live GPU readings through flink_gpu.nvml (Library.read_metric, METRICS) on the bundled NVML
simulator: the native path, in a fresh process per host (NVML reads its configuration once)."""

import json

import pytest

from conftest import run_python, simulated_env
from flink_gpu import nvml
from support.waiting import SOURCE as WAITING_SOURCE

# Reads every metric of INDICES SAMPLES times, INTERVAL seconds apart (set before it); prints JSON
# {"readings": [{index: [utilization, memory.used, temperature, power]}, ...], "types": [...]}.
READ = """
import json, time
from flink_gpu import nvml
library = nvml.open_library()
readings, types = [], set()
for i in range(SAMPLES):
    if i:
        time.sleep(INTERVAL)
    sample = {}
    for index in INDICES:
        values = [library.read_metric(index, metric) for metric in nvml.METRICS]
        types.update(type(v).__name__ for v in values)
        sample[index] = values
    readings.append(sample)
print(json.dumps({"readings": readings, "types": sorted(types)}))
"""


def read(indices, samples=1, interval=0.0, **sim):
    settings = f"INDICES, SAMPLES, INTERVAL = {list(indices)!r}, {samples!r}, {interval!r}\n"
    proc = run_python(settings + READ, env=simulated_env(**sim))
    found = json.loads(proc.stdout)
    assert found["types"] == ["int"]
    return found["readings"]


def read_once(indices, **sim):
    [sample] = read(indices, **sim)
    return sample


def test_the_metrics_and_their_order():
    assert nvml.METRICS == ("utilization", "memory.used", "temperature", "power")


def test_every_gpu_reads_within_the_simulated_ranges():
    sample = read_once(["0", "1", "2", "3"], devices=4)
    for utilization, memory_used, temperature, power in sample.values():
        assert 0 <= utilization <= 100 and 30 <= temperature <= 80 and 50 <= power <= 700
        assert memory_used == 0


def test_utilization_temperature_and_power_change_over_time():
    samples = read(["0"], samples=11, interval=0.2, devices=1)
    for position, metric in enumerate(nvml.METRICS):
        seen = {sample["0"][position] for sample in samples}
        expected_kinds = 1 if metric == "memory.used" else 2  # memory stays as the spec has it
        assert min(len(seen), 2) == expected_kinds, (metric, seen)


@pytest.mark.parametrize("process_struct", ["v2", "r535"])
def test_pinned_readings_in_their_units(process_struct):
    spec = {
        "process_struct": process_struct,
        "devices": [
            {"utilization": 37, "temperature": 55, "power": 250.5, "memory_used": (3 << 20) + 5},
            {"utilization": 100, "temperature": 0, "power": 0.499, "memory_total": 1 << 20, "memory_used": 1 << 20},
        ],
    }
    samples = read(["0", "1"], samples=2, interval=0.3, spec=spec)
    for sample in samples:  # pinned: the same at every reading
        assert sample == {"0": [37, 3, 55, 251], "1": [100, 1, 0, 0]}


NOT_SUPPORTED = ["utilization", "temperature", "power", "memory", "memory_v2"]


def test_every_fault_is_minus_one_without_raising():
    spec = {
        "devices": [
            {"not_supported": NOT_SUPPORTED},
            {"no_permission": NOT_SUPPORTED},
            {"fault": "GPU_IS_LOST"},
            {"health": {"state_error": "GPU_IS_LOST"}},
            {"health": {"state_error": "RESET_REQUIRED"}},
            {"fault": "NO_PERMISSION"},
            {"not_supported": ["power"], "utilization": 5, "temperature": 40, "memory_used": 1 << 20},
        ]
    }
    sample = read_once([str(i) for i in range(7)], spec=spec)
    assert [sample[str(i)] for i in range(6)] == [[-1, -1, -1, -1]] * 6
    assert sample["6"] == [5, 1, 40, -1]  # one query withheld, the others read


def test_a_driver_refusing_the_versioned_temperature_query_is_read_through_the_original():
    sample = read_once(["0"], spec={"devices": [{"temperature": 61, "not_supported": ["temperature_v"]}]})
    assert sample["0"][2] == 61


def test_an_index_the_library_does_not_have_is_minus_one():
    sample = read_once(["4", "0:0", "00", "01", "-1", "", "GPU-0", "0:", "1 "], devices=2)
    assert set(map(tuple, sample.values())) == {(-1, -1, -1, -1)}


MIG_HOST = {
    "devices": [
        {
            "utilization": 50,
            "temperature": 61,
            "power": 300,
            "memory_used": 1 << 20,
            "mig": {"mode": "enabled", "instances": [{"slot": 2, "memory_used": 5 << 20}, {"slot": 5}]},
        },
        {"utilization": 20},
    ]
}


def test_a_mig_unit_reads_its_own_memory_and_its_gpus_temperature_and_power():
    sample = read_once(["0:2", "0:5", "0", "0:3", "1"], spec=MIG_HOST)
    assert sample["0:2"] == [-1, 5, 61, 300]  # no utilization per MIG unit
    assert sample["0:5"] == [-1, 0, 61, 300]
    assert sample["0"] == [-1, 1, 61, 300]  # the GPU itself: no utilization in MIG mode
    assert sample["0:3"] == [-1, -1, -1, -1]  # an empty slot
    assert sample["1"][0] == 20


def test_unprivileged_a_mig_gpus_memory_is_withheld_but_its_units_answer():
    sample = read_once(["0", "0:2"], spec={**MIG_HOST, "unprivileged": True})
    assert sample["0"][1] == -1 and sample["0:2"][1] == 5


def test_a_forked_child_reads_through_the_library_it_inherited():
    proc = run_python(
        """
        import os
        from flink_gpu import nvml
        library = nvml.open_library()
        before = library.read_metric("1", "temperature")
        pid = os.fork()
        if pid == 0:
            os._exit(0 if library.read_metric("1", "temperature") == before == 42 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """,
        env=simulated_env(spec={"devices": [{}, {"temperature": 42}]}),
    )
    assert proc.stdout.strip() == "0"


def test_a_metric_name_not_in_metrics_is_a_value_error_listing_them():
    proc = run_python(
        """
        from flink_gpu import nvml
        library = nvml.open_library()
        for metric in ("memory", "Power", "", None, 3):
            try:
                library.read_metric("0", metric)
            except ValueError as error:
                print(error)
        try:
            library.read_metric(0, "power")
        except TypeError as error:
            print(error)
        """,
        env=simulated_env(devices=1),
    )
    lines = proc.stdout.splitlines()
    assert lines[:5] == [
        f"Unknown GPU metric {name}: use one of utilization, memory.used, temperature, power."
        for name in ("'memory'", "'Power'", "''", "None", "3")
    ]
    assert lines[5] == "gpu_index must be a GPU index (str), got 0"


# -- the process's sampler (watch_metrics, sampled_metrics, sample_metrics_now) --------------------


#: the child scripts' wait: support/waiting.py's wait_until, whose ``limit`` (seconds) only bounds it; and a
#: gauge reading's fields, named, as one JSON-able tuple
WAIT_FOR = (
    WAITING_SOURCE
    + """
def shown(index, **at):
    m = nvml.sampled_metrics(index, **at)
    return (m.utilization, m.memory_used, m.temperature, m.power, m.health)
"""
)


def sampler(code, **sim):
    """Runs ``code`` (its last line prints JSON) in a fresh process on the simulator; the parsed JSON."""
    proc = run_python(
        "import json, threading, time\nfrom flink_gpu import nvml, simulator\n" + WAIT_FOR + code,
        env=simulated_env(**sim),
    )
    return json.loads(proc.stdout.splitlines()[-1])


def test_every_gauge_reads_one_shared_snapshot_that_one_nvml_read_per_sample_refreshes():
    got = sampler(
        """
for index in ("0", "1"):
    assert nvml.watch_metrics(index, interval=3600)  # the pace never fires here: samples come from the trigger
assert nvml.sample_metrics_now()
simulator.reset_counters()
def reporter():  # many reporters and bundles, in threads, asking as often as they can
    for _ in range(2000):
        for index in ("0", "1"):
            assert nvml.sampled_metrics(index).health == 0
threads = [threading.Thread(target=reporter) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
asked = simulator.counters()["calls"]
assert nvml.sample_metrics_now()
print(json.dumps({"asked": asked, "sampled": simulator.counters()["calls"]}))
""",
        devices=2,
    )
    assert got["asked"] == {}  # 16000 gauge reads: not one NVML call
    sampled = got["sampled"]
    for function in (
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
    ):
        assert sampled[function] == {"0": 1, "1": 1}, (function, sampled)
    # health findings were read on the first sample; the next one reads only the readings
    assert "nvmlDeviceValidateInforom" not in sampled and "nvmlDeviceGetCount_v2" not in sampled


def test_health_gauges_ok_degraded_unhealthy_and_lost():
    got = sampler(
        """
for index in ("0", "1", "2", "3", "4"):
    nvml.watch_metrics(index)
assert nvml.sample_metrics_now()
print(json.dumps([shown(index) for index in ("0", "1", "2", "3", "4")]))
""",
        spec={
            "devices": [
                {"utilization": 1, "temperature": 40, "power": 100},
                {"utilization": 2, "temperature": 41, "power": 101, "health": {"retired_pages_pending": True}},
                {"utilization": 3, "temperature": 42, "power": 102, "health": {"ecc_uncorrected": 2}},
                {"fault": "GPU_IS_LOST"},
                {"health": {"state_error": "RESET_REQUIRED"}},
            ]
        },
    )
    assert got == [[1, 0, 40, 100, 0], [2, 0, 41, 101, 1], [3, 0, 42, 102, 2], [-1, -1, -1, -1, 2], [-1, -1, -1, -1, 2]]
    assert nvml.GAUGE_HEALTH == ("ok", "degraded", "unhealthy", "unknown")


def test_a_gpu_watched_after_the_first_sample_gets_its_health_at_its_first_sample():
    # thread mode: subtasks of one TaskManager bind (and watch) their GPUs one after another, within the
    # minute between health reads; the later ones were unknown (3) until the next one
    got = sampler(
        """
nvml.watch_metrics("0")
assert nvml.sample_metrics_now()
nvml.watch_metrics("1")
assert nvml.sample_metrics_now()
print(json.dumps([nvml.sampled_metrics(index).health for index in ("0", "1")]))
""",
        spec={"devices": [{}, {"health": {"retired_pages_pending": True}}]},
    )
    assert got == [0, 1]


def test_a_read_that_hangs_holding_the_driver_lock_is_minus_one_and_unknown_and_never_blocks_a_gauge(tmp_path):
    # GPU 1's stuck query holds the driver's lock: GPU 0's read waits for it too (a real driver's
    # global lock), so both are unknown; no gauge call waits for either
    stuck = str(tmp_path / "stuck")
    got = sampler(
        f"""
for index in ("0", "1"):
    nvml.watch_metrics(index, interval=1)
assert nvml.sample_metrics_now()
before = [shown(index) for index in ("0", "1")]
with simulator.hanging({stuck!r}):
    late = nvml.sample_metrics_now(timeout=0.3)  # GPU 1's power query is stuck, GPU 0's behind it
    answered = []
    def gauges():
        for _ in range(1000):
            answered.append(shown("1"))
    reader = threading.Thread(target=gauges, daemon=True)
    reader.start()
    reader.join(timeout=20)
    wait_until(lambda: [shown(index) for index in ("0", "1")] == [(-1, -1, -1, -1, 3)] * 2,
             "both unknown")
# released: the reads go on; health (unknown since the reads were late) with the first health read
# that finds them answering, which may be the next sample's
wait_until(lambda: nvml.sample_metrics_now() and all(nvml.sampled_metrics(i).health != 3 for i in ("0", "1")),
         "read again")
print(json.dumps({{"before": before, "late": late, "gauge_calls": len(answered),
                  "after": [shown(index) for index in ("0", "1")]}}))
""",
        spec={
            "devices": [
                {"power": 100, "temperature": 40, "utilization": 5},
                {"power": 200, "temperature": 50, "utilization": 6},
            ],
            "hang": [{"query": "power", "device": 1, "while_exists": stuck}],
        },
    )
    assert got["before"] == [[5, 0, 40, 100, 0], [6, 0, 50, 200, 0]]
    assert got["late"] is False
    assert got["gauge_calls"] == 1000  # every gauge call answered while the reads were stuck
    assert got["after"] == got["before"]


def test_a_gpu_whose_reads_hang_outside_the_driver_lock_leaves_the_other_gpus_gauges_fresh(tmp_path):
    # one sampler thread per process used to blank every GPU when one stopped answering: GPU 1 stuck in
    # its own channel (the driver lock free) must not stop GPU 0's samples
    stuck = str(tmp_path / "stuck")
    got = sampler(
        f"""
def stuck_gpu():
    return shown("1") == (-1, -1, -1, -1, 3)
for index in ("0", "1"):
    nvml.watch_metrics(index, interval=1)
assert nvml.sample_metrics_now()
before = [shown(index) for index in ("0", "1")]
with simulator.hanging({stuck!r}):
    wait_until(stuck_gpu, "GPU 1 unknown")
    samples = nvml.metrics_samples()
    calls_before = simulator.counters()["calls"]["nvmlDeviceGetPowerUsage"]
    seen = set()
    # a sample under way when the counts were taken may have read GPU 0 before calls_before yet complete
    # after samples: four more samples hold at least three reads of GPU 0 after calls_before, under any load
    def three_more_samples():  # GPU 0 renewed at its pace all along: valid at every look
        seen.add(shown("0"))
        return nvml.metrics_samples() >= samples + 4 and stuck_gpu()
    wait_until(three_more_samples, "samples go on")
    calls = simulator.counters()["calls"]["nvmlDeviceGetPowerUsage"]
    seen.add(shown("0"))
# released: GPU 1 is read again, its health (unknown since its read was late) with the first health
# read that finds it answering, which may be the next sample's
wait_until(lambda: nvml.sample_metrics_now() and nvml.sampled_metrics("1").health != 3, "GPU 1 read again")
print(json.dumps({{"before": before, "seen": sorted(seen), "calls_before": calls_before, "calls": calls,
                  "after": [shown(index) for index in ("0", "1")]}}))
""",
        spec={
            "devices": [
                {"power": 100, "temperature": 40, "utilization": 5},
                {"power": 200, "temperature": 50, "utilization": 6},
            ],
            "driver_lock": False,  # stuck in its own channel, as a real GPU can be
            "hang": [{"query": "power", "device": 1, "while_exists": stuck}],
        },
    )
    assert got["before"] == [[5, 0, 40, 100, 0], [6, 0, 50, 200, 0]]
    assert got["seen"] == [[5, 0, 40, 100, 0]]  # never -1, never health 3
    # GPU 1's stuck query was entered once: no new read (no new thread) while it is outstanding
    assert got["calls"]["1"] == got["calls_before"]["1"] == 2
    assert got["calls"]["0"] >= got["calls_before"]["0"] + 3  # read at each of the samples
    assert got["after"] == got["before"]


def test_a_gpu_whose_read_was_late_shows_its_health_unknown_until_a_health_read_reaches_it(tmp_path):
    # a late GPU is left out of the health read; its findings from before it slowed down showed again
    # (health 0) with its next reading, for as long as it stayed slow. The interval is an hour, so no
    # sample comes between the release and the look.
    stuck = str(tmp_path / "stuck")
    got = sampler(
        f"""
nvml.watch_metrics("0", interval=3600)
assert nvml.sample_metrics_now()
before = shown("0")
with simulator.hanging({stuck!r}):
    assert not nvml.sample_metrics_now(timeout=2)  # its power read hangs: late
    wait_until(lambda: shown("0") == (-1, -1, -1, -1, 3), "GPU 0 late")
wait_until(lambda: nvml.sampled_metrics("0").utilization != -1, "GPU 0's late reading back")
returned = shown("0")
assert nvml.sample_metrics_now()  # a health read reaches it
print(json.dumps({{"before": before, "returned": returned, "after": shown("0")}}))
""",
        spec={
            "devices": [{"power": 100, "temperature": 40, "utilization": 5}],
            "driver_lock": False,
            "hang": [{"query": "power", "device": 0, "while_exists": stuck}],
        },
    )
    assert got["before"] == [5, 0, 40, 100, 0]
    assert got["returned"] == [5, 0, 40, 100, 3]  # its values, its health not read since it slowed
    assert got["after"] == [5, 0, 40, 100, 0]


def test_a_gpu_stuck_outside_the_driver_lock_leaves_the_other_gpus_health_read(tmp_path):
    # a late read on one GPU put off the health read of every GPU of its library: GPU 0, unhealthy (an
    # uncorrectable ECC error) and first watched while GPU 1 is stuck, showed health 3 until GPU 1
    # answered. (The simulator changes a GPU's health at run time only as a state error, which its
    # readings answer too: the reader alone shows that one; a GPU watched later is the real case here,
    # a subtask binding after another's GPU stuck.)
    stuck = str(tmp_path / "stuck")
    got = sampler(
        f"""
def power_calls():
    return simulator.counters()["calls"].get("nvmlDeviceGetPowerUsage", {{}}).get("1", 0)
nvml.watch_metrics("1", interval=1)
assert nvml.sample_metrics_now()
with simulator.hanging({stuck!r}):
    wait_until(lambda: power_calls() == 2, "GPU 1's next read stuck", limit=30)
    nvml.watch_metrics("0", interval=1)
    wait_until(lambda: nvml.sampled_metrics("0").health != 3, "GPU 0's health read", limit=30)
    during = [shown(index) for index in ("0", "1")]
# released: GPU 1 is read, and its health too (with the first health read that finds it answering)
wait_until(lambda: nvml.sample_metrics_now() and nvml.sampled_metrics("1").health != 3, "GPU 1 read again", limit=30)
print(json.dumps({{"during": during, "after": [shown(index) for index in ("0", "1")]}}))
""",
        spec={
            "devices": [
                {"power": 100, "temperature": 40, "utilization": 5, "health": {"ecc_uncorrected": 2}},
                {"power": 200, "temperature": 50, "utilization": 6},
            ],
            "driver_lock": False,  # stuck in its own channel, as a real GPU can be
            "hang": [{"query": "power", "device": 1, "while_exists": stuck}],
        },
    )
    assert got["during"] == [[5, 0, 40, 100, 2], [-1, -1, -1, -1, 3]]
    assert got["after"] == [[5, 0, 40, 100, 2], [6, 0, 50, 200, 0]]


def test_a_metrics_interval_below_the_minimum_is_refused():
    assert nvml.MIN_METRICS_INTERVAL == 1.0 and nvml.DEFAULT_METRICS_INTERVAL == 5.0
    for interval in (0.999, 0, -1, float("nan"), True, "5"):
        with pytest.raises(ValueError, match="at least 1 s"):
            nvml.watch_metrics("0", interval=interval)


def test_a_huge_metrics_interval_still_shows_each_sample_and_a_huge_wait_still_waits():
    # a million days, and no limit on the wait: each sample is shown until the next is due
    got = sampler(
        """
assert nvml.watch_metrics("0", interval=1000000 * 86400)
done = nvml.sample_metrics_now(timeout=float("inf"))
print(json.dumps({"done": done, "shown": shown("0"),
                  "a_day_later": shown("0", at=time.monotonic_ns() + 86400 * 10**9)}))
""",
        spec={"devices": [{"power": 100, "temperature": 40, "utilization": 5}]},
    )
    assert got == {"done": True, "shown": [5, 0, 40, 100, 0], "a_day_later": [5, 0, 40, 100, 0]}


def test_the_sampler_thread_leaves_the_processes_signals_to_its_own_threads():
    # SIGTERM blocked in the main thread, which takes it with sigwait: a reader thread that does not
    # block it would take it instead (its default action ending the process)
    got = sampler(
        """
import os, signal
assert nvml.watch_metrics("0")
assert nvml.sample_metrics_now()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
os.kill(os.getpid(), signal.SIGTERM)
print(json.dumps(signal.sigwait({signal.SIGTERM})))
""",
        devices=1,
    )
    assert got == 15
