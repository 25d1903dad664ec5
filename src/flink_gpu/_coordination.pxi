# Binding of csrc/coordination/claims.hpp (docs/design.md §5.2), included by _native.pyx. Records out (a line's
# fields and its holder's identity, as the core answers it: coordination/identity.hpp; what a claim, a read, a
# cleaning found), Python exceptions (_native.pyx's _error) for failures; flink_gpu.coordination makes the public
# API.

from libc.stdint cimport SIZE_MAX, int64_t, uint64_t
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from posix.types cimport pid_t

import os


COORDINATION_DEFAULT_PATH = kDefaultCoordinationPath.decode("ascii")
#: What a coordination file's path takes to name its lease file and its bindings file (csrc/coordination/file.hpp).
LEASE_SUFFIX = kLeaseSuffix.decode("ascii")
TOPOLOGY_SUFFIX = kTopologySuffix.decode("ascii")
BINDINGS_SUFFIX = kBindingsSuffix.decode("ascii")


cdef inline str _co_text(const string& value):
    # File contents and paths are bytes; surrogateescape keeps any byte representable and reversible.
    return value.decode("utf-8", "surrogateescape")


cdef CoordOptions _co_options(path, double timeout) except *:
    cdef CoordOptions opts
    if timeout != timeout or timeout < 0:
        raise ValueError(f"The lock timeout must be a non-negative number of seconds, got {timeout!r}.")
    opts.path = os.fsencode(path)
    opts.timeout_ms = <int64_t>min(timeout * 1000.0 + 0.5, 1e15)
    return opts


def coordination_own_pid():
    """This process's pid as the core knows it (getpid() once per process, again in any fork()ed child:
    pthread_atfork, which os.register_at_fork is not for a fork() made from C)."""
    return coord_own_pid()


cdef vector[string] _co_indices(indices) except *:
    cdef vector[string] out
    for index in indices:
        if isinstance(index, int) and not isinstance(index, bool):
            index = str(index)
        elif not isinstance(index, str):
            raise TypeError(f"a GPU index must be a str (as nvidia-smi prints it) or an int, got {index!r}")
        out.push_back((<str>index).encode("utf-8", "surrogateescape"))
    return out


cdef vector[pair[string, string]] _co_left_out(left_out) except *:
    cdef vector[pair[string, string]] out
    cdef vector[string] index
    for pair_ in left_out:
        where, why = (pair_.index, pair_.why) if isinstance(pair_, LeftOut) else pair_
        if not isinstance(why, str):
            raise TypeError(f"why a GPU is left out must be a str, got {why!r}")
        index = _co_indices([where])
        out.push_back(pair[string, string](index[0], (<str>why).encode("utf-8", "surrogateescape")))
    return out


cdef list _co_strings(const vector[string]& values):
    return [_co_text(values[i]) for i in range(values.size())]


cdef class UnparsableLine(_Record):
    """A line of a coordination or bindings file that is neither an entry nor blank: kept as is; the index it
    names is never reclaimed. ``line_number`` (from 1) and ``text``."""

    _FIELDS = ("line_number", "text")
    cdef readonly size_t line_number
    cdef readonly str text

    def __init__(self, line_number, text):
        self.line_number = line_number
        self.text = text


cdef class LeftOut(_Record):
    """A GPU never handed out: its ``index`` and ``why`` (unhealthy, busy, not read in time, ...)."""

    _FIELDS = ("index", "why")
    cdef readonly str index
    cdef readonly str why

    def __init__(self):
        raise TypeError("LeftOut records come from the core's discovery and bind")


cdef LeftOut _left_out(const string& index, const string& why):
    cdef LeftOut out = LeftOut.__new__(LeftOut)
    out.index = _text(index)
    out.why = _text(why)
    return out


cdef class Notice(_Record):
    """What an outcome says besides its result, written by the core where it decided (csrc/base/notice.hpp):
    its ``level`` ("warning" or "info", a logging level's name in lower case) and ``text``, a full sentence."""

    _FIELDS = ("level", "text")
    cdef readonly str level
    cdef readonly str text

    def __init__(self):
        raise TypeError("Notice records come from the core's outcomes")


