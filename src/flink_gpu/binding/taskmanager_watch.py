"""A binding made for a TaskManager other than the binding process ends with it (docs/design.md §9.3).

One daemon thread per process waits on a pidfd of each such TaskManager, started with the first of them, and
releases the bindings made for one when it dies (a WARN says so): no other process counts them any longer
(docs/design.md §9.4), and their lines go.
"""

from __future__ import annotations

import logging
import os
import select
import threading

from flink_gpu.bindings_file import unbind
from flink_gpu.coordination import process_start_time
from flink_gpu.gpu import holders
from flink_gpu.gpu.holders import Held

__all__ = ["unwatch", "watch"]

_log = logging.getLogger("flink_gpu.binding")


class Watch:
    """A TaskManager that bindings of this process were made for: a pidfd that polls readable once it has
    exited (None where pidfd_open is not to be had, a seccomp filter or an old kernel: then its start time is
    read once a second), and the holders bound for it. Only the watch thread closes its pidfd."""

    __slots__ = ("pid", "start_time", "pidfd", "gone", "held")

    def __init__(self, pid: int, start_time: "int | None") -> None:
        self.pid = pid
        self.start_time = start_time
        self.pidfd: "int | None" = None
        self.gone = False
        self.held: "set[Held]" = set()
        try:
            self.pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.gone = True
        except OSError:
            pass
        # the pid read when bind checked it: another process's since, when it died in between
        self.gone = self.gone or self.ended()

    @property
    def key(self) -> "tuple[int, int | None]":
        return self.pid, self.start_time

    def ended(self) -> bool:
        """Whether the TaskManager is gone, by its start time."""
        return process_start_time(self.pid) != self.start_time

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


# (pid, start time) of a TaskManager -> its watch, for the bindings of this process made for a TaskManager
# other than itself (two processes that had one pid are two TaskManagers)
_watches: "dict[tuple[int, int | None], Watch]" = {}
# the watch thread's wake-up pipe (read end, write end), from the first watch on
_wake: "list[int]" = []
#: How often a TaskManager without a pidfd is looked at (s).
_UNWATCHED_INTERVAL = 1.0


def watch(held: Held, taskmanager: int, start_time: "int | None") -> None:
    """Ends ``held`` when ``taskmanager`` (whose start time bind read) dies, under holders.lock."""
    watch = _watches.get((taskmanager, start_time))
    if watch is None:
        watch = _watches[taskmanager, start_time] = Watch(taskmanager, start_time)
    watch.held.add(held)
    held.taskmanagers.add(watch.key)
    if not _wake:
        _wake.extend(os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK))
        threading.Thread(
            target=_watch_taskmanagers, args=(_wake[0],), name="flink-gpu TaskManager watch", daemon=True
        ).start()
    else:
        _wake_watch()


def unwatch(held: Held) -> None:
    """``held`` no longer waits for its TaskManagers (released), under holders.lock. The watch thread closes the pidfds
    that no binding waits on."""
    for key in held.taskmanagers:
        watch = _watches.get(key)
        if watch is not None:
            watch.held.discard(held)
    if held.taskmanagers:
        _wake_watch()
    held.taskmanagers.clear()


def _wake_watch() -> None:
    try:
        os.write(_wake[1], b"w")
    except BlockingIOError:  # a full pipe wakes it all the same
        pass


def _watch_taskmanagers(wake: int) -> None:
    """The watch thread: waits (holding no lock) for a watched TaskManager to exit, or for the watches to
    change, and ends the bindings made for a TaskManager that is gone."""
    while True:
        with holders.lock:
            for key, watch in list(_watches.items()):
                if not watch.held:  # every binding made for it was released
                    del _watches[key]
                    watch.close()
            watches = [watch for watch in _watches.values() if not watch.gone]
            gone = [watch for watch in _watches.values() if watch.gone]
        if not gone:
            poller = select.poll()
            poller.register(wake, select.POLLIN)
            for watch in watches:
                if watch.pidfd is not None:
                    poller.register(watch.pidfd, select.POLLIN)
            timed = any(watch.pidfd is None for watch in watches)
            ready = {fd for fd, _ in poller.poll(_UNWATCHED_INTERVAL * 1000 if timed else None)}
            if wake in ready:
                try:
                    while os.read(wake, 64):
                        pass
                except BlockingIOError:
                    pass
            gone = [w for w in watches if w.pidfd in ready or (w.pidfd is None and w.ended())]
        for watch in gone:
            _taskmanager_gone(watch)


def _taskmanager_gone(watch: Watch) -> None:
    """Releases the bindings made for the TaskManager of ``watch``, which is gone, and says so."""
    ended: "list[tuple[Held, Exception | None]]" = []  # with why its lines stay, if they do
    # the registry and the file change together, as in release()
    with holders.lock:
        if _watches.get(watch.key) is watch:
            del _watches[watch.key]
        watch.close()
        for held in list(watch.held):
            if held.ended or held.registry.get(held.key) is not held:
                continue  # released meanwhile
            held.ended = True
            del held.registry[held.key]
            unwatch(held)
            pid, slot, taskmanager, start_time = held.native
            try:
                unbind(held.path, held.timeout, pid, slot, taskmanager, start_time)
                ended.append((held, None))
            except (OSError, TimeoutError) as failure:
                ended.append((held, failure))
        watch.held.clear()
    from flink_gpu.base.gpu_index import sort_indices

    for held, why in ended:
        gpus = ", ".join(sort_indices(held.indices))
        pid, slot, _, _ = held.native
        holder = f"pid {pid}" if slot is None else f"slot {slot} (thread {pid})"
        if why is None:
            _log.warning(
                "TaskManager pid %d is gone: the binding of GPU(s) %s to %s in %s was released.",
                watch.pid,
                gpus,
                holder,
                held.path,
            )
        else:
            _log.warning(
                "TaskManager pid %d is gone: the binding of GPU(s) %s to %s in %s no longer counts for any bind, "
                "but its lines could not be removed (%s); they go with this process.",
                watch.pid,
                gpus,
                holder,
                held.path,
                why,
            )


def _forget_the_parents() -> None:
    """In a forked child: the parent's watch is the parent's: its thread did not come along, and what it
    watched for is the parent's to release."""
    for watch in _watches.values():
        watch.close()
    _watches.clear()
    for fd in _wake:
        os.close(fd)
    _wake.clear()


holders.after_fork_in_child.append(_forget_the_parents)
