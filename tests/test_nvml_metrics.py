"""Live GPU readings through flink_gpu.nvml (Library.read_metric, METRICS) on the bundled NVML
simulator: the native path, in a fresh process per host (NVML reads its configuration once)."""

import json

import pytest

from flink_gpu import nvml

from conftest import run_python, simulated_env

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
    spec = {"process_struct": process_struct, "devices": [
        {"utilization": 37, "temperature": 55, "power": 250.5, "memory_used": (3 << 20) + 5},
        {"utilization": 100, "temperature": 0, "power": 0.499, "memory_total": 1 << 20, "memory_used": 1 << 20}]}
    samples = read(["0", "1"], samples=2, interval=0.3, spec=spec)
    for sample in samples:  # pinned: the same at every reading
        assert sample == {"0": [37, 3, 55, 251], "1": [100, 1, 0, 0]}


NOT_SUPPORTED = ["utilization", "temperature", "power", "memory", "memory_v2"]


def test_every_fault_is_minus_one_without_raising():
    spec = {"devices": [
        {"not_supported": NOT_SUPPORTED},
        {"no_permission": NOT_SUPPORTED},
        {"fault": "GPU_IS_LOST"},
        {"health": {"state_error": "GPU_IS_LOST"}},
        {"health": {"state_error": "RESET_REQUIRED"}},
        {"fault": "NO_PERMISSION"},
        {"not_supported": ["power"], "utilization": 5, "temperature": 40, "memory_used": 1 << 20},
    ]}
    sample = read_once([str(i) for i in range(7)], spec=spec)
    assert [sample[str(i)] for i in range(6)] == [[-1, -1, -1, -1]] * 6
    assert sample["6"] == [5, 1, 40, -1]  # one query withheld, the others read


def test_a_driver_refusing_the_versioned_temperature_query_is_read_through_the_original():
    sample = read_once(["0"], spec={"devices": [{"temperature": 61, "not_supported": ["temperature_v"]}]})
    assert sample["0"][2] == 61


def test_an_index_the_library_does_not_have_is_minus_one():
    sample = read_once(["4", "0:0", "00", "01", "-1", "", "GPU-0", "0:", "1 "], devices=2)
    assert set(map(tuple, sample.values())) == {(-1, -1, -1, -1)}


MIG_HOST = {"devices": [
    {"utilization": 50, "temperature": 61, "power": 300, "memory_used": 1 << 20,
     "mig": {"mode": "enabled", "instances": [{"slot": 2, "memory_used": 5 << 20}, {"slot": 5}]}},
    {"utilization": 20}]}


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
    proc = run_python("""
        import os
        from flink_gpu import nvml
        library = nvml.open_library()
        before = library.read_metric("1", "temperature")
        pid = os.fork()
        if pid == 0:
            os._exit(0 if library.read_metric("1", "temperature") == before == 42 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """, env=simulated_env(spec={"devices": [{}, {"temperature": 42}]}))
    assert proc.stdout.strip() == "0"


def test_a_metric_name_not_in_metrics_is_a_value_error_listing_them():
    proc = run_python("""
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
        """, env=simulated_env(devices=1))
    lines = proc.stdout.splitlines()
    assert lines[:5] == [f"Unknown GPU metric {name}: use one of utilization, memory.used, temperature, power."
                         for name in ("'memory'", "'Power'", "''", "None", "3")]
    assert lines[5] == "gpu_index must be a GPU index (str), got 0"