cdef tuple _notices(const vector[CNotice]& notices):
    cdef Notice notice
    out = []
    for i in range(notices.size()):
        notice = Notice.__new__(Notice)
        notice.level = "info" if notices[i].level == NoticeLevel.kInfo else "warning"
        notice.text = _co_text(notices[i].text)
        out.append(notice)
    return tuple(out)


cdef tuple _co_bad_lines(const vector[CoordBadLine]& lines):
    cdef UnparsableLine line
    out = []
    for i in range(lines.size()):
        line = UnparsableLine.__new__(UnparsableLine)
        line.line_number = lines[i].line_number
        line.text = _co_text(lines[i].text)
        out.append(line)
    return tuple(out)


cdef str _co_state(CoordVerdict verdict):
    if verdict == kVerdictAlive:
        return "live"
    if verdict == kVerdictGone:
        return "gone"
    if verdict == kVerdictPidReused:
        return "pid reused"
    if verdict == kVerdictTaskManagerGone:
        return "taskmanager gone"
    if verdict == kVerdictLeaseHeld:
        return "lease held"
    if verdict == kVerdictLeaseReleased:
        return "lease released"
    return "other namespace"


cdef str _co_liveness(CoordVerdict verdict):
    cdef CoordLiveness liveness = coord_liveness_of(verdict)
    if liveness == kLivenessAlive:
        return "alive"
    if liveness == kLivenessDead:
        return "dead"
    return "unknown"


cdef class CoordinationEntry(_Record):
    """One line of the coordination file or of the bindings file (docs/design.md §5.2, §9.3), with its
    holder's identity as the core judges it (csrc/coordination/identity.hpp): decide on ``ours``, ``holder_key``,
    ``taskmanager_key`` and ``liveness``, never on a bare ``pid``, which means another process in another
    pid namespace.

    ``pid``: a pid of the namespace ``namespace`` (ours when None: the stock script's lines); ``start_time``:
    clock ticks since boot (/proc/<pid>/stat field 22), None in stock lines; ``alive``: not proven dead (see
    ``state``); ``state``: one of flink_gpu.coordination.STATES; ``namespace``: inode of the writer's
    /proc/self/ns/pid, None in stock lines; ``lease``: the byte of ``<file>.lease`` its owner keeps locked;
    ``lease_file``: the token of the lease file that lease is on (None: not known, lf=none); ``gpu``: the GPU,
    the index itself or a MIG unit's parent; ``liveness``: "alive", "dead" or "unknown" (taken, but nothing
    proves it alive); ``ours``: whether ``pid`` (and ``taskmanager``) are pids of this process's pid namespace;
    ``holder_key``: one key per holder, with its pid namespace (equal keys, one holder); ``taskmanager_key``:
    the TaskManager's key, as holder_key names a process. The bindings file's fields (None in coordination
    lines): ``taskmanager``, the process whose GPUs are bound; ``holders_per_gpu``; ``memory``, bytes the
    holder requested of the GPU (``mem``); ``slot``, a slot holder's id (``pid`` is then one of its threads).
    """

    _FIELDS = ("index", "pid", "start_time", "alive", "line_number", "state", "namespace", "lease", "lease_file",
               "gpu", "liveness", "ours", "holder_key", "taskmanager_key", "taskmanager", "holders_per_gpu",
               "memory", "slot")
    cdef readonly str index
    cdef readonly long pid
    cdef readonly object start_time
    cdef readonly bint alive
    cdef readonly size_t line_number
    cdef readonly str state
    cdef readonly object namespace
    cdef readonly object lease
    cdef readonly object lease_file
    cdef readonly str gpu
    cdef readonly str liveness
    cdef readonly bint ours
    cdef readonly str holder_key
    cdef readonly object taskmanager_key
    cdef readonly object taskmanager
    cdef readonly object holders_per_gpu
    cdef readonly object memory
    cdef readonly object slot

    def __init__(self, str index not None, long pid, start_time, bint alive, size_t line_number,
                 str state not None="live", namespace=None, lease=None, lease_file=None, str gpu not None="",
                 str liveness not None="alive", bint ours=True, str holder_key not None="", taskmanager_key=None,
                 taskmanager=None, holders_per_gpu=None, memory=None, slot=None):
        self.index = index
        self.pid = pid
        self.start_time = start_time
        self.alive = alive
        self.line_number = line_number
        self.state = state
        self.namespace = namespace
        self.lease = lease
        self.lease_file = lease_file
        self.gpu = gpu
        self.liveness = liveness
        self.ours = ours
        self.holder_key = holder_key
        self.taskmanager_key = taskmanager_key
        self.taskmanager = taskmanager
        self.holders_per_gpu = holders_per_gpu
        self.memory = memory
        self.slot = slot

    @property
    def liveness_known(self):
        """False for an entry whose holder nothing proves alive (of another pid namespace): it counts as
        alive."""
        return self.liveness != "unknown"

    @property
    def holder(self):
        """How a person reads the holder: ``"pid <n>"`` or ``"slot <id>"`` (see ``holder_key`` to tell holders
        apart)."""
        return f"pid {self.pid}" if self.slot is None else f"slot {self.slot}"


