"""A process forked from a process holder shares its parent's binding (docs/design.md §9.3).

A child forked from a process holder (a PyTorch DataLoader worker) shares its parent's binding in the files
the parent bound in, for as long as the parent binds there, and binds nothing new there; what it shares is
read from the file when it asks (gpu/holders.py keeps which files the parent held a binding in at the fork).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from flink_gpu.base.gpu_index import sort_indices
from flink_gpu.bindings_file import file_identity, snapshot
from flink_gpu.errors import NotEnoughGpusError
from flink_gpu.flink.grammars import format_memory_size
from flink_gpu.gpu import holders

__all__ = ["Inherited", "inherited"]


class Inherited(NamedTuple):
    """What a forked child shares of its parent's binding in one file."""

    indices: "list[str]"  # the GPUs it asked for, of the parent's
    parent: int  # the parent's pid
    memory: "int | None"  # the parent's memory request per GPU (bytes)
    holders_per_gpu: int  # as the parent bound them


def inherited(given: "set[str]", count: int, path: str, timeout: float, memory: "int | None") -> "Inherited | None":
    """``count`` of ``given`` of the binding that the process holder this process was forked from has in
    ``path`` now (read from the file), nothing new bound; None when this process is a holder of its own
    there: the parent bound nothing there at the fork, or its binding there has ended since (it released
    it, or it died), which ends the inheritance in that file for good. Its memory request is the parent's:
    ``memory`` must be that one (or None)."""
    if holders.forked_from is None:
        return None
    file = file_identity(path)
    if file is None or file not in holders.forked_files:
        return None
    parent, namespace = holders.forked_from
    start_time = holders.forked_files[file] or None
    # the parent's lines: its pid in its namespace (a child forked into a new pid namespace is not of it,
    # and an equal pid of another namespace is another process) with its start time (another process
    # may have its pid once it died)
    lines = [
        entry
        for entry in snapshot(path, timeout=timeout).entries
        if entry.alive
        and entry.slot is None
        and entry.pid == parent
        and entry.start_time == start_time
        and (entry.ours if namespace is None or entry.namespace is None else entry.namespace == namespace)
    ]
    parents = {entry.index for entry in lines}
    if not parents:
        with holders.lock:
            holders.forked_files = {other: at for other, at in holders.forked_files.items() if other != file}
        return None
    indices = sort_indices(parents & given)
    if count > len(indices):
        now = (
            f"binds GPU(s) {', '.join(indices)} of these in {path}"
            if indices
            else f"binds none of these in {path} (it binds GPU(s) {', '.join(sort_indices(parents))})"
        )
        raise NotEnoughGpusError(
            f"This process (pid {os.getpid()}) was forked from pid {parent}, which {now}; a forked child shares "
            f"its parent's binding and binds nothing new while its parent binds there, so it cannot have {count}. "
            "Bind them in the parent."
        )
    chosen = indices[:count]
    requested = max((entry.memory or 0 for entry in lines if entry.index in chosen), default=0) or None
    share = max((entry.holders_per_gpu or 1 for entry in lines if entry.index in chosen), default=1)
    if memory is not None and memory != requested:
        raise ValueError(
            f"This process (pid {os.getpid()}) was forked from pid {parent}, whose binding in {path} has a memory "
            f"request of {_memory_text(requested)}, not {_memory_text(memory)}: a forked child shares its "
            "parent's binding, request included. Ask with the parent's request, or bind in the parent."
        )
    return Inherited(chosen, parent, requested, share)


def _memory_text(memory: "int | None") -> str:
    return "none" if memory is None else format_memory_size(memory)
