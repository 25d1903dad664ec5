# NVML (csrc/nvml/): the library, its devices, their state and health, the choice, the metrics and
# their sampler; included by _native.pyx.

# --- NVML ----------------------------------------------------------------------------------------

cdef inline str _gpu_index(unsigned index, slot):
    return str(index) if slot is None else f"{index}:{slot}"


cdef class NvmlDevice:
    """One GPU, or one MIG instance standing in for its GPU in MIG mode, as NVML reports it; an
    attribute is None where the driver cannot answer.

    ``index``: the GPU's NVML index (a MIG unit's: its parent's); ``gpu_index``: the index as
    GPUInfo carries it, "<index>" or "<parent index>:<slot>" for a MIG unit; ``parent_index``,
    ``parent_uuid``, ``mig_slot``, ``mig_gi``, ``mig_ci``: a MIG unit's GPU, its slot and its GPU and
    compute instance ids (None for a whole GPU).
    """

    cdef readonly unsigned index
    cdef readonly object parent_uuid
    cdef readonly object mig_slot
    cdef readonly object mig_gi
    cdef readonly object mig_ci
    cdef readonly object uuid
    cdef readonly object name
    cdef readonly object pci_bus_id
    cdef readonly object memory_total
    cdef readonly object minor_number
    cdef readonly object cpu_affinity
    cdef readonly object numa_node
    cdef readonly object persistence_mode

    def __repr__(self):
        mig = (f", mig_slot={self.mig_slot!r}, parent_uuid={self.parent_uuid!r}, "
               f"mig_gi={self.mig_gi!r}, mig_ci={self.mig_ci!r}" if self.mig_slot is not None else "")
        return (f"NvmlDevice(index={self.index}{mig}, uuid={self.uuid!r}, name={self.name!r}, "
                f"pci_bus_id={self.pci_bus_id!r}, memory_total={self.memory_total!r}, "
                f"minor_number={self.minor_number!r}, cpu_affinity={self.cpu_affinity!r}, "
                f"numa_node={self.numa_node!r}, persistence_mode={self.persistence_mode!r})")

    @property
    def gpu_index(self):
        return _gpu_index(self.index, self.mig_slot)

    @property
    def parent_index(self):
        return None if self.mig_slot is None else self.index


cdef class SkippedDevice:
    """A GPU (or MIG unit) that exists but cannot be used (NO_PERMISSION, GPU_IS_LOST, MIG mode
    without instances, ...); ``index``, ``mig_slot`` and ``gpu_index`` as :class:`NvmlDevice` has them."""

    cdef readonly unsigned index
    cdef readonly object mig_slot
    cdef readonly int code
    cdef readonly str reason

    def __repr__(self):
        return f"SkippedDevice(index={self.gpu_index}, code={self.code}, reason={self.reason!r})"

    @property
    def gpu_index(self):
        return _gpu_index(self.index, self.mig_slot)


cdef NvmlDevice _device(const DeviceInfo& info):
    cdef NvmlDevice d = NvmlDevice.__new__(NvmlDevice)
    d.index = info.nvml_index
    d.mig_slot = info.mig_slot.value() if info.mig_slot.has_value() else None
    d.parent_uuid = _optional_text(info.parent_uuid)
    d.mig_gi = info.mig_gi.value() if info.mig_gi.has_value() else None
    d.mig_ci = info.mig_ci.value() if info.mig_ci.has_value() else None
    d.uuid = _optional_text(info.uuid)
    d.name = _optional_text(info.name)
    d.pci_bus_id = _optional_text(info.pci_bus_id)
    d.memory_total = info.memory_total.value() if info.memory_total.has_value() else None
    d.minor_number = info.minor_number.value() if info.minor_number.has_value() else None
    d.cpu_affinity = _optional_text(info.cpu_affinity)
    d.numa_node = info.numa_node.value() if info.numa_node.has_value() else None
    d.persistence_mode = bool(info.persistence_mode.value()) if info.persistence_mode.has_value() else None
    return d