cdef CoordinationEntry _co_entry(const CoordEntry& e, const CoordPidNamespace& ours):
    # the identity answers are the core's
    cdef CoordinationEntry out = CoordinationEntry.__new__(CoordinationEntry)
    cdef string taskmanager_key = e.taskmanager_key(ours)
    out.line_number = e.line_number
    out.index = _co_text(e.index)
    out.gpu = _co_text(e.gpu)
    out.pid = e.pid
    out.start_time = e.start_time if e.has_start_time else None
    out.alive = e.alive
    out.state = _co_state(e.verdict)
    out.liveness = _co_liveness(e.verdict)
    out.namespace = e.ns if e.has_ns else None
    out.lease = e.lease if e.has_lease else None
    out.lease_file = _co_text(e.lease_file) if e.has_lease and e.lease_file_known() else None  # none: lf=none
    out.taskmanager = e.tm if e.tm > 0 else None
    out.holders_per_gpu = e.share if e.share > 0 else None
    out.memory = e.memory if e.memory > 0 else None
    out.slot = _co_text(e.slot) if not e.slot.empty() else None
    out.ours = e.pid_is_in(ours)
    out.holder_key = _co_text(e.key(ours))
    out.taskmanager_key = _co_text(taskmanager_key) if not taskmanager_key.empty() else None
    return out


cdef tuple _co_entries(const vector[CoordEntry]& entries):
    cdef CoordPidNamespace ours = coord_own_pid_namespace()
    return tuple([_co_entry(entries[i], ours) for i in range(entries.size())])


cdef class CoordinationClaim(_Record):
    """What one claim did (csrc/coordination/claims.hpp): the owner's GPUs now (``indices``), those it
    ``added``, the part of them ``reclaimed`` from dead owners, the file's ``unparsable`` lines
    (UnparsableLine), ``lease_problem``: why the calling process claimed for itself without a lease, or
    None, and the ``notices`` to log (Notice: each unparsable line, a lease problem, what was reclaimed)."""

    _FIELDS = ("indices", "added", "reclaimed", "unparsable", "lease_problem", "notices")
    cdef readonly list indices
    cdef readonly list added
    cdef readonly list reclaimed
    cdef readonly tuple unparsable
    cdef readonly object lease_problem
    cdef readonly tuple notices

    def __init__(self):
        raise TypeError("CoordinationClaim objects come from coordination_claim()")


cdef class FileSnapshot(_Record):
    """A coordination or bindings file as one read found it: whether it ``exists``, its ``entries``
    (CoordinationEntry) and its ``unparsable`` lines (UnparsableLine)."""

    _FIELDS = ("exists", "entries", "unparsable")
    cdef readonly bint exists
    cdef readonly tuple entries
    cdef readonly tuple unparsable

    def __init__(self):
        raise TypeError("FileSnapshot objects come from coordination_snapshot()")


cdef class CleanResult(_Record):
    """What one cleaning removed (``removed``: CoordinationEntry) and the lines it left as they are
    (``unparsable``: UnparsableLine)."""

    _FIELDS = ("removed", "unparsable")
    cdef readonly tuple removed
    cdef readonly tuple unparsable

    def __init__(self, removed=(), unparsable=()):
        self.removed = tuple(removed)
        self.unparsable = tuple(unparsable)


