# Binding of csrc/coordination/bindings.hpp (docs/design.md §9.3), included by _native.pyx after _coordination.pxi (whose
# option, pid and index conversions it shares, and whose coordination_snapshot reads a bindings file too).
# Plain values out, _error for failures; flink_gpu.binding makes the public API.

cdef extern from "coordination/bindings.hpp" namespace "flinkgpu::binding" nogil:
    cdef cppclass BindHolder "flinkgpu::binding::Holder":
        pid_t pid
        string slot
        pid_t taskmanager
        uint64_t start_time

    cdef cppclass BindResult "flinkgpu::binding::BindResult":
        Status status
        vector[string] indices
        vector[string] added
        vector[CoordBadLine] unparsable
        Status lease_problem
        uint64_t start_time
        string file_identity

    Status binding_check_slot "flinkgpu::binding::check_slot"(const string& slot)
    BindResult binding_bind_cpp "flinkgpu::binding::bind"(
        const CoordOptions& opts, const BindHolder& holder, const vector[string]& gpus, size_t count,
        uint32_t holders_per_gpu, const vector[int]& ranks)
    CoordReleaseResult binding_unbind_cpp "flinkgpu::binding::unbind"(const CoordOptions& opts,
                                                                     const BindHolder& holder)


cdef BindHolder _bi_holder(pid, slot, taskmanager) except *:
    cdef BindHolder holder
    cdef Status status
    holder.pid = _co_pid(pid)
    if slot is not None:
        if not isinstance(slot, str):
            raise TypeError(f"a slot id must be a str, got {slot!r}")
        holder.slot = (<str>slot).encode("utf-8", "surrogateescape")
        status = binding_check_slot(holder.slot)  # "" too: the core reads an empty slot as a process holder
        if not status.ok():
            raise _error(status, "")
    if taskmanager is not None:
        holder.taskmanager = _co_pid(taskmanager)
    return holder


def binding_bind(path, double timeout, pid, slot, taskmanager, gpus, size_t count, uint32_t holders_per_gpu,
                 ranks=None):
    """Binds ``count`` of ``gpus`` to the holder (process ``pid``, or thread ``pid`` of slot ``slot``):
    (indices, added, [(line number, text)], why a process holder bound without a lease or None, the
    holder's start time (0: unknown), the bindings file's identity "<major>:<minor>:<inode>")."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef BindHolder holder = _bi_holder(pid, slot, taskmanager)
    cdef vector[string] candidates = _co_indices(gpus)
    cdef vector[int] cranks
    if ranks is not None:
        for rank in ranks:
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise TypeError(f"a rank must be an int, got {rank!r}")
            cranks.push_back(rank)
        if cranks.size() != candidates.size():
            raise ValueError(f"Got {cranks.size()} ranks for {candidates.size()} GPU indices: give one rank per index.")
    cdef BindResult r
    with nogil:
        r = binding_bind_cpp(opts, holder, candidates, count, holders_per_gpu, cranks)
    if not r.status.ok():
        raise _error(r.status, path)
    lease_problem = None if r.lease_problem.ok() else _co_text(r.lease_problem.message)
    return (_co_strings(r.indices), _co_strings(r.added), _co_bad_lines(r.unparsable), lease_problem,
            r.start_time, _co_text(r.file_identity))


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