class Verdict:
    """A device's health as the core judged it (``DeviceState.verdict``): decide on this, not on
    the text of ``DeviceState.health``. Three instances, compared by identity: ``Verdict.OK``,
    ``Verdict.DEGRADED``, ``Verdict.UNHEALTHY``, ``Verdict.UNKNOWN`` (not read in time: an NVML call past
    its deadline; never handed out) (a plain class: importing flink_gpu loads no enum)."""
    __slots__ = ("name", "value")

    def __init__(self, name, value):
        self.name = name
        self.value = value

    def __repr__(self):
        return f"Verdict.{self.name}"

    def __reduce__(self):
        return (getattr, (Verdict, self.name))


Verdict.OK = Verdict("OK", <int>Health.kOk)
Verdict.DEGRADED = Verdict("DEGRADED", <int>Health.kDegraded)
Verdict.UNHEALTHY = Verdict("UNHEALTHY", <int>Health.kUnhealthy)
Verdict.UNKNOWN = Verdict("UNKNOWN", <int>Health.kUnknown)
_VERDICTS = {v.value: v for v in (Verdict.OK, Verdict.DEGRADED, Verdict.UNHEALTHY, Verdict.UNKNOWN)}

#: The deadline of a state read when none is given (csrc/nvml/deadline.hpp), seconds.
DEFAULT_NVML_TIMEOUT = kDefaultNvmlTimeoutSeconds

#: The health checks by name (csrc/nvml/state.hpp), as ``health-checks`` names them.
HEALTH_CHECKS = tuple([check_name(<Check>i).decode("ascii") for i in range(kCheckCount)])


cdef class GpuProcess(_Record):
    """A process NVML lists on a GPU: ``pid``, ``used_memory`` (bytes, None where NVML cannot say), ``kind``
    ("compute" | "graphics" | "mps"), ``own`` (the owner's, its TaskManager's or a descendant's) and
    ``visible`` (in our /proc)."""

    _FIELDS = ("pid", "used_memory", "kind", "own", "visible")
    cdef readonly unsigned pid
    cdef readonly object used_memory
    cdef readonly str kind
    cdef readonly bint own
    cdef readonly bint visible

    def __init__(self):
        raise TypeError("GpuProcess objects come from DeviceState.processes")


cdef class HealthCheck(_Record):
    """One check of HEALTH_CHECKS on a GPU: its ``name``, ``outcome`` ("ok" | "finding" | "not supported" |
    "no permission" | "not applicable"), the finding's ``verdict`` (a Verdict), the ``finding`` or None, and
    whether it is ``enforced``."""

    _FIELDS = ("name", "outcome", "verdict", "finding", "enforced")
    cdef readonly str name
    cdef readonly str outcome
    cdef readonly object verdict
    cdef readonly object finding
    cdef readonly bint enforced

    def __init__(self):
        raise TypeError("HealthCheck objects come from DeviceState.checks")


cdef HealthCheck _health_check(size_t i, const CCheckResult& c):
    cdef HealthCheck out = HealthCheck.__new__(HealthCheck)
    out.name = HEALTH_CHECKS[i]
    out.outcome = outcome_name(c.outcome).decode("ascii")
    out.verdict = _VERDICTS[<int>c.verdict]
    out.finding = _text(c.finding) if c.outcome == Outcome.kFinding else None
    out.enforced = c.enforced
    return out


cdef GpuProcess _gpu_process(const CGpuProcess& c):
    cdef GpuProcess out = GpuProcess.__new__(GpuProcess)
    out.pid = c.pid
    out.used_memory = c.used_memory.value() if c.used_memory.has_value() else None
    out.kind = process_kind_name(c.kind).decode("ascii")
    out.own = c.own
    out.visible = c.visible
    return out


