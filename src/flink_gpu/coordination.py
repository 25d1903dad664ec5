"""GPU coordination between the workers of one host (docs/design.md §5.2).

Several workers (Flink TaskManagers running the stock ``nvidia-gpu-discovery.sh`` in coordination mode,
``flink-gpu-discovery``, Python processes using this module) share one file, by default
``/var/tmp/flink-gpu-coordination``, with one ``<index> <pid>[ <start time>]`` line per claimed GPU,
locked with ``flock(2)``. The work is done by the C++ core (csrc/coordination.cpp); this module resolves
the owner, converts the results and logs what the core reports.

The owner is the calling process unless given, resolved per call from :func:`os.getpid`, so a forked
child never takes its parent's claims for its own. GPUs stay claimed until released or until their
owner dies; a dead owner's GPUs are reclaimed by the next claim that needs them.

Every function is thread-safe: each call opens its own file description, and ``flock(2)`` excludes
between file descriptions even inside one process. The GIL is released while waiting for the lock.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Union

from flink_gpu import _native

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_TIMEOUT",
    "ClaimResult",
    "CleanResult",
    "CoordinationEntry",
    "CoordinationSnapshot",
    "UnparsableLine",
    "claim",
    "claimed",
    "clean_stale",
    "process_start_time",
    "release",
    "snapshot",
]

_log = logging.getLogger("flink_gpu.coordination")

PathType = Union[str, "os.PathLike[str]"]

#: The stock script's file, shared with Flink TaskManagers of the same host.
DEFAULT_PATH: str = _native.COORDINATION_DEFAULT_PATH
#: Seconds to wait for the lock; shorter than Flink's 10 s discovery-script timeout, so that our error
#: (which names the file and the holder) arrives before Flink kills the discovery.
DEFAULT_TIMEOUT: float = 5.0


@dataclass(frozen=True)
class CoordinationEntry:
    """One line ``<index> <pid>[ <start time>]`` of the file."""

    index: str
    pid: int
    start_time: "int | None"  # clock ticks since boot (/proc/<pid>/stat field 22); None in stock lines
    alive: bool  # the pid exists, is no zombie and, where known, has this start time
    line_number: int


@dataclass(frozen=True)
class UnparsableLine:
    """A line that is neither an entry nor blank: kept as is; the index it names is never reclaimed."""

    line_number: int
    text: str


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

    def holders(self) -> "dict[str, tuple[int, ...]]":
        """Index -> pids of its live owners (more than one only after a stock script's race)."""
        out: "dict[str, dict[int, None]]" = {}
        for e in self.entries:
            if e.alive:
                out.setdefault(e.index, {})[e.pid] = None  # a pid listed twice is still one owner
        return {index: tuple(pids) for index, pids in out.items()}


@dataclass(frozen=True)
class ClaimResult:
    """What one :func:`claim` did for ``owner``."""

    taken: "list[str]"  # the GPUs the owner gets, lowest index first
    added: "list[str]"  # those of ``taken`` this claim wrote for the owner (it did not hold them before)
    reclaimed: "list[str]"  # those of ``added`` that were taken from dead owners
    owner: int


@dataclass(frozen=True)
class CleanResult:
    removed: "tuple[CoordinationEntry, ...]"
    unparsable: "tuple[UnparsableLine, ...]"


def _owner(owner: "int | None") -> int:
    return os.getpid() if owner is None else owner


def _amount(amount: int) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"amount must be an int, got {amount!r}")
    if amount < 0:
        raise ValueError(f"The amount of GPUs to claim must not be negative, got {amount}.")
    return amount


def _entries(rows) -> "tuple[CoordinationEntry, ...]":
    return tuple(CoordinationEntry(index=index, pid=pid, start_time=start, alive=alive, line_number=number)
                 for number, index, pid, start, alive in rows)


def _bad_lines(rows, path: PathType) -> "tuple[UnparsableLine, ...]":
    lines = tuple(UnparsableLine(number, text) for number, text in rows)
    for line in lines:
        _log.warning("Line %d of the coordination file %s cannot be parsed and is left as it is "
                     "(its GPU is never reclaimed): %r", line.line_number, os.fspath(path), line.text)
    return lines


