"""The one door to NVML: open a libnvidia-ml, list its usable devices and those it had to skip,
read their state at the moment of a choice and rank them (docs/design.md §4), and read their live
metrics for gauges (docs/design.md §9.3).

The work is done by the C++ core (csrc/nvml/, through ``flink_gpu._native``); every other module
goes through this one. A library is loaded and initialised once per path and process (once more in
a forked child), never per call.
"""

from __future__ import annotations

from flink_gpu._native import (
    BUSY_GPUS_VALUES,
    DEFAULT_METRICS_INTERVAL,
    DEFAULT_NVML_TIMEOUT,
    GAUGE_HEALTH,
    HEALTH_CHECKS,
    HEALTH_READ_INTERVAL,
    METRICS,
    MIN_METRICS_INTERVAL,
    SAMPLE_MARGIN,
    DeviceState,
    Nvml,
    NvmlDevice,
    SkippedDevice,
    Verdict,
    busy_policy,
    checked_metrics_interval,
    find_taskmanager,
    health_checks_of,
    metrics_samples,
    process_ancestry,
    rank_gpus,
    sample_metrics_now,
    sampled_metrics,
    script_settings,
    watch_metrics,
)

__all__ = [
    "BUSY_GPUS_VALUES",
    "DEFAULT_METRICS_INTERVAL",
    "DEFAULT_NVML_TIMEOUT",
    "GAUGE_HEALTH",
    "HEALTH_CHECKS",
    "HEALTH_READ_INTERVAL",
    "METRICS",
    "MIN_METRICS_INTERVAL",
    "SAMPLE_MARGIN",
    "Device",
    "DeviceState",
    "Library",
    "SkippedDevice",
    "Verdict",
    "busy_policy",
    "find_taskmanager",
    "health_checks_of",
    "metrics_samples",
    "open_library",
    "process_ancestry",
    "rank_gpus",
    "sample_metrics_now",
    "sampled_metrics",
    "script_settings",
    "states",
    "watch_metrics",
    "checked_metrics_interval",
]

#: A loaded, initialised libnvidia-ml: ``library_path``, ``driver_version`` (None when the driver
#: cannot say), ``devices()`` (the usable GPUs in NVML index order), ``skipped()`` (the GPUs
#: the last ``devices()`` had to leave out, each with its NVML ``code`` and a ``reason``) and
#: ``read_metric(gpu_index, metric)``, ``states(owner, taskmanager, health_checks)`` (every device's
#: :class:`DeviceState` now) and ``choose(indices, owner, taskmanager, busy_policy, health_checks)``:
#: the one choice of GPUs of the C++ core, (states of ``indices``, indices best first, ranks,
#: [(index, why left out)]); a device of ``indices`` NVML no longer answers for is unhealthy.
#: Both take ``timeout`` (seconds, default :data:`DEFAULT_NVML_TIMEOUT`): every read has that
#: deadline (docs/design.md §9.5); a GPU not read in time is :attr:`Verdict.UNKNOWN`
#: (``health`` "unknown: <query> did not return within 5 s") and never handed out.
#:
#: ``read_metric(gpu_index, metric) -> int``: one reading of ``metric`` (one of :data:`METRICS`)
#: on the GPU ``gpu_index`` as GPUInfo carries it ("<index>", or "<index>:<slot>" for a MIG unit):
#: one NVML query. -1 where NVML cannot say: the driver lacks the query, it answers
#: NOT_SUPPORTED or any other error (a lost GPU included), or the library has no such index; it
#: never raises for those, so a gauge can call it as often as it likes (the GPU's handles are
#: resolved on its first reading in the process, and again in a forked child; never an
#: enumeration). A MIG unit's memory is its own, its temperature and power are its GPU's, and its
#: utilization is -1 (NVML has no utilization on MIG-enabled GPUs). ``ValueError`` for a metric
#: not in :data:`METRICS` (the message lists them), ``TypeError`` for an index that is not a str.
Library = Nvml
#: One usable GPU: ``index`` (NVML's, = nvidia-smi's), ``uuid``, ``name``, ``pci_bus_id``,
#: ``memory_total`` (bytes), ``minor_number``, ``cpu_affinity`` (the GPU's NUMA-local CPUs as a
#: Linux cpulist, e.g. "0-15,32-47"), ``numa_node`` and ``persistence_mode`` (True, False: the driver
#: initialises the GPU when a process first asks for its handle, which may take seconds); an attribute
#: is None where unknown.
Device = NvmlDevice