cdef class DeviceState:
    """One GPU's state when it was read: health, memory, the processes NVML lists on it.

    ``health``: "ok", "degraded: <reason>", "unhealthy: <reason>" or "unknown: <why>" (text for people); ``verdict``:
    the same as a :class:`Verdict`; ``findings``: every enforced finding; ``warnings``: enforced
    findings that leave it ok; ``checks``: per check of HEALTH_CHECKS (name, outcome "ok" |
    "finding" | "not supported" | "no permission" | "not applicable", the finding's Verdict, the
    finding or None, enforced) as HealthCheck records; ``processes``: a GpuProcess for each process NVML
    lists on it; ``processes_known``: False when NVML refused the process
    list (NO_PERMISSION); ``processes_read``: False when the read did not ask for them (busy-gpus
    ignore) or the GPU was not read in time; ``busy``: a process that is not the owner's, its TaskManager's or a
    descendant's.
    """

    cdef CDeviceState _c
    cdef readonly unsigned index
    cdef readonly object mig_slot
    cdef readonly str health
    cdef readonly object verdict
    cdef readonly tuple findings
    cdef readonly tuple warnings
    cdef readonly object memory_used
    cdef readonly object memory_free
    cdef readonly object memory_total
    cdef readonly tuple processes
    cdef readonly bint processes_known
    cdef readonly bint processes_read
    cdef readonly bint busy
    cdef readonly object compute_mode

    def __init__(self):
        raise TypeError("DeviceState objects come from Nvml.states()")

    @property
    def gpu_index(self):
        """The index as GPUInfo carries it ("<index>", or "<index>:<slot>" for a MIG unit)."""
        return _gpu_index(self.index, self.mig_slot)

    @property
    def checks(self):
        """A HealthCheck per check of HEALTH_CHECKS, in its order."""
        cdef size_t i
        return tuple([_health_check(i, self._c.checks[i]) for i in range(kCheckCount)])

    @property
    def busy_reason(self):
        """Why it is busy ("busy: foreign process 123 (compute)"), "" when it is not."""
        return _text(busy_reason_cpp(self._c))

    def __repr__(self):
        return (f"DeviceState(index={self.gpu_index}, health={self.health!r}, memory_used={self.memory_used!r}, "
                f"memory_free={self.memory_free!r}, processes={self.processes!r}, "
                f"processes_known={self.processes_known!r}, busy={self.busy!r}, compute_mode={self.compute_mode!r})")


cdef DeviceState _state(const CDeviceState& c):
    cdef DeviceState s = DeviceState.__new__(DeviceState)
    cdef size_t i
    s._c = c
    s.index = c.nvml_index
    s.mig_slot = c.mig_slot.value() if c.mig_slot.has_value() else None
    s.health = _text(c.health_text)
    s.verdict = _VERDICTS[<int>c.health]
    s.findings = tuple([_text(c.findings[i]) for i in range(c.findings.size())])
    s.warnings = tuple([_text(c.warnings[i]) for i in range(c.warnings.size())]) if c.warnings.size() else ()
    s.memory_used = c.memory_used.value() if c.memory_used.has_value() else None
    s.memory_free = c.memory_free.value() if c.memory_free.has_value() else None
    s.memory_total = c.memory_total.value() if c.memory_total.has_value() else None
    s.processes = tuple([_gpu_process(c.processes[i]) for i in range(c.processes.size())])
    s.processes_known = c.processes_known
    s.processes_read = c.processes_read
    s.busy = c.busy
    s.compute_mode = _optional_text(c.compute_mode)
    return s


_check_masks = {}  # health_checks -> its bit mask over HEALTH_CHECKS, made once per value


cdef CheckSet _check_set(health_checks) except *:
    """The CheckSet of ``health_checks`` (names of HEALTH_CHECKS; None: all of them)."""
    mask = _check_masks.get(health_checks)
    if mask is None:
        names = HEALTH_CHECKS if health_checks is None else tuple(health_checks)
        unknown = sorted(set(names) - set(HEALTH_CHECKS))
        if unknown:
            raise ValueError(f"Unknown health checks {unknown}: use names of {', '.join(HEALTH_CHECKS)}.")
        mask = sum(1 << i for i, name in enumerate(HEALTH_CHECKS) if name in names)
        if isinstance(health_checks, (tuple, type(None))):
            _check_masks[health_checks] = mask
    return CheckSet(<unsigned long long>mask)


_busy_policies = {}  # busy-gpus text -> its BusyPolicy value


cdef BusyPolicy _busy_policy(str busy_policy) except *:
    cdef BusyPolicy policy
    cdef string encoded
    found = _busy_policies.get(busy_policy)
    if found is not None:
        return <BusyPolicy><int>found
    encoded = _utf8(busy_policy)
    if not parse_busy_policy(string_view(encoded.data(), encoded.size()), &policy):
        raise ValueError(f"Unknown busy-gpus value {busy_policy!r}: use one of {', '.join(BUSY_GPUS_VALUES)}.")
    _busy_policies[busy_policy] = <int>policy
    return policy


