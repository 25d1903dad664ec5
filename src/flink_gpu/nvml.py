"""The one door to NVML: open a libnvidia-ml, list its usable devices and those it had to skip,
read and show their state (docs/design.md §4), and read their live metrics for gauges (docs/design.md
§9.3). Choosing GPUs is not done here: :mod:`flink_gpu.policy` decides a discovery or a bind in one call.

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
    TOPOLOGY_VALUES,
    DeviceState,
    GpuLink,
    GpuProcess,
    HealthCheck,
    NvLinks,
    Nvml,
    NvmlDevice,
    NvmlEnumeration,
    NvmlSettings,
    ProcessAncestor,
    SampledMetrics,
    SkippedDevice,
    Topology,
    Verdict,
    checked_health_checks,
    checked_metrics_interval,
    checked_nvml_timeout,
    find_taskmanager,
    health_checks_of,
    metrics_samples,
    process_ancestry,
    read_settings,
    sample_metrics_now,
    sampled_metrics,
    watch_metrics,
)

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from typing import Iterable

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
    "TOPOLOGY_VALUES",
    "Device",
    "DeviceState",
    "Enumeration",
    "GpuLink",
    "GpuProcess",
    "HealthCheck",
    "Library",
    "NvLinks",
    "NvmlSettings",
    "ProcessAncestor",
    "SampledMetrics",
    "SkippedDevice",
    "Topology",
    "Verdict",
    "find_taskmanager",
    "health_checks_of",
    "metrics_samples",
    "open_library",
    "process_ancestry",
    "sample_metrics_now",
    "topology",
    "sampled_metrics",
    "read_settings",
    "watch_metrics",
    "checked_health_checks",
    "checked_metrics_interval",
    "checked_nvml_timeout",
]

# The records and calls are documented where they are made (_nvml*.pxi, _host.pxi; their types in
# _native.pyi): this module names them once for the rest of the package.
#: A loaded, initialised libnvidia-ml (``devices()``, ``states()``, ``read_metric()``):
#: every read within its ``timeout`` (docs/design.md §9.5).
Library = Nvml
#: One usable GPU, or a MIG unit standing in for one, with its static properties.
Device = NvmlDevice
#: What one ``Library.devices()`` found: its usable ``devices``, the ``skipped`` ones, the ``notices``.
Enumeration = NvmlEnumeration


def open_library(library_path: "str | None" = None, timeout: float = DEFAULT_NVML_TIMEOUT) -> Library:
    """The library at ``library_path`` (None or empty: ``$FLINK_GPU_NVML_LIBRARY``, else
    ``libnvidia-ml.so.1``), loaded and initialised within ``timeout`` seconds; raises
    :class:`~flink_gpu.NvmlError` when it cannot be loaded or initialised, or does not answer in
    time (code NVML_ERROR_TIMEOUT, at once while an earlier nvmlInit of this process still hangs)."""
    return Nvml.open(library_path, timeout)


def topology(
    gpus: "Iterable[int] | None" = None, timeout: float = DEFAULT_NVML_TIMEOUT, library_path: "str | None" = None
) -> Topology:
    """How the GPUs ``gpus`` (NVML numbers; None: every whole GPU the library enumerates) are joined, as
    ``nvidia-smi topo -m`` shows it (docs/design.md §9.6): a :class:`Topology` (``gpus``, ``matrix``,
    ``nvlinks``, ``numa``, ``calls``, ``stalls``; ``between(a, b)``, ``best_set(among, count)``). Read once
    per process and GPU, within ``timeout`` seconds, from the library at ``library_path`` (as
    :func:`open_library`); what NVML does not answer in time is unknown ("?"), never an error."""
    return open_library(library_path, timeout).topology(gpus, timeout)
