# The NVML backend's settings (csrc/nvml/settings.*): the one reader of busy-gpus, topology, nvml-timeout, health-checks
# and metrics.interval; included by _native.pyx after _nvml_state.pxi.

def health_checks_of(str text not None):
    """The checks a ``health-checks`` value enforces (csrc/nvml/settings.*: "all,-inforom"), in
    HEALTH_CHECKS order; ValueError naming the item and what is accepted."""
    cdef string encoded = _utf8(text)
    cdef CheckSet checks
    cdef string wrong = read_health_checks_cpp(string_view(encoded.data(), encoded.size()), &checks)
    if not wrong.empty():
        raise ValueError(_text(wrong))
    return _check_names(checks)


def checked_nvml_timeout(seconds, str what not None):
    """``seconds`` (a number) as an NVML deadline, by the core's rule (positive, finite): TypeError for
    anything but a number, ValueError naming ``what`` and the value."""
    return _timeout(seconds, what)


def checked_health_checks(names, str what not None):
    """The checks ``names`` (an iterable of names of HEALTH_CHECKS, exactly; not the option's text) name,
    in HEALTH_CHECKS order, by the core's rule: ValueError naming ``what`` and the first that is not one."""
    return _check_names(_check_set(names, what))


cdef class NvmlSettings:
    """The NVML backend's settings as the core read them (csrc/nvml/settings.hpp): ``busy_gpus`` (one of
    BUSY_GPUS_VALUES), ``topology`` (one of TOPOLOGY_VALUES), ``nvml_timeout`` and ``metrics_interval`` (seconds), ``health_checks`` (the enforced
    names, in HEALTH_CHECKS order); ``parameter_errors``: one sentence per parameter whose value is wrong
    (it reads as unset); ``flag_error``: the first wrong flag in the script's arguments, or None;
    ``warnings``: each parameter that overrides a flag with another value."""

    cdef readonly str busy_gpus
    cdef readonly str topology
    cdef readonly double nvml_timeout
    cdef readonly tuple health_checks
    cdef readonly double metrics_interval
    cdef readonly tuple parameter_errors
    cdef readonly object flag_error
    cdef readonly tuple warnings

    def __init__(self):
        raise TypeError("NvmlSettings objects come from flink_gpu.nvml.read_settings()")

    def __repr__(self):
        return (f"NvmlSettings(busy_gpus={self.busy_gpus!r}, topology={self.topology!r}, nvml_timeout={self.nvml_timeout!r}, "
                f"health_checks={self.health_checks!r}, metrics_interval={self.metrics_interval!r})")


cdef CParameterText _parameter_text(value) except *:
    cdef CParameterText out
    if value is not None:
        out.given = True
        out.text = _utf8(value)
    return out


def read_settings(str key_prefix not None, busy_gpus, nvml_timeout, health_checks, metrics_interval,
                  busy_gpus_flag, nvml_timeout_flag, bint arguments=False, topology=None, topology_flag=None):
    """The NVML backend's settings read from the raw strings by the one parser flink-gpu-discovery uses
    (csrc/nvml/settings.*): the parameters ``busy_gpus`` .. ``metrics_interval`` as Flink renders them
    and the values of ``--busy-gpus`` and ``--nvml-timeout`` in the script's arguments (None: not
    given), likewise the ``topology`` parameter and ``--topology``; messages name keys with ``key_prefix`` in front, or with ``arguments`` the parameters as a
    call's arguments (``nvml_timeout``: bind's). An NvmlSettings."""
    cdef CSettingsText text
    text.key_prefix = _utf8(key_prefix)
    text.parameters_are_arguments = arguments
    text.busy_gpus = _parameter_text(busy_gpus)
    text.topology = _parameter_text(topology)
    text.nvml_timeout = _parameter_text(nvml_timeout)
    text.health_checks = _parameter_text(health_checks)
    text.metrics_interval = _parameter_text(metrics_interval)
    if busy_gpus_flag is not None:
        text.script.has_busy_gpus = True
        text.script.busy_gpus = _utf8(busy_gpus_flag)
    if topology_flag is not None:
        text.script.has_topology = True
        text.script.topology = _utf8(topology_flag)
    if nvml_timeout_flag is not None:
        text.script.has_nvml_timeout = True
        text.script.nvml_timeout = _utf8(nvml_timeout_flag)
    cdef CSettings read = read_settings_cpp(text)
    cdef NvmlSettings out = NvmlSettings.__new__(NvmlSettings)
    out.busy_gpus = _busy_names[<int>read.busy]
    out.topology = _topology_names[<int>read.topology]
    out.nvml_timeout = read.nvml_timeout
    out.health_checks = _check_names(read.health_checks)
    out.metrics_interval = read.metrics_interval
    out.parameter_errors = tuple([_text(read.parameter_errors[i]) for i in range(read.parameter_errors.size())])
    out.flag_error = None if read.flag_error.empty() else _text(read.flag_error)
    out.warnings = tuple([_text(read.warnings[i]) for i in range(read.warnings.size())])
    return out
