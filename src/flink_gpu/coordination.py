"""GPU coordination between the workers of one host.

The protocol (the file, its line format, who owns a line and when it is dead, the lease) is described
once, in docs/design.md §5.2 and §9.4; this module is its Python face. The work is done by the C++ core
(csrc/coordination/claims.cpp and csrc/coordination/identity.hpp); this module resolves the owner (the calling
process unless given, so that a forked child never takes its parent's claims), hands on the core's
:class:`CoordinationEntry` records, whose ``ours``, ``holder_key`` and ``liveness`` are the core's
answers about a line's holder, and logs what the core reports.

Every function is thread-safe: each call opens its own file description, and ``flock(2)`` excludes
between file descriptions even inside one process. The GIL is released while waiting for the lock.
"""

from __future__ import annotations

import errno
import logging
import operator
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Union

from flink_gpu import _native

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_TIMEOUT",
    "LEASE_SUFFIX",
    "TOPOLOGY_SUFFIX",
    "MAX_PID",
    "STATES",
    "ClaimResult",
    "CleanResult",
    "CoordinationEntry",
    "CoordinationSnapshot",
    "UnparsableLine",
    "checked_pid",
    "claim",
    "claimed",
    "log_notices",
    "clean_stale",
    "companion_paths",
    "companion_problems",
    "own_pid",
    "process_start_time",
    "release",
    "snapshot",
    "whole_amount",
]

_log = logging.getLogger("flink_gpu.coordination")

PathType = Union[str, "os.PathLike[str]"]

#: The stock script's file, shared with Flink TaskManagers of the same host.
DEFAULT_PATH: str = _native.COORDINATION_DEFAULT_PATH
#: What a coordination file's path takes to name its lease file (csrc/coordination/file.hpp names the files
#: beside a coordination file, once: :func:`companion_paths`).
LEASE_SUFFIX: str = _native.LEASE_SUFFIX
#: ... and the host's GPU topology as a claim read it (a copy: anyone may remove it, the next claim writes it).
TOPOLOGY_SUFFIX: str = _native.TOPOLOGY_SUFFIX
#: The largest process id a caller may name (csrc/base/process_id.hpp, the one pid rule: :func:`checked_pid`).
MAX_PID: int = _native.MAX_PID
#: ``value`` as a process id: TypeError for anything but an int, ValueError naming ``what`` outside 1 to MAX_PID.
checked_pid = _native.checked_pid
#: Seconds to wait for the lock; shorter than Flink's 10 s discovery-script timeout, so that our error
#: (which names the file and the holder) arrives before Flink kills the discovery.
DEFAULT_TIMEOUT: float = 5.0

#: How an entry's owner was judged: by its pid in our namespace ("live", "gone", "pid reused"; a binding
#: whose TaskManager is gone, its worker orphaned, "taskmanager gone"), by its lease in another namespace
#: ("lease held": some process holds its byte, liveness unknown; "lease released"), or not at all ("other
#: namespace": written in another pid namespace without a lease we can test, or a bindings file's slot thread
#: line there, whose held lease proves only its process, so taken with liveness unknown).
STATES = ("live", "gone", "pid reused", "taskmanager gone", "lease held", "lease released", "other namespace")


#: One line of the coordination file or of the bindings file with its holder's identity, as the core reads it
#: (its fields: _native.pyi).
CoordinationEntry = _native.CoordinationEntry
#: A line that is neither an entry nor blank: kept as is; the index it names is never reclaimed.
UnparsableLine = _native.UnparsableLine
#: What :func:`clean_stale` removed, and the lines it left as they are.
CleanResult = _native.CleanResult


