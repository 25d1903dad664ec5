# The metrics (csrc/nvml/metrics.*) and the process's metrics sampler (csrc/nvml/sampler.*); included by
# _native.pyx after _nvml_settings.pxi.

#: The metrics ``Nvml.read_metric`` reads (csrc/nvml/metrics.*): utilization %, memory used MiB,
#: temperature °C, power W.
METRICS = tuple([metric_name(<Metric>i).decode("ascii") for i in range(kMetricCount)])
_METRIC_IDS = {name: i for i, name in enumerate(METRICS)}


# --- the process's metrics sampler (csrc/nvml/sampler.*) ---------------------------------------

#: The ``health`` gauge's values by number: 0 ok, 1 degraded, 2 unhealthy (or lost), 3 unknown.
GAUGE_HEALTH = ("ok", "degraded", "unhealthy", "unknown")
#: The sampler's pace (s): the default ``metrics.interval``, the least it takes, the margin after
#: which a sample not renewed is unknown, and how often health findings are read again.
MIN_METRICS_INTERVAL = fg_min_metrics_interval_ms() / 1000
DEFAULT_METRICS_INTERVAL = fg_default_metrics_interval_ms() / 1000
SAMPLE_MARGIN = fg_sample_margin_ms() / 1000
HEALTH_READ_INTERVAL = fg_health_read_interval_ms() / 1000


cdef string _resolved_library(library_path) except *:
    """The path NvmlLibrary::acquire loads for ``library_path`` (None or empty: its default)."""
    # A file name: the bytes os.fsencode gives (a non-UTF-8 name round-trips through
    # surrogateescape); a NUL would silently cut the name dlopen sees, naming another file.
    cdef bytes encoded = os.fsencode(library_path) if library_path else b""
    if b"\0" in encoded:
        raise ValueError(f"The NVML library path contains a NUL byte: {library_path!r}")
    return NvmlLibrary.resolve_path(encoded)


cdef string _sampler_index(gpu_index) except *:
    if not isinstance(gpu_index, str):
        raise TypeError(f"gpu_index must be a GPU index (str), got {gpu_index!r}")
    return _utf8(gpu_index)


def checked_metrics_interval(interval):
    """``interval`` (seconds) as a float when the GPU gauges may read NVML that often, at most: a number
    of at least MIN_METRICS_INTERVAL; else ValueError saying so (the one check, for watch_metrics and
    bind alike)."""
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval >= MIN_METRICS_INTERVAL:
        raise ValueError(
            f"The metrics interval (how often the GPU gauges read NVML, at most) must be at least "
            f"{MIN_METRICS_INTERVAL:g} s, got {interval!r}."
        )
    return float(interval)


def watch_metrics(gpu_index, library_path=None, interval=DEFAULT_METRICS_INTERVAL):
    """Adds the GPU ``gpu_index`` of the library at ``library_path`` to what this process's sampler
    reads, at most once per ``interval`` seconds (the last call's applies to the process; at least
    MIN_METRICS_INTERVAL, else ValueError). Starts the sampler; calls no NVML. False when the sampler
    cannot be started (its gauges then show unknown)."""
    interval = checked_metrics_interval(interval)
    cdef string index = _sampler_index(gpu_index)
    cdef string path = _resolved_library(library_path)
    cdef long long interval_ms = <long long>min(float(interval) * 1000, 2.0 ** 62)
    cdef bint watched
    with nogil:
        watched = fg_watch_metrics(path, string_view(index.data(), index.size()), interval_ms)
    return watched


cdef class SampledMetrics(_Record):
    """What the gauges of one GPU show, ints: ``utilization`` (%), ``memory_used`` (MiB), ``temperature``
    (°C), ``power`` (W), each -1 where unknown, and ``health`` (0 ok, 1 degraded, 2 unhealthy or lost, 3
    unknown: GAUGE_HEALTH)."""

    _FIELDS = ("utilization", "memory_used", "temperature", "power", "health")
    cdef readonly long long utilization
    cdef readonly long long memory_used
    cdef readonly long long temperature
    cdef readonly long long power
    cdef readonly int health

    def __init__(self):
        raise TypeError("SampledMetrics objects come from sampled_metrics()")


def sampled_metrics(gpu_index, library_path=None, at=None):
    """What the gauges of ``gpu_index`` show: a SampledMetrics, the last sample's; -1 for each value and health 3 (unknown) while its read is late (not back
    within SAMPLE_MARGIN: it hangs in the driver), when that sample is older than the interval plus
    SAMPLE_MARGIN at ``at`` (time.monotonic_ns(); None: now), or there is none (not watched, not
    sampled yet). Reads the snapshot only: never NVML, never waits for a read."""
    cdef string index = _sampler_index(gpu_index)
    cdef string path = _resolved_library(library_path)
    cdef long long at_ns = -1 if at is None else max(0, int(at))
    cdef SampledGpu s = fg_sampled_metrics(path, string_view(index.data(), index.size()), at_ns)
    cdef SampledMetrics out = SampledMetrics.__new__(SampledMetrics)
    out.utilization = s.values[0]
    out.memory_used = s.values[1]
    out.temperature = s.values[2]
    out.power = s.values[3]
    out.health = <int>s.health
    return out


def sample_metrics_now(timeout=10.0):
    """Makes the sampler take a sample now and waits at most ``timeout`` seconds for it and every GPU's
    read to complete: True when they did, False while a read hangs (for tests and benchmarks; gauges
    never wait)."""
    cdef long long timeout_ms = <long long>max(0.0, min(float(timeout) * 1000, 2.0 ** 62))
    cdef bint done
    with nogil:
        done = fg_sample_metrics_now(timeout_ms)
    return done


def metrics_samples():
    """How many samples this process's sampler has completed once every watched GPU had its first
    reading (a GPU whose first read hangs holds the count back)."""
    return completed_samples()
