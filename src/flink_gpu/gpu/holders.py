"""What this process holds, in one registry beneath the driver and ``bind`` (docs/design.md §9.3).

The coordination file and the bindings file know a holder by its pid (a slot's thread by its thread id): two
drivers of one process, or two ``bind`` calls for one holder, are one holder to them. This registry keeps what
the process's own drivers and bindings hold, so that the file changes only with the first acquisition and
the last release:

* ``driver_holds``: (coordination file, pid, index) -> how many open drivers of process pid use a GPU that
  one of them added to the file; a driver's ``close()`` releases a GPU when the last one that uses it closes;
* ``process_holders``: a process holder's binding, by (the bindings file's identity, pid);
* ``thread_holders()``: a slot's bindings made by the calling thread, by (file, slot, TaskManager), so that a
  thread which later gets an ended thread's id inherits nothing from it.

``driver_lock`` guards ``driver_holds`` and ``lock`` the bindings: each is held across its file's change (up to
the file's lock timeout, and the NVML reads before it), so the registry and the file change together; two
locks, so that a slot's bind never waits for a driver's claim on the coordination file, nor a driver for a
bind. A forked child gets new locks (another thread may have held one at the fork), forgets the parent's
holders, and remembers which files the parent held a binding in (``forked_from``, ``forked_files``): the
child shares that binding while the parent holds it.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    #: A binding's holder as the registry keys it: (file identity, pid) for a process holder,
    #: (file identity, slot, taskmanager pid) for a slot's thread.
    HolderKey = tuple[str, int] | tuple[str, str, int | None]

__all__ = [
    "Held",
    "after_fork_in_child",
    "driver_holds",
    "driver_lock",
    "forked_files",
    "forked_from",
    "lock",
    "process_holders",
    "thread_holders",
]


class Held:
    """One holder's binding in this process: how many handles are out, what it binds, the start time its
    lines carry (0: none), and where it is registered (a handle releases through it from any thread); for the
    TaskManager watch, the holder as the core names it (pid or thread id, slot, TaskManager, start time), its
    file and the TaskManagers it was bound for, and whether their death ended it (its handles then release
    nothing)."""

    __slots__ = (
        "refs",
        "indices",
        "start_time",
        "registry",
        "key",
        "native",
        "path",
        "timeout",
        "taskmanagers",
        "ended",
    )

    def __init__(self, registry: "dict[HolderKey, Held]", key: "HolderKey", timeout: float) -> None:
        self.refs = 0
        self.indices: "set[str]" = set()
        self.start_time = 0
        self.registry = registry
        self.key = key
        self.native: "tuple[int, str | None, int | None, int]" = (0, None, None, 0)
        self.path = ""
        self.timeout = timeout
        self.taskmanagers: "set[tuple[int, int | None]]" = set()  # the TaskManager watches' keys
        self.ended = False


lock = threading.Lock()
driver_lock = threading.Lock()
driver_holds: "dict[tuple[str, int, str], int]" = {}
process_holders: "dict[HolderKey, Held]" = {}
_threads = threading.local()
# The process holder this process was forked from: its pid and pid namespace (the inode of its
# /proc/self/ns/pid; None when unknown), and the identities of the files it bound in at the fork, each with
# the start time its lines there carry (0: none), which tells its lines from those of a process that
# reuses its pid once it died.
forked_from: "tuple[int, int | None] | None" = None
forked_files: "dict[str, int]" = {}
#: What else a forked child drops of its parent's (the TaskManager watch), run after the registry's own.
after_fork_in_child: "list[Callable[[], None]]" = []


def thread_holders() -> "dict[HolderKey, Held]":
    """The calling thread's slot bindings."""
    held: "dict[HolderKey, Held]" = _threads.__dict__.setdefault("held", {})
    return held


# the pid and pid namespace of the process that forks, read before the fork: in the child getppid() may
# already name a reaper (the parent died) or be 0, and its namespace differ (a child that is pid 1 of a
# new pid namespace)
_forking: "list[tuple[int, int | None]]" = [(0, None)]


def _pid_namespace() -> "int | None":
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _before_fork() -> None:
    _forking[0] = (os.getpid(), _pid_namespace() if process_holders else None)  # a stat only for a holder


def _in_child() -> None:
    global lock, driver_lock, forked_from, forked_files
    lock, driver_lock = threading.Lock(), threading.Lock()
    parent = _forking[0]
    # process_holders' keys are (file, pid)
    files = {key[0]: held.start_time for key, held in process_holders.items() if key[1] == parent[0] and held.refs}
    if files:
        forked_from, forked_files = parent, files
    process_holders.clear()
    _threads.__dict__.clear()  # the forking thread's slots are its parent's thread's
    for forget in after_fork_in_child:
        forget()


os.register_at_fork(before=_before_fork, after_in_child=_in_child)
