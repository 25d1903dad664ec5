"""A binding's gauges (docs/design.md §9.3): per bound GPU its readings from the process's one sampled
snapshot (flink_gpu.nvml's sampled_metrics) and its memory request; a gauge never calls NVML and never raises."""

from __future__ import annotations

__all__ = ["EMBEDDED_METRICS", "GAUGES", "MEMORY_LIMIT_GAUGE", "PUSH_INTERVAL", "Constant", "Gauge"]

#: PyFlink's thread-mode (embedded) metric classes live here: their gauges are called from Java.
EMBEDDED_METRICS = "pyflink.fn_execution.metrics.embedded"
#: How often update_metrics() pushes the sampler's values to Java, at most (s).
PUSH_INTERVAL = 1.0
#: Gauge name -> what of flink_gpu.nvml's sampled_metrics it shows: a reading of METRICS (units: %, MiB,
#: °C, W) or "health" (0 ok, 1 degraded, 2 unhealthy or lost, 3 unknown: GAUGE_HEALTH).
GAUGES = {
    "utilization": "utilization",
    "memoryUsed": "memory.used",
    "temperature": "temperature",
    "power": "power",
    "health": "health",
}
#: The gauge of a binding's memory request (MiB per GPU), registered beside GAUGES when it has one.
MEMORY_LIMIT_GAUGE = "memoryLimit"


class Gauge:
    """One gauge of one GPU: its value in the process's sampled snapshot (flink_gpu.nvml's
    sampled_metrics); never raises, never calls NVML."""

    __slots__ = ("_library_path", "_index", "_field")

    def __init__(self, library_path: "str | None", index: str, shown: str) -> None:
        self._library_path = library_path
        self._index = index
        self._field = _SAMPLED[shown]

    def __call__(self) -> int:
        from flink_gpu.nvml import sampled_metrics

        value: int = getattr(sampled_metrics(self._index, self._library_path), self._field)
        return value

    def says_unknown(self, shown: int) -> bool:
        """Whether ``shown``, this gauge's value, is the health gauge's "unknown" (not sampled in time)."""
        return self._field == "health" and shown == _UNKNOWN_HEALTH


class Constant:
    """A gauge of a value the binding fixed (its memory request, MiB)."""

    __slots__ = ("_value",)

    def __init__(self, value: int) -> None:
        self._value = value

    def __call__(self) -> int:
        return self._value

    def says_unknown(self, shown: int) -> bool:
        return False


#: The field of flink_gpu.nvml's sampled_metrics (a SampledMetrics) that each of GAUGES' values shows.
_SAMPLED = {
    "utilization": "utilization",
    "memory.used": "memory_used",
    "temperature": "temperature",
    "power": "power",
    "health": "health",
}
_UNKNOWN_HEALTH = 3  # flink_gpu.nvml.GAUGE_HEALTH.index("unknown"), without importing NVML's face here
