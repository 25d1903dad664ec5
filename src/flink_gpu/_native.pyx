# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""Binding of the C++ core (csrc/). Thin: conversions, exceptions, nothing Flink-specific."""

from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.utility cimport pair
from libcpp.vector cimport vector

import os
import time

from flink_gpu.errors import NotEnoughGpusError, NvmlError


from flink_gpu._base cimport *
from flink_gpu._flink cimport *
from flink_gpu._nvml cimport *
from flink_gpu._host cimport *
from flink_gpu._coordination cimport *
from flink_gpu._binding cimport *
from flink_gpu._policy cimport *


# --- text helpers ------------------------------------------------------------------------------

cdef inline string _utf8(str text) except *:
    # surrogatepass: a lone surrogate (from a surrogateescape-decoded stream) survives the round trip
    return text.encode("utf-8", "surrogatepass")


cdef inline str _text(const string& value):
    return value.decode("utf-8", "surrogatepass")


cdef inline object _optional_text(const optional[string]& value):
    return value.value().decode("utf-8", "replace") if value.has_value() else None


# --- errors ------------------------------------------------------------------------------------

cdef object _error(const Status& status, path):
    """The Python exception for a failed ``status``; ``path``: the NVML library or the file it concerns."""
    # Messages hold paths, dlerror() text and file contents: bytes, not necessarily UTF-8.
    message = status.message.decode("utf-8", "surrogateescape")
    if status.code == StatusCode.kNvml:
        return NvmlError(message, status.nvml_code, path, status.function.decode("utf-8", "surrogateescape"))
    if status.code == StatusCode.kInvalidArgument:
        return ValueError(message)
    if status.code == StatusCode.kNotEnough:
        return NotEnoughGpusError(message)
    if status.code == StatusCode.kTimeout:
        return TimeoutError(message)
    if status.code == StatusCode.kOsError:
        # OSError's text appends ": '<filename>'": the path goes along only where the core's sentence
        # does not name it, and then ends the sentence (not "...restored.: '<path>'")
        where = os.fspath(path)
        if isinstance(where, str) and where in message:
            return OSError(status.sys_errno, message)
        return OSError(status.sys_errno, message.removesuffix("."), where)
    if status.code == StatusCode.kOutOfMemory:
        return MemoryError(message)
    return RuntimeError(message)


# --- the one pid rule (csrc/base/process_id.hpp) ------------------------------------------------

#: The largest process id a caller may name.
MAX_PID = kMaxPid


cdef long long _pid(value, str what) except? -1:
    """``value`` as a process id: TypeError for anything but an int, the core's rule for its range (ValueError);
    ``what`` names it in the message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a process id (int), got {value!r}")
    cdef bint wide = not -2**63 <= value < 2**63
    cdef long long pid = 0 if wide else value
    cdef string name = _utf8(what)
    cdef string written = _utf8(str(value)) if wide else string()
    cdef Status status = check_pid(pid, name.c_str(), written)
    if not status.ok():
        raise _error(status, "")
    return pid


def checked_pid(value, str what not None):
    """``value`` as a process id (an int of 1 to MAX_PID): TypeError for anything but an int, ValueError naming
    ``what``, the value and the range."""
    return _pid(value, what)


# --- records ---------------------------------------------------------------------------------------

cdef class _Record:
    """A result with named, read-only fields (each record's ``_FIELDS``, in order): repr, equality and hash
    by them."""

    _FIELDS = ()

    cdef tuple _values(self):
        return tuple([getattr(self, name) for name in self._FIELDS])

    def __repr__(self):
        fields = ", ".join([f"{name}={getattr(self, name)!r}" for name in self._FIELDS])
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == (<_Record>other)._values()

    def __hash__(self):
        return hash(self._values())


include "_flink.pxi"
include "_host.pxi"
include "_nvml_devices.pxi"
include "_nvml_state.pxi"
include "_nvml_topology.pxi"
include "_nvml_settings.pxi"
include "_nvml_sampler.pxi"
include "_nvml.pxi"
include "_coordination.pxi"
include "_binding.pxi"
include "_policy.pxi"