@dataclass(frozen=True)
class CoordinationSnapshot:
    """The file's content at one moment, with each owner's liveness."""

    path: str
    exists: bool
    entries: "tuple[CoordinationEntry, ...]"
    unparsable: "tuple[UnparsableLine, ...]"

    @property
    def stale(self) -> "tuple[CoordinationEntry, ...]":
        """Entries whose owner is dead: what :func:`clean_stale` removes."""
        return tuple(e for e in self.entries if not e.alive)

    @property
    def liveness_unknown(self) -> "tuple[CoordinationEntry, ...]":
        """Entries of other pid namespaces without a lease that speaks for them: taken, what only
        ``clean_stale(other_namespaces=True)`` removes. (An entry whose lease byte is held, "lease held", is of
        unknown liveness too, but kept: a process holds its lease.)"""
        return tuple(e for e in self.entries if e.state == "other namespace")

    def holders(self) -> "dict[str, tuple[int, ...]]":
        """Index -> the pid of each of its live holders (more than one only after a stock script's race;
        the pids of two namespaces' holders may be equal)."""
        out: "dict[str, dict[str, int]]" = {}
        for e in self.entries:
            if e.alive:
                out.setdefault(e.index, {}).setdefault(e.holder_key, e.pid)  # a holder listed twice is one
        return {index: tuple(pids.values()) for index, pids in out.items()}


@dataclass(frozen=True)
class ClaimResult:
    """What one :func:`claim` did for ``owner``."""

    taken: "list[str]"  # the GPUs the owner gets, lowest index first
    added: "list[str]"  # those of ``taken`` this claim wrote for the owner (it did not hold them before)
    reclaimed: "list[str]"  # those of ``added`` that were taken from dead owners
    owner: int


def own_pid() -> int:
    """This process's pid without a system call: the core asks it once per process, and again in every
    fork()ed child (pthread_atfork, which also runs for a fork() made from C, unlike os.register_at_fork)."""
    return _native.coordination_own_pid()


def _owner(owner: "int | None") -> int:
    return own_pid() if owner is None else owner


def whole_amount(amount: object, what: str = "The amount of GPUs") -> int:
    """``amount`` as an int; a bool, float, str… is a :class:`TypeError` naming it and ``what`` it is."""
    if not isinstance(amount, bool):
        try:
            return operator.index(amount)  # type: ignore[arg-type]  # any object: TypeError below
        except TypeError:
            pass
    raise TypeError(f"{what} must be a whole number (an int), got {amount!r} ({type(amount).__name__}).")


def _amount(amount: int) -> int:
    amount = whole_amount(amount)
    if amount < 0:
        raise ValueError(f"The amount of GPUs to claim must not be negative, got {amount}.")
    return amount


def _log_unparsable(lines: "Iterable[UnparsableLine]", path: PathType) -> "tuple[UnparsableLine, ...]":
    lines = tuple(lines)
    for line in lines:
        _log.warning(
            "Line %d of the coordination file %s cannot be parsed and is left as it is "
            "(its GPU is never reclaimed): %r",
            line.line_number,
            os.fspath(path),
            line.text,
        )
    return lines


#: The logging level of each level a core's Notice names.
_LEVELS = {"info": logging.INFO, "warning": logging.WARNING}


def log_notices(notices: "Iterable[_native.Notice]", logger: logging.Logger = _log) -> None:
    """Logs the ``notices`` of a core's outcome (the core writes each sentence where it decides: a claim's
    unparsable lines, lease problem and reclaimed GPUs; a bind's left-out GPUs...) to ``logger``."""
    for notice in notices:
        logger.log(_LEVELS[notice.level], "%s", notice.text)


def claim(
    amount: int,
    indices: "Iterable[str | int]",
    *,
    path: PathType = DEFAULT_PATH,
    owner: "int | None" = None,
    timeout: float = DEFAULT_TIMEOUT,
    left_out: "Iterable[tuple[str | int, str]]" = (),
) -> ClaimResult:
    """Claims ``amount`` of the GPUs ``indices`` (the host's, e.g. from NVML) for ``owner``.

    ``owner`` defaults to the calling process (``os.getpid()`` at call time). An owner asking again
    gets what it holds: topped up when it asks for more; when it asks for fewer, the lowest ``amount``
    of its GPUs (it keeps holding all of them until :func:`release`). Otherwise free GPUs first, then
    those of dead owners, lowest index first. All or nothing. The result's ``taken`` is what the
    owner gets. ``left_out``: ``(index, why)`` for each of the host's GPUs that is not among ``indices`` (e.g.
    the ones a health check left out): never claimed, but counted among the host's GPUs
    and named with why in a not-enough message.

    Raises :class:`~flink_gpu.NotEnoughGpusError` (a :class:`~flink_gpu.FlinkException`) when too few
    GPUs are free (the message says how many were requested, how many the host has, which are left out
    and why, and which pids hold the rest), :class:`TimeoutError` (naming the
    file and the lock holder) when the lock is not obtained within ``timeout`` seconds, an
    :class:`OSError` naming the path when the file cannot be used (a symlink, not a regular file, no
    permission), :class:`ValueError` for a bad index, a negative amount or a bad owner, and
    :class:`TypeError` for an amount that is no int (:func:`whole_amount`).
    """
    owner = _owner(owner)
    indices = list(indices)
    got = _native.coordination_claim(path, timeout, owner, indices, _amount(amount), list(left_out))
    log_notices(got.notices)
    return ClaimResult(taken=got.indices, added=got.added, reclaimed=got.reclaimed, owner=owner)