#: ``rank_gpus(states, busy_policy)``: the candidates among ``states`` best first, under
#: ``busy_policy`` (one of BUSY_GPUS_VALUES: avoid, exclude, ignore): (indices, ranks parallel to
#: them for :func:`flink_gpu.coordination.claim`, [(index, why it was left out)]). Unhealthy GPUs
#: are never offered; classes: healthy & not busy, healthy & busy (avoid only), degraded & not
#: busy, degraded & busy; lowest index first within a class. A bad policy raises ValueError.
#:
#: ``METRICS``: the metrics ``Library.read_metric`` reads, as integers: ``"utilization"`` (% of the
#: last sample period a kernel ran), ``"memory.used"`` (MiB, rounded down), ``"temperature"`` (°C,
#: the GPU's core sensor) and ``"power"`` (W, rounded to nearest).
#:
#: ``busy_policy(text)``: the policy of BUSY_GPUS_VALUES that ``text`` names, case and surrounding
#: blanks ignored (the one rule for the driver parameter and ``--busy-gpus``), or None.
#:
#: The process's metrics sampler (docs/design.md §9.3; csrc/nvml/sampler.*): a reader thread per
#: watched GPU, paced by one thread that calls no NVML, samples every watched GPU at most once per
#: interval into a snapshot that gauges read.
#:
#: ``watch_metrics(gpu_index, library_path=None, interval=DEFAULT_METRICS_INTERVAL)``: adds a GPU to
#: what the sampler samples and sets its pace (seconds, at least :data:`MIN_METRICS_INTERVAL`, else
#: ValueError; the last call's applies to the process); calls no NVML.
#:
#: ``sampled_metrics(gpu_index, library_path=None, at=None)``: what its gauges show, (utilization,
#: memory.used, temperature, power, health) as in :data:`METRICS` plus a number of
#: :data:`GAUGE_HEALTH` (0 ok, 1 degraded, 2 unhealthy or lost, 3 unknown). A lost GPU reads -1 and
#: 2; one whose read has not come back within :data:`SAMPLE_MARGIN` (it hangs in the driver; the
#: other GPUs are read on) -1 and 3 until it answers, as before its first sample, and so is one whose
#: last sample is older than the interval plus that margin. Reads the snapshot only: never NVML, never
#: waits for a read. Health findings are read on the first
#: sample, then every :data:`HEALTH_READ_INTERVAL` seconds.
#:
#: ``sample_metrics_now(timeout=10.0)``: has the sampler take a sample now and waits at most
#: ``timeout`` s for it and every GPU's read (True when they completed; False while a read hangs): for
#: tests and benchmarks. ``metrics_samples()``: how many samples the sampler completed in this process
#: once every watched GPU had its first reading.
#:
#: ``find_taskmanager(pid)``: the nearest ancestor of ``pid`` (its parent first) running Flink's
#: ``org.apache.flink.runtime.taskexecutor.TaskManagerRunner``, or None. ``process_ancestry(pid, limit=64)``:
#: ``pid`` and its ancestors, nearest first, as [(pid, command name)] (the core's reading of /proc).


def open_library(library_path: "str | None" = None, timeout: float = DEFAULT_NVML_TIMEOUT) -> Library:
    """The library at ``library_path`` (None or empty: ``$FLINK_GPU_NVML_LIBRARY``, else
    ``libnvidia-ml.so.1``), loaded and initialised within ``timeout`` seconds; raises
    :class:`~flink_gpu.NvmlError` when it cannot be loaded or initialised, or does not answer in
    time (code NVML_ERROR_TIMEOUT, at once while an earlier nvmlInit of this process still hangs)."""
    return Nvml.open(library_path, timeout)


def states(
    library: Library,
    owner_pid: int,
    taskmanager_pid: "int | None" = None,
    health_checks: "tuple[str, ...] | None" = None,
    timeout: float = DEFAULT_NVML_TIMEOUT,
) -> "tuple[DeviceState, ...]":
    """Every device's state now (health judged with ``health_checks``, names of
    :data:`HEALTH_CHECKS`, None: all; memory; processes judged against ``owner_pid`` and its
    TaskManager ``taskmanager_pid``), in index order, read in one native call within ``timeout``
    seconds (a GPU not read in time is unknown)."""
    return library.states(owner_pid, taskmanager_pid, health_checks, timeout)
