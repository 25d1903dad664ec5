# A GPU's state and health (csrc/nvml/state.*, health.*, choice.hpp's busy policy): the records a state read
# returns and the conversions of health checks and busy-gpus; included by _native.pyx after _nvml_devices.pxi.

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
    "no permission" | "not applicable"), the finding's ``verdict`` (a Verdict), the ``finding`` (for "not
    applicable", why, where the check says: the nvlink check's "no active NVLink") or None, and whether it is
    ``enforced``."""

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
    # a finding; for "not applicable", why, where the check says ("no active NVLink")
    shown = c.outcome == Outcome.kFinding or (c.outcome == Outcome.kNotApplicable and not c.finding.empty())
    out.finding = _text(c.finding) if shown else None
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


cdef CheckSet _check_set(health_checks, str what="health_checks") except *:
    """The CheckSet of ``health_checks`` (names of HEALTH_CHECKS; None: all of them): TypeError for a name
    that is not a str, the core's rule for the names (ValueError naming ``what``)."""
    cdef CheckSet checks = all_checks()
    if health_checks is None:
        return checks
    cdef vector[string] names
    for name in health_checks:
        if not isinstance(name, str):
            raise TypeError(f"{what} must be names of health checks (str), got {name!r}")
        names.push_back(_utf8(name))
    cdef string label = _utf8(what)
    cdef Status status = check_names(names, label.c_str(), &checks)
    if not status.ok():
        raise _error(status, "")
    return checks


cdef BusyPolicy _busy_policy(str busy_policy) except *:
    cdef BusyPolicy policy
    cdef string encoded = _utf8(busy_policy)
    if not parse_busy_policy(string_view(encoded.data(), encoded.size()), &policy):
        raise ValueError(f"Unknown busy-gpus value {busy_policy!r}: use one of {', '.join(BUSY_GPUS_VALUES)}.")
    return policy


BUSY_GPUS_VALUES = tuple(kBusyPolicyValues.decode("ascii").split(", "))


_busy_names = {<int>BusyPolicy.kAvoid: "avoid", <int>BusyPolicy.kExclude: "exclude",
               <int>BusyPolicy.kIgnore: "ignore"}


cdef TopologyPolicy _topology_policy(str topology) except *:
    cdef TopologyPolicy policy
    cdef string encoded = _utf8(topology)
    if not parse_topology_policy(string_view(encoded.data(), encoded.size()), &policy):
        # the settings reader's sentence for a parameter (csrc/nvml/settings.cpp)
        raise ValueError(f"Invalid value {topology!r} for topology: expected one of {', '.join(TOPOLOGY_VALUES)}.")
    return policy


TOPOLOGY_VALUES = tuple(kTopologyPolicyValues.decode("ascii").split(", "))


_topology_names = {<int>TopologyPolicy.kPrefer: "prefer", <int>TopologyPolicy.kIgnore: "ignore"}


cdef tuple _check_names(const CheckSet& checks):
    return tuple([name for i, name in enumerate(HEALTH_CHECKS) if checks.test(i)])
