# This host's processes (csrc/host/); included by _native.pyx.

def find_taskmanager(pid):
    """The nearest ancestor of ``pid`` (its parent first) running Flink's TaskManagerRunner, or None."""
    cdef int found = find_taskmanager_cpp(<int>_pid(pid, "pid"))
    return found if found > 0 else None


cdef class ProcessAncestor(_Record):
    """One process of a chain of ancestors: its ``pid`` and ``command`` name."""

    _FIELDS = ("pid", "command")
    cdef readonly int pid
    cdef readonly str command

    def __init__(self):
        raise TypeError("ProcessAncestor objects come from process_ancestry()")


def process_ancestry(pid, size_t limit=64):
    """``pid`` and its ancestors, nearest first, at most ``limit``, as ProcessAncestor records; it ends at a
    process outside our /proc (another pid namespace, or gone)."""
    cdef vector[CProcessAncestor] chain = process_ancestry_cpp(<int>_pid(pid, "pid"), limit)
    cdef ProcessAncestor ancestor
    out = []
    for a in chain:
        ancestor = ProcessAncestor.__new__(ProcessAncestor)
        ancestor.pid = a.pid
        ancestor.command = a.command.decode("utf-8", "replace")
        out.append(ancestor)
    return out
