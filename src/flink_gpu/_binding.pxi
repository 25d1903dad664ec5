# Binding of csrc/coordination/bindings.hpp (docs/design.md §9.3), included by _native.pyx after _coordination.pxi (whose
# option, pid and index conversions it shares, and whose coordination_snapshot reads a bindings file too).
# Plain values and records out, _error for failures; flink_gpu.binding makes the public API.

#: The most holders a binding lets share one GPU, and the largest memory request a bindings line records
#: (bytes) (csrc/coordination/lines.hpp); the most GPUs the core counts (its size_t: more than any host has).
MAX_HOLDERS_PER_GPU = kMaxShare
MAX_MEMORY_REQUEST = kMaxMemoryRequest
MAX_GPU_COUNT = SIZE_MAX


def checked_share(value, str what not None):
    """``value`` (an int) as a number of holders that may share one GPU, by the core's rule (1 to
    MAX_HOLDERS_PER_GPU): ValueError naming ``what``, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    cdef bint wide = not -2**63 <= value < 2**63
    cdef string name = _utf8(what)
    cdef string written = _utf8(str(value)) if wide else string()
    cdef Status status = check_share(0 if wide else value, name.c_str(), written)
    if not status.ok():
        raise _error(status, "")
    return value


def checked_memory_request(size, str what not None, str written not None):
    """``size`` (bytes, an int of at least 0) as a memory request, by the core's rule (at most
    MAX_MEMORY_REQUEST): ValueError naming ``what`` and the value as the caller ``written`` it."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise TypeError(f"{what} must be bytes (an int of at least 0), got {size!r}")
    cdef string name = _utf8(what)
    cdef string shown = _utf8(written)
    cdef Status status = check_memory_request(min(size, 2**64 - 1), name.c_str(), shown)
    if not status.ok():
        raise _error(status, "")
    return size


cdef class Orphan(_Record):
    """An orphaned worker a bind's shortage names: process ``pid`` still runs on GPU ``index``, short of
    memory, though ``taskmanager``, the TaskManager it bound for, is gone."""

    _FIELDS = ("pid", "taskmanager", "index")
    cdef readonly int pid
    cdef readonly int taskmanager
    cdef readonly str index

    def __init__(self):
        raise TypeError("Orphan records come from flink_gpu.policy.bind()")


cdef Orphan _orphan(const BindOrphan& o):
    cdef Orphan out = Orphan.__new__(Orphan)
    out.pid = o.pid
    out.taskmanager = o.taskmanager
    out.index = _text(o.index)
    return out


cdef BindHolder _bi_holder(pid, slot, taskmanager) except *:
    cdef BindHolder holder
    cdef Status status
    holder.pid = <pid_t>_pid(pid, "holder pid" if slot is None else "thread id")
    if slot is not None:
        if not isinstance(slot, str):
            raise TypeError(f"a slot id must be a str, got {slot!r}")
        holder.slot = (<str>slot).encode("utf-8", "surrogateescape")
        status = binding_check_slot(holder.slot)  # "" too: the core reads an empty slot as a process holder
        if not status.ok():
            raise _error(status, "")
    if taskmanager is not None:
        holder.taskmanager = <pid_t>_pid(taskmanager, "TaskManager pid")
    return holder


def binding_unbind(path, double timeout, pid, slot, taskmanager, uint64_t start_time=0):
    """Removes the lines the holder wrote (only those of the process or thread started at ``start_time``,
    when given); the indices they bound."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef BindHolder holder = _bi_holder(pid, slot, taskmanager)
    holder.start_time = start_time
    cdef CoordReleaseResult r
    with nogil:
        r = binding_unbind_cpp(opts, holder)
    if not r.status.ok():
        raise _error(r.status, path)
    return _co_strings(r.released)


def binding_orphan_text(pid, taskmanager, gpus):
    """The core's words for an orphaned worker: "pid P, a worker of TaskManager T which is gone, still runs on
    GPU <gpus>" (``gpus``: the indices, joined)."""
    return _co_text(binding_orphan_text_cpp(<pid_t>_pid(pid, "pid"), <pid_t>_pid(taskmanager, "TaskManager pid"), (<str>gpus).encode("utf-8", "surrogateescape")))