def coordination_claim(path, double timeout, owner, indices, amount, left_out=()):
    """Claims ``amount`` GPUs for ``owner``: a CoordinationClaim, every index ranked equal (the one discovery,
    policy_discover, ranks them in the core). ``left_out``: (index, why) for each of the
    host's GPUs that is not among ``indices``, named in the not-enough message. An ``amount`` beyond what
    the core counts (a size_t) is more than any host has: the core's not-enough error."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef pid_t pid = <pid_t>_pid(owner, "owner pid")
    cdef vector[string] existing = _co_indices(indices)
    cdef vector[pair[string, string]] out = _co_left_out(left_out)
    cdef Status status
    if amount > SIZE_MAX:
        status = coord_not_enough(opts, str(amount).encode("ascii"), existing, out)
        raise _error(status, path)
    cdef size_t count = amount
    cdef vector[int] cranks  # none: all equal
    cdef CoordClaimResult r
    with nogil:
        r = coord_claim(opts, pid, existing, count, cranks, out)
    if not r.status.ok():
        raise _error(r.status, path)
    cdef CoordinationClaim claimed = CoordinationClaim.__new__(CoordinationClaim)
    claimed.indices = _co_strings(r.indices)
    claimed.added = _co_strings(r.added)
    claimed.reclaimed = _co_strings(r.reclaimed)
    claimed.unparsable = _co_bad_lines(r.unparsable)
    claimed.lease_problem = None if r.lease_problem.ok() else _co_text(r.lease_problem.message)
    claimed.notices = _notices(r.notices)
    return claimed


def coordination_release(path, double timeout, owner, indices=None):
    """Removes the lines of ``owner`` (only those of ``indices`` when given); the released indices."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef pid_t pid = <pid_t>_pid(owner, "owner pid")
    cdef vector[string] only
    cdef bint all_of_them = indices is None
    cdef CoordReleaseResult r
    if not all_of_them:
        only = _co_indices(indices)
    with nogil:
        if all_of_them:
            r = coord_release(opts, pid)
        else:
            r = coord_release_indices(opts, pid, only)
    if not r.status.ok():
        raise _error(r.status, path)
    return _co_strings(r.released)


def coordination_snapshot(path, double timeout):
    """A FileSnapshot of a coordination or bindings file (the same lines: a bindings line has its taskmanager,
    holders_per_gpu and slot)."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef CoordSnapshot r
    with nogil:
        r = coord_snapshot(opts)
    if not r.status.ok():
        raise _error(r.status, path)
    cdef FileSnapshot out = FileSnapshot.__new__(FileSnapshot)
    out.exists = r.exists
    out.entries = _co_entries(r.entries)
    out.unparsable = _co_bad_lines(r.unparsable)
    return out


def coordination_clean_stale(path, double timeout, bint other_namespaces=False):
    """Removes dead owners' lines (and, with ``other_namespaces``, those of other pid namespaces whose
    liveness is unknown): a CleanResult."""
    cdef CoordOptions opts = _co_options(path, timeout)
    cdef CoordCleanResult r
    with nogil:
        r = coord_clean_stale(opts, other_namespaces)
    if not r.status.ok():
        raise _error(r.status, path)
    return CleanResult(_co_entries(r.removed), _co_bad_lines(r.unparsable))


def coordination_companion_problems(path):
    """[why each file beside the coordination file ``path`` that exists would be refused for its owner or mode]."""
    cdef CoordOptions opts = _co_options(path, 0.0)
    cdef vector[Status] problems
    with nogil:
        problems = coord_check_companions(opts)
    return [problems[i].message.decode("utf-8", "surrogateescape") for i in range(problems.size())]


def coordination_companion_paths(path):
    """[the lease file, the bindings file and the bindings file's lease file] of the coordination file ``path``."""
    return [os.fsdecode(p) for p in coord_companion_paths(os.fsencode(path))]


def coordination_process_start_time(pid):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None for a gone or zombie process."""
    cdef uint64_t start = 0
    cdef pid_t p = <pid_t>_pid(pid, "pid")
    if coord_process_start_time(p, &start):
        return start
    return None


def unit_parent(str index not None):
    """The GPU of a MIG unit's index "<gpu>:<slot>" (csrc/coordination/lines.hpp unit_gpu); None for any
    other index."""
    if not unit_gpu_cpp(_utf8(index), NULL):  # no output: nothing allocated, nothing thrown
        return None
    return index.partition(":")[0]
