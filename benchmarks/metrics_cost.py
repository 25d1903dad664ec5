"""What GPU metrics cost the driver, from the simulator's counters (no timing): the simulated driver
lock held per sample of the process's sampler, and per round of a poller that reads the same GPUs'
readings itself every 25 ms (the pattern MangoHud uses, flightlessmango/MangoHud#2104).

Run as a script in a fresh process pointed at the simulator's :data:`PROFILE` (NVML reads its spec once
per process); prints one JSON object.
"""

from __future__ import annotations

import json

#: The simulator's machine profile (csrc/simulator/profiles/README.md): 8x H100 80GB HBM3 from a real
#: capture, with issue 22's public latencies (process lists 4.5 ms, power 0.4 ms, memory 11.6 µs,
#: utilization 2.5 µs, a first handle 200 ms; no latency where no figure is published) and the
#: driver's global lock on.
PROFILE = "h100-hgx-8"
GPUS = 8
#: The poller's period (MangoHud's 25 ms): each round it reads the readings the gauges show on every
#: GPU, and MangoHud also a process list per GPU.
POLL_PERIOD_S = 0.025


def lock_ns(counters: dict) -> int:
    return counters["driver_lock_held_ns"]


def calls(counters: dict) -> "dict[str, dict[str, int]]":
    return counters["calls"]


def main() -> None:
    """Prints what one sample (with and without the health read), 8000 gauge reads and one poller
    round held the simulated driver lock, and the NVML calls they made."""
    from flink_gpu import nvml, simulator

    library = nvml.open_library()
    indices = [device.gpu_index for device in library.devices().devices]  # the first handles, once per process
    assert len(indices) == GPUS, indices

    # the sampler: the first sample reads the health findings too, later ones the readings alone
    simulator.reset_counters()
    for index in indices:
        assert nvml.watch_metrics(index, interval=nvml.DEFAULT_METRICS_INTERVAL)
    assert nvml.sample_metrics_now(timeout=60)
    with_health = simulator.counters()
    simulator.reset_counters()
    assert nvml.sample_metrics_now(timeout=60)
    readings_only = simulator.counters()
    assert all(nvml.sampled_metrics(index).health == 0 for index in indices)

    # gauges asking as often as they like: no NVML call
    simulator.reset_counters()
    for _ in range(1000):
        for index in indices:
            nvml.sampled_metrics(index)
    gauges = simulator.counters()

    # a poller reading the same four readings itself each round, with and without the process list
    simulator.reset_counters()
    for index in indices:
        for metric in nvml.METRICS:
            library.read_metric(index, metric)
    poll_readings = simulator.counters()

    print(
        json.dumps(
            {
                "gpus": GPUS,
                "interval_s": nvml.DEFAULT_METRICS_INTERVAL,
                "health_interval_s": nvml.HEALTH_READ_INTERVAL,
                "poll_period_s": POLL_PERIOD_S,
                "sample_with_health": {"lock_ns": lock_ns(with_health), "calls": calls(with_health)},
                "sample": {"lock_ns": lock_ns(readings_only), "calls": calls(readings_only)},
                "gauge_reads": {"lock_ns": lock_ns(gauges), "calls": calls(gauges)},
                "poll_readings": {"lock_ns": lock_ns(poll_readings), "calls": calls(poll_readings)},
            }
        )
    )


def process_list_ms() -> float:
    """What one process list costs on the profile (its ``latency_ms.processes``)."""
    from flink_gpu import simulator

    with open(simulator.profile_path(PROFILE), encoding="utf-8") as f:
        return json.load(f)["latency_ms"]["processes"]


def lock_fractions(measured: dict) -> "dict[str, float]":
    """Driver-lock time per second of wall time: the sampler at its default interval (a sample every
    interval, a health read every health interval), and the 25 ms poller (readings only; readings and
    the state with process lists)."""
    interval, health_interval = measured["interval_s"], max(measured["health_interval_s"], measured["interval_s"])
    sample = measured["sample"]["lock_ns"] / 1e9
    health = measured["sample_with_health"]["lock_ns"] / 1e9 - sample
    poll = measured["poll_readings"]["lock_ns"] / 1e9
    poll_processes = poll + measured["gpus"] * process_list_ms() / 1e3
    period = measured["poll_period_s"]
    return {
        "sampler": sample / interval + health / health_interval,
        "poller_readings": poll / period,
        "poller_with_processes": poll_processes / period,
    }


if __name__ == "__main__":
    main()