BUSY_GPUS_VALUES = tuple(kBusyPolicyValues.decode("ascii").split(", "))


_busy_names = {<int>BusyPolicy.kAvoid: "avoid", <int>BusyPolicy.kExclude: "exclude",
               <int>BusyPolicy.kIgnore: "ignore"}


cdef tuple _check_names(const CheckSet& checks):
    return tuple([name for i, name in enumerate(HEALTH_CHECKS) if checks.test(i)])


def health_checks_of(str text not None):
    """The checks a ``health-checks`` value enforces (csrc/nvml/settings.*: "all,-inforom"), in
    HEALTH_CHECKS order; ValueError naming the item and what is accepted."""
    cdef string encoded = _utf8(text)
    cdef CheckSet checks
    cdef string wrong = read_health_checks_cpp(string_view(encoded.data(), encoded.size()), &checks)
    if not wrong.empty():
        raise ValueError(_text(wrong))
    return _check_names(checks)


cdef class NvmlSettings:
    """The NVML backend's settings as the core read them (csrc/nvml/settings.hpp): ``busy_gpus`` (one of
    BUSY_GPUS_VALUES), ``nvml_timeout`` and ``metrics_interval`` (seconds), ``health_checks`` (the enforced
    names, in HEALTH_CHECKS order); ``parameter_errors``: one sentence per parameter whose value is wrong
    (it reads as unset); ``flag_error``: the first wrong flag in the script's arguments, or None;
    ``warnings``: each parameter that overrides a flag with another value."""

    cdef readonly str busy_gpus
    cdef readonly double nvml_timeout
    cdef readonly tuple health_checks
    cdef readonly double metrics_interval
    cdef readonly tuple parameter_errors
    cdef readonly object flag_error
    cdef readonly tuple warnings

    def __init__(self):
        raise TypeError("NvmlSettings objects come from flink_gpu.nvml.read_settings()")

    def __repr__(self):
        return (f"NvmlSettings(busy_gpus={self.busy_gpus!r}, nvml_timeout={self.nvml_timeout!r}, "
                f"health_checks={self.health_checks!r}, metrics_interval={self.metrics_interval!r})")


cdef CParameterText _parameter_text(value) except *:
    cdef CParameterText out
    if value is not None:
        out.given = True
        out.text = _utf8(value)
    return out


def read_settings(str key_prefix not None, busy_gpus, nvml_timeout, health_checks, metrics_interval,
                  busy_gpus_flag, nvml_timeout_flag):
    """The NVML backend's settings read from the raw strings by the one parser flink-gpu-discovery uses
    (csrc/nvml/settings.*): the parameters ``busy_gpus`` .. ``metrics_interval`` as Flink renders them
    and the values of ``--busy-gpus`` and ``--nvml-timeout`` in the script's arguments (None: not
    given); messages name keys with ``key_prefix`` in front. An NvmlSettings."""
    cdef CSettingsText text
    text.key_prefix = _utf8(key_prefix)
    text.busy_gpus = _parameter_text(busy_gpus)
    text.nvml_timeout = _parameter_text(nvml_timeout)
    text.health_checks = _parameter_text(health_checks)
    text.metrics_interval = _parameter_text(metrics_interval)
    if busy_gpus_flag is not None:
        text.script.has_busy_gpus = True
        text.script.busy_gpus = _utf8(busy_gpus_flag)
    if nvml_timeout_flag is not None:
        text.script.has_nvml_timeout = True
        text.script.nvml_timeout = _utf8(nvml_timeout_flag)
    cdef CSettings read = read_settings_cpp(text)
    cdef NvmlSettings out = NvmlSettings.__new__(NvmlSettings)
    out.busy_gpus = _busy_names[<int>read.busy]
    out.nvml_timeout = read.nvml_timeout
    out.health_checks = _check_names(read.health_checks)
    out.metrics_interval = read.metrics_interval
    out.parameter_errors = tuple([_text(read.parameter_errors[i]) for i in range(read.parameter_errors.size())])
    out.flag_error = None if read.flag_error.empty() else _text(read.flag_error)
    out.warnings = tuple([_text(read.warnings[i]) for i in range(read.warnings.size())])
    return out


