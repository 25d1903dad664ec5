"""The one door to NVML: open a libnvidia-ml, list its usable devices and those it had to skip,
read their state at the moment of a choice and rank them (docs/design.md §4), and read their live
metrics for gauges (docs/design.md §9.3).

The work is done by the C++ core (csrc/nvml*, through ``flink_gpu._native``); every other module
goes through this one. A library is loaded and initialised once per path and process (once more in
a forked child), never per call.
"""

from __future__ import annotations

from flink_gpu._native import (BUSY_GPUS_VALUES, DEFAULT_NVML_TIMEOUT, HEALTH_CHECKS, METRICS, DeviceState, Nvml,
                               NvmlDevice, SkippedDevice, Verdict, busy_policy, find_taskmanager, rank_gpus)

__all__ = ["BUSY_GPUS_VALUES", "DEFAULT_NVML_TIMEOUT", "HEALTH_CHECKS", "METRICS", "Device", "DeviceState", "Library",
           "SkippedDevice", "Verdict", "busy_policy", "find_taskmanager", "open_library", "rank_gpus", "states"]

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
#: Linux cpulist, e.g. "0-15,32-47") and ``numa_node``; an attribute is None where unknown.
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
#: ``find_taskmanager(pid)``: the nearest ancestor of ``pid`` (its parent first) running Flink's
#: ``org.apache.flink.runtime.taskexecutor.TaskManagerRunner``, or None.


def open_library(library_path: "str | None" = None) -> Library:
    """The library at ``library_path`` (None or empty: ``$FLINK_GPU_NVML_LIBRARY``, else
    ``libnvidia-ml.so.1``), loaded and initialised; raises :class:`~flink_gpu.NvmlError` when it
    cannot be loaded or initialised."""
    return Nvml.open(library_path)


def states(library: Library, owner_pid: int, taskmanager_pid: "int | None" = None,
           health_checks: "tuple[str, ...] | None" = None,
           timeout: float = DEFAULT_NVML_TIMEOUT) -> "tuple[DeviceState, ...]":
    """Every device's state now (health judged with ``health_checks``, names of
    :data:`HEALTH_CHECKS`, None: all; memory; processes judged against ``owner_pid`` and its
    TaskManager ``taskmanager_pid``), in index order, read in one native call within ``timeout``
    seconds (a GPU not read in time is unknown)."""
    return library.states(owner_pid, taskmanager_pid, health_checks, timeout)
