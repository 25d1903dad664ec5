"""The bindings file (docs/design.md §9.3): ``<coordination file>.bindings``, a file of the coordination
file's format with the fields ``tm`` (the process whose GPUs are bound), ``share`` (the binder's
``holders_per_gpu``), ``mem`` (its memory request, bytes per GPU) and ``slot`` (a slot holder's id). The
C++ core (csrc/coordination/bindings.cpp) writes it under its lock; this module names it, reads it and
removes a holder's lines. Binding GPUs is :func:`flink_gpu.binding.bind`, which decides in one call with
:func:`flink_gpu.policy.bind`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from flink_gpu import _native
from flink_gpu.coordination import DEFAULT_PATH, DEFAULT_TIMEOUT, CoordinationEntry, UnparsableLine

__all__ = [
    "BINDINGS_SUFFIX",
    "MAX_GPU_COUNT",
    "MAX_HOLDERS_PER_GPU",
    "MAX_MEMORY_REQUEST",
    "BindingEntry",
    "BindingSnapshot",
    "bindings_path",
    "checked_memory_request",
    "checked_share",
    "file_identity",
    "memory_request",
    "orphan_text",
    "snapshot",
    "unbind",
]

#: The most holders a binding lets share one GPU and the largest memory request (bytes) a bindings line
#: records (csrc/coordination/lines.hpp); the most GPUs the core counts (more than any host has).
MAX_HOLDERS_PER_GPU: int = _native.MAX_HOLDERS_PER_GPU
MAX_MEMORY_REQUEST: int = _native.MAX_MEMORY_REQUEST
MAX_GPU_COUNT: int = _native.MAX_GPU_COUNT
#: The core's rules for those bounds, with its one sentence each (csrc/coordination/lines.hpp).
checked_share = _native.checked_share
checked_memory_request = _native.checked_memory_request

#: What a coordination file's path takes to name its bindings file.
BINDINGS_SUFFIX: str = _native.BINDINGS_SUFFIX  # csrc/coordination/file.hpp: the file set's one home

#: One line of the bindings file: the coordination file's entry record, with its ``taskmanager``,
#: ``holders_per_gpu``, ``memory`` and ``slot`` (docs/design.md §9.3).
BindingEntry = CoordinationEntry


def bindings_path(coordination_file: "str | os.PathLike[str] | None" = None) -> str:
    """The bindings file of ``coordination_file`` (default: the default coordination file)."""
    return os.fspath(DEFAULT_PATH if coordination_file is None else coordination_file) + BINDINGS_SUFFIX


def file_identity(path: str) -> "str | None":
    """``path``'s file as the core names it (LockedFile::identity(): "<major>:<minor>:<inode>"); None when
    there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"


def memory_request(entries: "Iterable[BindingEntry]") -> "int | None":
    """The memory request (bytes per GPU) of one holder's lines, as the core counts it
    (csrc/coordination/bindings.cpp): its largest line's; None when no line of it has one."""
    requests = [entry.memory for entry in entries if entry.memory is not None]
    return max(requests) if requests else None


def orphan_text(pid: int, taskmanager: "int | None", gpus: "Iterable[str]", memory: "int | None") -> str:
    """An orphaned worker (BindingSnapshot.orphans) as ``list`` and doctor name it, in the core's words, which
    a shortage uses too: "pid P, a worker of TaskManager T which is gone, still runs on GPU n", and the request
    its binding no longer counts."""
    from flink_gpu.flink.grammars import format_memory_size

    text = _native.binding_orphan_text(pid, taskmanager or 0, ", ".join(gpus))
    return text + (f" (its request of {format_memory_size(memory)} no longer counts)" if memory else "")


def unbind(
    path: str, timeout: float, pid: int, slot: "str | None", taskmanager: "int | None", start_time: int = 0
) -> "list[str]":
    """Removes the lines the holder (process ``pid``, or thread ``pid`` of slot ``slot``) wrote in ``path``
    (only those of the process or thread started at ``start_time``, when given); the indices they bound.
    TimeoutError when the file's lock is not had within ``timeout`` seconds: nothing is removed."""
    return _native.binding_unbind(path, timeout, pid, slot, taskmanager, start_time)


@dataclass(frozen=True)
class BindingSnapshot:
    path: str
    exists: bool
    entries: "tuple[BindingEntry, ...]"
    unparsable: "tuple[UnparsableLine, ...]"

    def by_taskmanager(self) -> "dict[tuple[int | None, int | None], dict[str, tuple[str, ...]]]":
        """(TaskManager pid or None when not recorded, its pid namespace or None for ours) -> live holder
        (``"pid <n>"``, ``"slot <id>"``) -> its GPUs, in index order. Two containers' pid 1 are two
        TaskManagers; the holders of one are of its namespace."""
        from flink_gpu.base.gpu_index import sort_indices

        out: "dict[tuple[int | None, int | None], dict[str, set[str]]]" = {}
        for entry in self.entries:
            if entry.alive:
                where = (entry.taskmanager, None if entry.ours else entry.namespace)
                out.setdefault(where, {}).setdefault(entry.holder, set()).add(entry.index)
        return {
            tm: {holder: tuple(sort_indices(indices)) for holder, indices in holders.items()}
            for tm, holders in out.items()
        }

    def orphans(self) -> "dict[int, tuple[BindingEntry, ...]]":
        """Orphaned workers, pid -> its lines: processes of this pid namespace that still run though the
        TaskManager their lines record is gone (state "taskmanager gone"). Their bindings count for nothing,
        but what they allocated is not free; only ending them frees it."""
        out: "dict[int, list[BindingEntry]]" = {}
        for entry in self.entries:
            if entry.state == "taskmanager gone" and entry.slot is None:
                out.setdefault(entry.pid, []).append(entry)
        return {pid: tuple(entries) for pid, entries in out.items()}

    def unjudged_workers(self) -> "tuple[BindingEntry, ...]":
        """Live lines of process holders of other pid namespaces bound for a TaskManager other than themselves
        (a container's workers): whether that TaskManager still runs cannot be told from this pid namespace,
        so an orphan among them keeps its GPU here while it holds its lease."""
        return tuple(
            entry
            for entry in self.entries
            if entry.alive
            and not entry.ours
            and entry.slot is None
            and entry.taskmanager is not None
            and entry.taskmanager != entry.pid
        )


def snapshot(path: "str | os.PathLike[str] | None" = None, *, timeout: float = DEFAULT_TIMEOUT) -> BindingSnapshot:
    """Reads the bindings file (default :func:`bindings_path`) under a shared lock; a missing file is an
    empty snapshot with ``exists=False``."""
    path = bindings_path() if path is None else os.fspath(path)
    read = _native.coordination_snapshot(path, timeout)
    return BindingSnapshot(path, read.exists, read.entries, read.unparsable)