def release(
    owner: "int | None" = None,
    *,
    path: PathType = DEFAULT_PATH,
    indices: "Iterable[str | int] | None" = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> "list[str]":
    """Releases the GPUs of ``owner`` (default: the calling process), all or only ``indices``.

    Returns the released indices. A missing file holds nothing and is not created.
    """
    return _native.coordination_release(path, timeout, _owner(owner), None if indices is None else list(indices))


@contextmanager
def claimed(
    amount: int,
    indices: "Iterable[str | int]",
    *,
    path: PathType = DEFAULT_PATH,
    owner: "int | None" = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> "Iterator[ClaimResult]":
    """``with claimed(2, indices) as result:`` claims (``result.taken`` are the GPUs), and releases
    on exit what this block added.

    GPUs the owner held before the block stay held. A child forked inside the block does not release
    its parent's GPUs when it leaves the block.
    """
    me = os.getpid()
    result = claim(amount, indices, path=path, owner=owner, timeout=timeout)
    try:
        yield result
    finally:
        if result.added and (owner is not None or os.getpid() == me):
            release(result.owner, path=path, indices=result.added, timeout=timeout)


def companion_paths(path: PathType = DEFAULT_PATH) -> "tuple[str, ...]":
    """The files beside the coordination file ``path``: its lease file, its bindings file, that one's lease
    file and the host's GPU topology as a claim read it (their names have one home,
    csrc/coordination/file.hpp)."""
    return tuple(_native.coordination_companion_paths(path))


def companion_problems(path: PathType = DEFAULT_PATH) -> "tuple[str, ...]":
    """Why each file beside the coordination file (its lease file, its bindings file and that one's lease file)
    is refused by every claim and bind: owned by a user who is neither root nor the owner of the file it serves,
    or writable by every user (docs/SECURITY.md, Permissions). Empty when all are trusted or absent."""
    return tuple(_native.coordination_companion_problems(path))


def snapshot(path: PathType = DEFAULT_PATH, *, timeout: float = DEFAULT_TIMEOUT) -> CoordinationSnapshot:
    """Reads the file (under a shared lock) for tools: entries with liveness, unparsable lines.

    A missing file gives an empty snapshot with ``exists=False``; nothing is created.
    """
    read = _native.coordination_snapshot(path, timeout)
    return CoordinationSnapshot(
        path=os.fspath(path), exists=read.exists, entries=read.entries, unparsable=read.unparsable
    )


def clean_stale(
    path: PathType = DEFAULT_PATH, *, timeout: float = DEFAULT_TIMEOUT, other_namespaces: bool = False
) -> CleanResult:
    """Removes the lines of dead owners; unparsable lines stay. Never creates the file.

    ``other_namespaces``: also the lines of other pid namespaces whose liveness is unknown (their owners
    may still run: only for GPUs a person knows to be free).
    """
    try:
        result = _native.coordination_clean_stale(path, timeout, bool(other_namespaces))
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        # a file this process may only read: cleaning it fails only when there is something to remove
        seen = snapshot(path, timeout=timeout)
        if seen.stale or (other_namespaces and seen.liveness_unknown):
            raise
        return CleanResult(removed=(), unparsable=seen.unparsable)
    _log_unparsable(result.unparsable, path)
    if result.removed:
        _log.info(
            "Removed %d stale line(s) from %s: %s",
            len(result.removed),
            os.fspath(path),
            ", ".join(f"GPU {e.index} of pid {e.pid}" for e in result.removed),
        )
    return result


def process_start_time(pid: int) -> "int | None":
    """The start time the file records for ``pid`` (None when it is gone or a zombie)."""
    return _native.coordination_process_start_time(pid)