def claim(amount: int, indices: "Iterable[str | int]", *, path: PathType = DEFAULT_PATH,
          owner: "int | None" = None, timeout: float = DEFAULT_TIMEOUT,
          ranks: "Iterable[int] | None" = None) -> ClaimResult:
    """Claims ``amount`` of the GPUs ``indices`` (the host's, e.g. from NVML) for ``owner``.

    ``owner`` defaults to the calling process (``os.getpid()`` at call time). An owner asking again
    gets what it holds: topped up when it asks for more; when it asks for fewer, the lowest ``amount``
    of its GPUs (it keeps holding all of them until :func:`release`). Otherwise free GPUs first, then
    those of dead owners, lowest index first. All or nothing. The result's ``taken`` is what the
    owner gets. ``ranks`` (one int per index, e.g. :func:`flink_gpu.nvml.rank_gpus`' ranks): after
    what the owner holds, lower ranks first, and within a rank free GPUs before reclaimable ones.

    Raises :class:`~flink_gpu.FlinkException` when too few GPUs are free (the message says how many
    were requested, how many exist and which pids hold the rest), :class:`TimeoutError` (naming the
    file and the lock holder) when the lock is not obtained within ``timeout`` seconds, an
    :class:`OSError` naming the path when the file cannot be used (a symlink, not a regular file, no
    permission), and :class:`ValueError` for a bad index, amount or owner.
    """
    owner = _owner(owner)
    taken, added, reclaimed, bad = _native.coordination_claim(path, timeout, owner, indices,
                                                              _amount(amount),
                                                              None if ranks is None else list(ranks))
    _bad_lines(bad, path)
    if reclaimed:
        _log.info("Reclaimed GPU(s) %s of dead owners in %s for pid %d.", ", ".join(reclaimed),
                  os.fspath(path), owner)
    return ClaimResult(taken=taken, added=added, reclaimed=reclaimed, owner=owner)


def release(owner: "int | None" = None, *, path: PathType = DEFAULT_PATH,
            indices: "Iterable[str | int] | None" = None, timeout: float = DEFAULT_TIMEOUT) -> "list[str]":
    """Releases the GPUs of ``owner`` (default: the calling process), all or only ``indices``.

    Returns the released indices. A missing file holds nothing and is not created.
    """
    return _native.coordination_release(path, timeout, _owner(owner), None if indices is None else list(indices))


@contextmanager
def claimed(amount: int, indices: "Iterable[str | int]", *, path: PathType = DEFAULT_PATH,
            owner: "int | None" = None, timeout: float = DEFAULT_TIMEOUT) -> "Iterator[ClaimResult]":
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


def snapshot(path: PathType = DEFAULT_PATH, *, timeout: float = DEFAULT_TIMEOUT) -> CoordinationSnapshot:
    """Reads the file (under a shared lock) for tools: entries with liveness, unparsable lines.

    A missing file gives an empty snapshot with ``exists=False``; nothing is created.
    """
    exists, rows, bad = _native.coordination_snapshot(path, timeout)
    return CoordinationSnapshot(path=os.fspath(path), exists=exists, entries=_entries(rows),
                                unparsable=tuple(UnparsableLine(n, t) for n, t in bad))


def clean_stale(path: PathType = DEFAULT_PATH, *, timeout: float = DEFAULT_TIMEOUT) -> CleanResult:
    """Removes the lines of dead owners; unparsable lines stay. Never creates the file."""
    removed, bad = _native.coordination_clean_stale(path, timeout)
    result = CleanResult(removed=_entries(removed), unparsable=_bad_lines(bad, path))
    if result.removed:
        _log.info("Removed %d stale line(s) from %s: %s", len(result.removed), os.fspath(path),
                  ", ".join(f"GPU {e.index} of pid {e.pid}" for e in result.removed))
    return result


def process_start_time(pid: int) -> "int | None":
    """The start time the file records for ``pid`` (None when it is gone or a zombie)."""
    return _native.coordination_process_start_time(pid)