_SYMBOL_USES = {SymbolUse.kRequired: "required", SymbolUse.kFallback: "fallback", SymbolUse.kOptional: "optional"}


def nvml_symbols():
    """Every entry point the NVML loader looks up, in its order: {name: "required" | "fallback" | "optional"}."""
    cdef size_t i
    return {nvml_symbol(<NvmlSymbol>i).name.decode("ascii"): _SYMBOL_USES[nvml_symbol(<NvmlSymbol>i).use]
            for i in range(kNvmlSymbolCount)}


cdef class LibraryProbe(_Record):
    """What probe_nvml_library found in a library: the names of nvml_symbols() it ``exported``, those the
    loader ``resolved`` from it, and its ``process_api``, how it lists processes ("detail_list" | "v3" |
    "v3_r535" | "v2" | "v1" | "none")."""

    _FIELDS = ("exported", "resolved", "process_api")
    cdef readonly tuple exported
    cdef readonly tuple resolved
    cdef readonly str process_api

    def __init__(self):
        raise TypeError("LibraryProbe objects come from probe_nvml_library()")


def probe_nvml_library(library_path):
    """Loads (never initialises) the library at ``library_path``: a LibraryProbe."""
    cdef bytes encoded = os.fsencode(library_path)
    if not encoded or b"\0" in encoded:
        raise ValueError(f"Not a library path: {library_path!r}")
    cdef string requested = encoded
    cdef Status status
    cdef const NvmlLibrary* lib
    with nogil:
        lib = NvmlLibrary.probe(requested, &status)
    if lib == NULL:
        raise _error(status, os.fsdecode(encoded))
    cdef size_t i
    cdef LibraryProbe out = LibraryProbe.__new__(LibraryProbe)
    out.exported = tuple([nvml_symbol(<NvmlSymbol>i).name.decode("ascii") for i in range(kNvmlSymbolCount)
                          if lib.exports(<NvmlSymbol>i)])
    out.resolved = tuple([nvml_symbol(<NvmlSymbol>i).name.decode("ascii") for i in range(kNvmlSymbolCount)
                          if lib.resolved().test(i)])
    out.process_api = process_api_name(lib.api().process_api).decode("ascii")
    return out


cdef SkippedDevice _skipped(const CSkippedDevice& info):
    cdef SkippedDevice s = SkippedDevice.__new__(SkippedDevice)
    s.index = info.nvml_index
    s.mig_slot = info.mig_slot.value() if info.mig_slot.has_value() else None
    s.code = info.code
    s.reason = info.reason.decode("utf-8", "replace")
    return s



_instances = {}

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


cdef class _MetricDevice:
    """The NVML handles one GPU index's readings come from, resolved once per process generation."""
    cdef CMetricDevice c


cdef int _state_pid(pid, str what) except -1:
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"{what} must be a process id (int), got {pid!r}")
    if pid <= 0 or pid > 0x7fffffff:
        raise ValueError(f"Invalid {what} {pid}: it must be a positive process id.")
    return <int>pid


cdef double _timeout(timeout) except -1:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    if not timeout > 0:
        raise ValueError(f"Invalid NVML timeout {timeout!r}: it must be a positive number of seconds.")
    return <double>timeout


cdef class NvmlEnumeration(_Record):
    """One enumeration of a library's GPUs: the usable ``devices`` (NvmlDevice, in index order, a GPU in MIG
    mode replaced by its MIG units), the ``skipped`` ones (SkippedDevice, with the reason) and the
    ``notices`` an operator should know (a MIG mode pending a reset)."""

    _FIELDS = ("devices", "skipped", "notices")
    cdef readonly tuple devices
    cdef readonly tuple skipped
    cdef readonly tuple notices

    def __init__(self):
        raise TypeError("NvmlEnumeration objects come from Nvml.devices()")


