# This host's processes (csrc/host/); included by _native.pyx.

cdef extern from "host/process_tree.hpp" namespace "flinkgpu" nogil:
    int find_taskmanager_cpp "flinkgpu::find_taskmanager"(int pid)


def find_taskmanager(pid):
    """The nearest ancestor of ``pid`` (its parent first) running Flink's TaskManagerRunner, or None."""
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"pid must be a process id (int), got {pid!r}")
    if pid <= 0 or pid > 0x7fffffff:
        raise ValueError(f"Invalid pid {pid}: it must be a positive process id.")
    cdef int found = find_taskmanager_cpp(<int>pid)
    return found if found > 0 else None
