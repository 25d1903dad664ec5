"""The one door to NVML: open a libnvidia-ml, list its usable devices and those it had to skip,
read their state at the moment of a choice and rank them (docs/design.md §4).

The work is done by the C++ core (csrc/nvml*, through ``flink_gpu._native``); every other module
goes through this one. A library is loaded and initialised once per path and process (once more in
a forked child), never per call.
"""

from __future__ import annotations

from flink_gpu._native import (BUSY_GPUS_VALUES, DeviceState, Nvml, NvmlDevice, SkippedDevice,
                               find_taskmanager, rank_gpus)

__all__ = ["BUSY_GPUS_VALUES", "Device", "DeviceState", "Library", "SkippedDevice", "find_taskmanager",
           "open_library", "rank_gpus", "states"]

#: A loaded, initialised libnvidia-ml: ``library_path``, ``driver_version`` (None when the driver
#: cannot say), ``devices()`` (the usable GPUs in NVML index order) and ``skipped()`` (the GPUs
#: the last ``devices()`` had to leave out, each with its NVML ``code`` and a ``reason``).
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
#: ``find_taskmanager(pid)``: the nearest ancestor of ``pid`` (its parent first) running Flink's
#: ``org.apache.flink.runtime.taskexecutor.TaskManagerRunner``, or None.


def open_library(library_path: "str | None" = None) -> Library:
    """The library at ``library_path`` (None or empty: ``$FLINK_GPU_NVML_LIBRARY``, else
    ``libnvidia-ml.so.1``), loaded and initialised; raises :class:`~flink_gpu.NvmlError` when it
    cannot be loaded or initialised."""
    return Nvml.open(library_path)


def states(library: Library, owner_pid: int, taskmanager_pid: "int | None" = None) -> "tuple[DeviceState, ...]":
    """Every device's state now (health, memory, processes judged against ``owner_pid`` and its
    TaskManager ``taskmanager_pid``), in index order, read in one native call."""
    return library.states(owner_pid, taskmanager_pid)