cdef class Nvml:
    """A loaded, initialised libnvidia-ml; one per library path and process.

    Obtain it with ``Nvml.open(path)``: loading and initialisation happen once per process (and
    once more in a forked child), never per call.
    """

    cdef readonly str library_path
    cdef string _path
    # read_metric: the library and the handles of each GPU index, for the process generation they
    # were obtained in (a forked child initialises NVML again and resolves them again)
    cdef const NvmlLibrary* _metric_library
    cdef unsigned long _metric_generation
    cdef dict _metric_devices
    # the library as initialised in this process generation (a forked child initialises it again,
    # within a deadline): every later call takes it without a worker's hand-off
    cdef const NvmlLibrary* _opened
    cdef unsigned long _opened_generation

    def __init__(self):
        raise TypeError("use Nvml.open(library_path)")

    @staticmethod
    def open(library_path=None, timeout=DEFAULT_NVML_TIMEOUT):
        """The library at ``library_path`` (None: $FLINK_GPU_NVML_LIBRARY, else libnvidia-ml.so.1),
        loaded and initialised within ``timeout`` seconds: NvmlError (code NVML_ERROR_TIMEOUT) when
        nvmlInit does not return in time, and at once while it still has not (csrc/nvml/deadline.hpp)."""
        cdef double seconds = _timeout(timeout)
        cdef string resolved = _resolved_library(library_path)
        key = os.fsdecode(<bytes>resolved)
        cdef Nvml nvml = _instances.get(key)
        if nvml is None:
            nvml = Nvml.__new__(Nvml)
            nvml.library_path = key
            nvml._path = resolved
            nvml._library(seconds)  # load and initialise now, so that a broken library fails here
            _instances[key] = nvml
        return nvml

    cdef const NvmlLibrary* _library(self, double seconds=kDefaultNvmlTimeoutSeconds, double* spent=NULL) except NULL:
        """The library, loaded and initialised (again in a forked child) within ``seconds``; ``spent``:
        the seconds that took. NvmlError (code NVML_ERROR_TIMEOUT) when NVML did not answer in time."""
        if spent != NULL:
            spent[0] = 0
        cdef unsigned long generation = NvmlLibrary.process_generation()
        if self._opened != NULL and generation == self._opened_generation:
            return self._opened
        cdef Status status
        cdef Stall stall
        cdef const NvmlLibrary* lib = NULL
        started = time.monotonic()
        with nogil:
            status = open_within(self._path, seconds, &lib, &stall)
        if spent != NULL:
            spent[0] = time.monotonic() - started
        if not status.ok():
            raise _error(status, self.library_path)
        self._opened = lib
        self._opened_generation = NvmlLibrary.process_generation()
        return lib

    def devices(self, timeout=DEFAULT_NVML_TIMEOUT, gpus=None):
        """An NvmlEnumeration: all usable GPUs, in index order, a GPU in MIG mode replaced by its MIG units,
        the unusable ones and the notices. ``gpus``: NVML numbers of the GPUs to enumerate (None: all); no other
        GPU's handle is taken. Enumerated within ``timeout`` seconds: NvmlError (code NVML_ERROR_TIMEOUT)
        when NVML does not answer in time."""
        cdef double seconds = _timeout(timeout)
        cdef optional[vector[unsigned]] only
        cdef vector[unsigned] numbers
        if gpus is not None:
            for gpu in gpus:
                if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 0xFFFFFFFF:
                    raise ValueError(f"A GPU's NVML number is a whole number of at least 0, got {gpu!r}.")
                numbers.push_back(gpu)
            only = numbers
        cdef const NvmlLibrary* lib = self._library(seconds)
        cdef Enumeration found
        cdef Stall stall
        cdef Status status
        with nogil:
            status = enumerate_within(lib[0], seconds, &found, &stall, only)
        if not status.ok():
            raise _error(status, self.library_path)
        cdef NvmlEnumeration out = NvmlEnumeration.__new__(NvmlEnumeration)
        out.devices = tuple([_device(d) for d in found.devices])
        out.skipped = tuple([_skipped(s) for s in found.skipped])
        out.notices = tuple([_text(n) for n in found.notices])
        return out

    @property
    def driver_version(self):
        """The driver's version string, or None when the driver cannot say."""
        cdef const NvmlLibrary* lib = self._library()
        cdef optional[string] version
        cdef Status status = query_driver_version(lib[0], &version)
        if not status.ok():
            raise _error(status, self.library_path)
        return _optional_text(version)

    def states(self, owner_pid, taskmanager_pid=None, health_checks=None, timeout=DEFAULT_NVML_TIMEOUT):
        """The state of every device now, in index order, in one native call: health (judged with
        ``health_checks``, names of HEALTH_CHECKS; None: all), memory, the processes on it judged
        against ``owner_pid`` and ``taskmanager_pid`` (None: none; every process list is read, as a
        diagnosis needs, also on a GPU whose memory shows none in use). A GPU NVML refuses a handle
        for is one unhealthy state. Read within ``timeout`` seconds (csrc/nvml/deadline.hpp): a GPU
        not read in time is unknown; NvmlError (code NVML_ERROR_TIMEOUT) when not even the GPU count
        was read, or NVML was not initialised in time (a forked child's first call)."""
        cdef int owner = _state_pid(owner_pid, "owner_pid")
        cdef int taskmanager = 0 if taskmanager_pid is None else _state_pid(taskmanager_pid, "taskmanager_pid")
        cdef CheckSet enforced = _check_set(health_checks)
        cdef double seconds = _timeout(timeout)
        cdef double spent = 0
        cdef const NvmlLibrary* lib = self._library(seconds, &spent)
        cdef vector[CDeviceState] found
        cdef vector[Stall] stalls
        cdef ReadPlan plan
        plan.every_process_list = True  # a diagnosis: a list NVML refuses shows on an idle GPU too
        cdef cpp_bool count_known = False
        cdef Status status
        with nogil:
            status = query_states_within(lib[0], owner, taskmanager, enforced, plan, seconds, &found, &stalls,
                                         &count_known, spent)
        if not status.ok():
            raise _error(status, self.library_path)
        cdef Stall stalled
        if not count_known:
            if stalls.size():
                stalled = stalls[0]
            else:
                stalled.function = b"nvmlDeviceGetCount_v2"
            raise _error(stall_failure(stalled, seconds, self._path), self.library_path)
        cdef size_t i
        return tuple([_state(found[i]) for i in range(found.size())])

    def read_metric(self, gpu_index, metric):
        """One reading of ``metric`` (one of METRICS) on the GPU ``gpu_index`` (as GPUInfo carries it:
        "<index>" or "<index>:<slot>" for a MIG unit), as an int; -1 where NVML cannot say (the
        driver lacks the query, NOT_SUPPORTED, any NVML error, an index the library does not have).
        Never raises for NVML: cheap enough for a gauge, the device's handles are resolved on its
        first reading in this process, never by enumerating. ValueError for a metric not in METRICS."""
        if not isinstance(gpu_index, str):
            raise TypeError(f"gpu_index must be a GPU index (str), got {gpu_index!r}")
        metric_id = _METRIC_IDS.get(metric) if isinstance(metric, str) else None
        if metric_id is None:
            raise ValueError(f"Unknown GPU metric {metric!r}: use one of {', '.join(METRICS)}.")
        cdef Status status
        cdef Stall stall
        cdef const NvmlLibrary* lib = NULL
        cdef unsigned long generation = NvmlLibrary.process_generation()
        if generation != self._metric_generation:
            with nogil:
                status = open_within(self._path, kDefaultNvmlTimeoutSeconds, &lib, &stall)
            if not status.ok():
                return -1
            self._metric_library = lib
            self._metric_generation = generation
            self._metric_devices = {}
        lib = self._metric_library
        cdef _MetricDevice device = self._metric_devices.get(gpu_index)
        cdef string encoded
        cdef bint found
        if device is None:
            device = _MetricDevice.__new__(_MetricDevice)
            encoded = _utf8(gpu_index)
            with nogil:
                found = find_metric_device(lib[0], string_view(encoded.data(), encoded.size()), &device.c)
            if not found:
                return -1  # not cached: a MIG instance may be created later
            self._metric_devices[gpu_index] = device
        cdef Metric which = <Metric><int>metric_id
        cdef long long value
        with nogil:
            value = read_metric_cpp(lib[0], device.c, which)
        return value

    def __repr__(self):
        return f"Nvml(library_path={self.library_path!r})"
