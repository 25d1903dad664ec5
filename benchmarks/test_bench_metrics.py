"""What GPU metrics cost the driver (issue 22: one sampler for metrics), on the simulator's h100-hgx-8
profile (8 GPUs, its latency model and the driver's global lock; metrics_cost.py): the lock held per second by the
process's sampler at the default ``metrics.interval`` vs by a 25 ms poller (MangoHud's pattern), from the
simulator's counters, so the figures and the target are deterministic; and the wall time of a gauge read
and of one sample.

The target, asserted from the counters: the gauges hold the simulated driver lock at most 1% of the time
at the default interval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import metrics_cost
import pytest

import flink_gpu
from flink_gpu import simulator

BENCH_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = str(Path(flink_gpu.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def measured() -> dict:
    """metrics_cost.py's counters, from a fresh process on the H100 latency model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env.update(simulator.environment(profile=metrics_cost.PROFILE))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / "metrics_cost.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_gauges_hold_the_driver_lock_at_most_one_percent_of_the_time_at_the_default_interval(measured):
    fractions = metrics_cost.lock_fractions(measured)
    assert fractions["sampler"] <= 0.01, fractions
    # and far less than a 25 ms poller of the same readings
    assert fractions["poller_readings"] >= 10 * fractions["sampler"], fractions


def test_a_sample_reads_each_reading_once_per_gpu_and_gauge_reads_none(measured):
    gpus = {str(i): 1 for i in range(measured["gpus"])}
    sample = measured["sample"]["calls"]
    for function in (
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetPowerUsage",
    ):
        assert sample[function] == gpus, (function, sample)
    assert set(sample) == {
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetPowerUsage",
    }, sample
    assert measured["gauge_reads"]["calls"] == {} and measured["gauge_reads"]["lock_ns"] == 0
    # the health read of the first sample: each GPU's checks once
    assert measured["sample_with_health"]["calls"]["nvmlDeviceValidateInforom"] == gpus
    # ... as busy-gpus ignore reads it: no process list, the costliest query (4.5 ms each on this profile)
    process_lists = [f for f in measured["sample_with_health"]["calls"] if "Processes" in f or "ProcessDetail" in f]
    assert process_lists == [], process_lists


def test_bench_gauge_read(benchmark):
    """One gauge's value: the snapshot read a reporter pays (4 simulated GPUs, the session's)."""
    from flink_gpu import nvml

    assert nvml.watch_metrics("0")
    assert nvml.sample_metrics_now()
    benchmark.extra_info["what"] = "sampled_metrics('0'): the snapshot, no NVML"
    value = benchmark(nvml.sampled_metrics, "0")
    assert value.health == 0


def test_bench_metrics_cost_per_hour(benchmark, measured):
    """The driver-lock seconds an hour of metrics costs (reported; the work is the arithmetic)."""
    fractions = benchmark(metrics_cost.lock_fractions, measured)
    for name, fraction in fractions.items():
        benchmark.extra_info[f"{name}_lock_fraction"] = fraction
        benchmark.extra_info[f"{name}_lock_s_per_hour"] = fraction * 3600
    benchmark.extra_info["sample_lock_ms"] = measured["sample"]["lock_ns"] / 1e6
    benchmark.extra_info["sample_with_health_lock_ms"] = measured["sample_with_health"]["lock_ns"] / 1e6
    benchmark.extra_info["poll_round_lock_ms"] = measured["poll_readings"]["lock_ns"] / 1e6
