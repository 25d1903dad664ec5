"""Binding GPUs to the holders inside one TaskManager or service (docs/design.md §9.3).

Flink gives every slot of a TaskManager the same GPUs. A binding gives one holder — a PyFlink worker
process, a slot whose subtasks run as threads of the TaskManager JVM, a service's worker process — its
own GPUs out of the set its TaskManager (or parent) claimed, or shares each GPU among at most
``holders_per_gpu`` holders::

    from flink_gpu.binding import bind

    with bind(parent_gpus, count=1) as binding:      # in each worker process
        os.environ["CUDA_VISIBLE_DEVICES"] = binding.cuda_visible_devices
        ...

PyFlink operators call :func:`flink_gpu.pyflink.bind_gpus` instead, which finds the TaskManager's GPUs and
the holder for them.

Bindings live in ``<coordination file>.bindings`` (:mod:`flink_gpu.bindings_file`, whose names this module
gives too); one call into the core (:func:`flink_gpu.policy.bind`) judges the GPUs and binds them under the
file's lock. This module keeps the process's handles. Holders:

* a process (``slot`` None): the calling process, which holds a lease on ``<bindings file>.lease`` while it
  holds bindings, so its death frees them, in any pid namespace;
* a slot (``slot`` given): every thread that binds for it writes its own lines (its thread id and start
  time): the slot keeps its GPUs while any of those threads lives. The lines carry the process's lease
  too, so other pid namespaces, which cannot see the threads, see them end with the process.

In one process, binding again for the same holder returns the same binding (topped up when more are
asked); each :class:`GPUBinding` handle is released once, and the holder's lines go with its last handle.
A child forked from a process holder (a DataLoader worker) shares its parent's binding in the files the
parent bound in and binds nothing new there while the parent binds there; releasing in the child does
nothing. Once the parent's binding in a file has ended (released, or the parent died), and in any other file,
the child is a holder of its own.

A binding made for a TaskManager other than the process itself (``taskmanager_pid``: a process-mode worker's)
ends with it: one daemon thread per process waits on a pidfd of each such TaskManager, started with the first
of them, and releases the bindings made for one when it dies (a WARN says so): no other process counts them any
longer (docs/design.md §9.4), and their lines go.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable

from flink_gpu import policy
from flink_gpu.binding import inheritance, memory
from flink_gpu.binding.gauges import EMBEDDED_METRICS, GAUGES, MEMORY_LIMIT_GAUGE, PUSH_INTERVAL, Constant, Gauge
from flink_gpu.binding.taskmanager_watch import unwatch, watch
from flink_gpu.bindings_file import (
    MAX_GPU_COUNT,
    bindings_path,
    checked_memory_request,
    checked_share,
    unbind,
)
from flink_gpu.coordination import DEFAULT_TIMEOUT, checked_pid, log_notices, process_start_time, whole_amount
from flink_gpu.errors import NotEnoughGpusError
from flink_gpu.gpu import holders
from flink_gpu.gpu.holders import Held

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11

    from flink_gpu.flink.resource_info import ExternalResourceInfo
    from flink_gpu.gpu.holders import HolderKey
    from flink_gpu.nvml import Library
    from flink_gpu.policy import BindOutcome

    #: A holder as the core's binding_unbind names it: (pid or thread id, slot, taskmanager, start time).
    _NativeHolder = tuple[int, str | None, int | None, int]

__all__ = ["GPUBinding", "bind", "checked_counts", "checked_memory"]

_log = logging.getLogger("flink_gpu.binding")


class GPUBinding:
    """GPUs bound to one holder: ``infos``, ``indices``, ``cuda_visible_devices``, ``devices``, and with a
    memory request ``memory_limit`` (:meth:`memory_environment`, :meth:`apply_memory_limit`).

    A context manager; :meth:`release` (idempotent) gives them back. Obtained from :func:`bind` or
    :func:`flink_gpu.pyflink.bind_gpus`.
    """

    __slots__ = (
        "_infos",
        "_indices",
        "_path",
        "_held",
        "_holder",
        "_library_path",
        "_pid",
        "_released",
        "_devices",
        "_timeout",
        "_native_holder",
        "_pushed",
        "_pushed_at",
        "_pushed_sampled",
        "_registered_samples",
        "_metrics_interval",
        "_memory_limit",
        "_memory_total",
        "_holders_per_gpu",
    )

    def __init__(
        self,
        infos: "Iterable[ExternalResourceInfo]",
        indices: "Iterable[str]",
        path: str,
        held: "Held | None",
        native_holder: "_NativeHolder",
        holder: str,
        library_path: "str | None",
        timeout: float,
        metrics_interval: float,
        memory_limit: "int | None" = None,
        memory_total: "dict[str, int] | None" = None,
        holders_per_gpu: int = 1,
    ) -> None:
        self._infos = frozenset(infos)
        self._indices = tuple(indices)
        self._path = path
        self._held = held  # None: inherited through fork, nothing to release
        self._holder = holder
        self._library_path = library_path
        self._pid = os.getpid()
        self._released = False
        self._devices: "tuple[int, ...] | None" = None
        self._timeout = timeout
        self._native_holder = native_holder  # (pid or thread id, slot, taskmanager, start time) for the core
        self._pushed: "list[tuple[Any, Gauge | Constant]]" = []  # thread mode: (Java-held value, its reading)
        self._pushed_at = 0.0
        self._pushed_sampled = False  # the last push showed this binding's GPUs sampled
        self._registered_samples = 0  # the process's completed samples when the gauges were registered
        self._metrics_interval = metrics_interval
        self._memory_limit = memory_limit
        self._memory_total = dict(memory_total or {})  # index -> bytes, as the bind read them
        self._holders_per_gpu = holders_per_gpu

    @property
    def infos(self) -> "frozenset[ExternalResourceInfo]":
        """The bound GPUs (frozenset of GPUInfo): a subset of the infos they were bound from."""
        return self._infos

    @property
    def indices(self) -> "tuple[str, ...]":
        """The bound GPUs' indices, in index order."""
        return self._indices

    @property
    def holder(self) -> str:
        """Who holds them: ``"pid <n>"``, or ``"slot <id> (thread <tid>)"``."""
        return self._holder

    @property
    def path(self) -> str:
        """The bindings file."""
        return self._path

    @property
    def cuda_visible_devices(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value exposing exactly these GPUs (for a worker process)."""
        from flink_gpu.gpu.info import cuda_visible_devices

        return cuda_visible_devices(self._infos)

    @property
    def devices(self) -> "tuple[int, ...]":
        """The CUDA ordinals of these GPUs in this process (its ``CUDA_VISIBLE_DEVICES`` and
        ``CUDA_DEVICE_ORDER``), in index order: ``torch.device(f"cuda:{binding.devices[0]}")`` in a
        thread-mode operator, where ``CUDA_VISIBLE_DEVICES`` is process-wide."""
        if self._devices is None:
            from flink_gpu.binding.cuda_ordinals import cuda_ordinals

            devices = skipped = None
            if self._library_path:
                from flink_gpu.nvml import open_library

                enumeration = open_library(self._library_path).devices()
                devices, skipped = enumeration.devices, enumeration.skipped
            self._devices = cuda_ordinals(self._infos, devices, skipped=skipped)
        return self._devices

    @property
    def memory_limit(self) -> "int | None":
        """The memory this binding requested on each of its GPUs (bytes), as the bindings file records it;
        None without a request. Nothing enforces it by itself (docs/design.md §9.3, Memory): hand it to the
        framework with :meth:`apply_memory_limit` after import, or to CUDA's MPS and JAX with
        :meth:`memory_environment` before CUDA starts."""
        return self._memory_limit

    def _totals(self) -> "list[tuple[str, int]]":
        return memory.totals(self._indices, self._infos, self._memory_total, self._library_path)

    def memory_environment(self, mps: "bool | None" = None) -> "dict[str, str]":
        """The environment that limits a process to :attr:`memory_limit` on each bound GPU, for a worker
        process to start with (before CUDA, JAX or CuPy start in it; with ``CUDA_VISIBLE_DEVICES`` =
        :attr:`cuda_visible_devices`): ``XLA_CLIENT_MEM_FRACTION`` and its older name
        ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (JAX's share of each GPU: the smallest over the bound GPUs) and
        ``CUPY_GPU_MEMORY_LIMIT`` (bytes); with ``mps`` (None: when an MPS control daemon's pipe is there,
        ``$CUDA_MPS_PIPE_DIRECTORY`` or /tmp/nvidia-mps) also ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, which
        the MPS server enforces for every CUDA allocation of the client, and, when the GPUs are shared,
        ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (an equal share of the SMs). Empty without a memory request.
        Thread mode shares one process: setting these there limits every slot of the TaskManager together,
        not this one."""
        if self._memory_limit is None:
            return {}
        return memory.environment(self._memory_limit, self._totals(), self._holders_per_gpu, mps)

    def apply_memory_limit(self) -> "tuple[str, ...]":
        """Limits the frameworks this process has imported to :attr:`memory_limit` on each bound GPU, after
        import: PyTorch's caching allocator (``torch.cuda.set_per_process_memory_fraction``, per CUDA
        device of :attr:`devices`) and CuPy's default memory pool (``set_limit``); the names of those
        limited. An allocation beyond the limit then raises the framework's out-of-memory error in this
        subtask instead of starving another. Memory allocated outside those allocators (cuDNN's
        workspace, NCCL, CUDA's own context) is not counted: leave headroom, or use MPS
        (:meth:`memory_environment`), whose limit counts every allocation. In thread mode every slot of
        the TaskManager is one process, and these limits are the process's: a slot's binding sets the
        sum of the requests of the TaskManager's live slots on its GPU (each slot's call raises it as
        slots bind), which keeps the slots together within what they asked, not each within its own.
        Raises ValueError without a memory request, RuntimeError when neither PyTorch nor CuPy is
        imported."""
        if self._memory_limit is None:
            raise ValueError(f"{self!r} has no memory request to apply: bind with memory=... (bytes or '10 gb').")
        torch, cupy = memory.frameworks()
        limit = self._memory_limit
        ordinals = dict(zip(self._indices, self.devices, strict=True))
        limits = {
            index: memory.process_limit(self._path, self._timeout, self._native_holder, limit, index)
            for index in self._indices
        }
        return memory.apply(torch, cupy, limits, self._totals() if torch is not None else [], ordinals)

    def register_metrics(self, group: Any) -> None:
        """Registers integer gauges per bound GPU under ``group.add_group("gpu", <index>)``:
        ``utilization`` (%), ``memoryUsed`` (MiB), ``temperature`` (°C), ``power`` (W) and ``health``
        (0 ok, 1 degraded, 2 unhealthy or lost, 3 unknown), and with a memory request ``memoryLimit``
        (MiB, :attr:`memory_limit`). Every gauge of the process shows one shared
        snapshot, which the sampler (a reader thread per GPU) refreshes at most every ``metrics_interval``
        (the resource's ``metrics.interval``): a gauge never calls NVML and never raises. A GPU that is
        lost reads -1 with health 2; one whose read is late (it hangs in the driver) -1 with health 3
        while the others keep theirs, as before the first sample.

        ``group`` is the operator's ``ctx.get_metrics_group()`` (None, when PyFlink's metrics are off:
        nothing is registered) or any object with ``add_group(name, extra)`` and ``gauge(name, fn)``. On
        a process-mode worker's group the gauges are read when PyFlink reports a bundle. On a
        thread-mode group they are values held by Java, refreshed by :meth:`update_metrics` from the
        task's thread: PyFlink 2.3 would call a Python gauge from Flink's metric threads on the task's
        interpreter state, which the task frees before its metrics close, and that crashes the JVM.
        """
        if group is None:
            _log.info(
                "No GPU gauges for %s: the operator has no metric group (python.metric.enabled is false).",
                ", ".join(self._indices),
            )
            return
        from flink_gpu.nvml import metrics_samples, sample_metrics_now, watch_metrics

        self._registered_samples = metrics_samples()
        for index in self._indices:
            if not watch_metrics(index, self._library_path, self._metrics_interval):
                _log.warning(
                    "The GPU metrics sampler could not be started: the gauges of GPU %s show health 3 (unknown).", index
                )
        # the GPUs' first sample before any report reads them (else the first shows -1), bounded
        sample_metrics_now(timeout=1.0)
        embedded = type(group).__module__.startswith(EMBEDDED_METRICS)
        for index in self._indices:
            subgroup = group.add_group("gpu", index)
            readings: "list[tuple[str, Gauge | Constant]]" = [
                (name, Gauge(self._library_path, index, shown)) for name, shown in GAUGES.items()
            ]
            if self._memory_limit is not None:
                readings.append((MEMORY_LIMIT_GAUGE, Constant(self._memory_limit >> 20)))
            for name, reading in readings:
                if embedded:
                    self._pushed.append((subgroup.distribution(name), reading))
                else:
                    subgroup.gauge(name, reading)
        if embedded:
            self.update_metrics(force=True)
        else:  # said once per binding: a short job's gauges otherwise seem never to come
            _log.info(
                "GPU gauges for %s registered on a process-mode metric group: PyFlink ships their values "
                "when a bundle ends (python.fn-execution.bundle.size / python.fn-execution.bundle.time), so "
                "with a bundle that holds all of a job's records they show only at its end; make the bundle "
                "smaller to see them while it runs.",
                ", ".join(self._indices),
            )

    def update_metrics(self, force: bool = False) -> None:
        """Refreshes thread-mode gauges (see :meth:`register_metrics`): call it from the task's thread,
        e.g. in ``map()``; it pushes the sampler's snapshot at most once a second unless ``force``d, so
        calling it per record costs a clock read (and, until a sample of this binding's GPUs has
        completed, milliseconds after the registration, a snapshot read: the first values are pushed
        when they come, not a second later, also for a slot that binds after others of its process).
        It never reads NVML itself. Does nothing for gauges Flink or PyFlink read themselves."""
        if not self._pushed:
            return
        now = time.monotonic()
        from flink_gpu.nvml import metrics_samples

        if not force and now - self._pushed_at < PUSH_INTERVAL and self._pushed_sampled:
            return
        self._pushed_at = now
        # The first sample after the registration includes its GPUs unless one was already under way
        # then (the watch asks for another, the one after): until then what it pushes may predate them.
        samples = metrics_samples() - self._registered_samples
        unknown = False
        for value, reading in self._pushed:
            shown = reading()
            value.update(shown)
            unknown = unknown or reading.says_unknown(shown)
        self._pushed_sampled = samples >= 2 or (samples == 1 and not unknown)

    def release(self) -> None:
        """Gives the GPUs back (the holder's lines go with its last handle in this process). Idempotent;
        does nothing in a process forked from the binder. When it raises (the bindings file's lock was not
        had in time), nothing is released and it can be called again."""
        held = self._held
        if held is None or os.getpid() != self._pid:
            self._released = True
            return
        pid, slot, taskmanager, start_time = self._native_holder
        with holders.lock:
            if self._released:
                return
            if held.ended:  # its TaskManager died, and the watch released it
                self._released = True
                return
            if held.refs == 1:
                # the start time: a thread that got an ended binder's id keeps what it bound itself. A
                # failure (a lock timeout) changes nothing here, so release() can be called again.
                unbind(self._path, self._timeout, pid, slot, taskmanager, start_time)
                if held.registry.get(held.key) is held:
                    del held.registry[held.key]
                unwatch(held)
            held.refs -= 1
            self._released = True

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self._released else ""
        return f"GPUBinding(indices={list(self._indices)!r}, holder={self._holder!r}{state})"


def _by_index(gpus: "Iterable[ExternalResourceInfo]") -> "dict[str, ExternalResourceInfo]":
    by_index: "dict[str, ExternalResourceInfo]" = {}
    for info in gpus:
        index = info.get_property("index") if hasattr(info, "get_property") else None
        if not isinstance(index, str) or not index:
            raise TypeError(f"bind() takes GPUInfo objects (with an 'index' property), got {info!r}")
        by_index.setdefault(index, info)
    return by_index


def checked_counts(
    count: object, holders_per_gpu: object, *, holders_name: str = "holders_per_gpu"
) -> "tuple[int, int]":
    """``count`` and ``holders_per_gpu`` as ints, or the error naming the bad one (``holders_name``: what
    the caller calls the second: :func:`flink_gpu.pyflink.bind_gpus` says ``subtasks_per_gpu``)."""
    count = whole_amount(count, "count (the GPUs to bind)")
    if not 1 <= count <= MAX_GPU_COUNT:
        raise ValueError(f"count must be 1 to {MAX_GPU_COUNT} GPUs, got {count}.")
    holders = whole_amount(holders_per_gpu, f"{holders_name} (how many holders may share one GPU)")
    return count, checked_share(holders, holders_name)


def checked_memory(memory: object) -> "int | None":
    """``memory`` (bytes, or a Flink memory size: ``"10 gb"``, ``"512 mb"``) as bytes; None for None;
    ValueError/TypeError naming a bad one."""
    import operator

    if memory is None:
        return None
    accepted = "give a positive number of bytes or a Flink memory size such as '10 gb' or '512 mb'"
    if isinstance(memory, str):
        from flink_gpu.flink.grammars import parse_memory_size

        try:
            size = parse_memory_size(memory)
        except ValueError as error:
            raise ValueError(f"memory {error}") from None
    elif isinstance(memory, bool):
        raise TypeError(f"memory must be bytes (int) or a Flink memory size (str): {accepted}, not {memory!r}.")
    else:
        try:
            size = operator.index(memory)  # type: ignore[arg-type]  # an int, or a numpy integer
        except TypeError:
            raise TypeError(
                f"memory must be bytes (int) or a Flink memory size (str): {accepted}, not {memory!r}."
            ) from None
    if size <= 0:
        raise ValueError(f"memory must be more than 0 bytes, got {memory!r}: {accepted}.")
    return checked_memory_request(size, "memory", repr(memory))


def bind(
    gpus: "Iterable[ExternalResourceInfo]",
    count: int = 1,
    holders_per_gpu: int = 1,
    *,
    slot: "str | None" = None,
    taskmanager_pid: "int | None" = None,
    path: "str | os.PathLike[str] | None" = None,
    library_path: "str | None" = None,
    timeout: float = DEFAULT_TIMEOUT,
    metrics_interval: "float | None" = None,
    health_checks: "str | Iterable[str] | None" = None,
    nvml_timeout: "float | str | None" = None,
    memory: "int | str | None" = None,
    topology: str = "prefer",
    placement: str = "spread",
) -> GPUBinding:
    """Binds ``count`` of ``gpus`` (GPUInfos: the set the TaskManager or parent claimed) to the calling
    process, or with ``slot`` to that slot for the calling thread, sharing each GPU with at most
    ``holders_per_gpu`` holders; least-bound GPUs first, lowest index among equals. Each GPU's state
    is read first (with ``library_path``), as the GPU driver reads it: an unhealthy one is never bound
    while the others are enough (a WARN names it), and too few usable ones raise
    :class:`~flink_gpu.NotEnoughGpusError` saying why. ``health_checks``: the checks that decide health, as
    the resource's ``health-checks`` option writes them (``"all,-inforom"``) or their names (None: all,
    the driver's default); ``nvml_timeout``: the deadline of those reads, seconds or a Flink duration
    (``"300 ms"``; None: the driver's default, 5 s): a GPU not read in time is left out.

    ``memory``: the GPU memory each bound GPU gives this holder, bytes or a Flink memory size (``"10 gb"``):
    a GPU is bound only where its live holders' requests with this one fit its total and its free
    memory now covers it (least-requested is not a goal: the ranking is as without one); the request is
    recorded in the bindings file, so every process in every pid namespace counts it, and freed with the
    binding. :attr:`GPUBinding.memory_limit` is it; enforcing it is the framework's
    (:meth:`GPUBinding.apply_memory_limit`, :meth:`GPUBinding.memory_environment`).

    ``topology``: for two or more GPUs, ``"prefer"`` (the default) binds the best joined set of the best class
    (most NVLinks between them, then the closest PCIe relation; never a worse health or busy class for a link;
    docs/design.md §9.6), ``"ignore"`` the least-bound ones in index order, reading no topology. ``placement``:
    ``"spread"`` (the default: the least-bound GPU first) or ``"pack"`` (the most-bound GPU that still has room
    for ``holders_per_gpu`` first, so that whole GPUs stay free for holders that need one alone).

    ``taskmanager_pid``: the process whose GPUs these are (recorded for ``flink-gpu list``): where it is
    another process, the binding ends when it dies (one WARN says so), and no other process counts it from then
    on; ``path``: the
    bindings file (default :func:`bindings_path`); ``library_path``: the libnvidia-ml for ``devices`` and
    the gauges; ``metrics_interval``: how often the gauges' sampler reads NVML, at most (seconds, at least
    flink_gpu.nvml's MIN_METRICS_INTERVAL; None: DEFAULT_METRICS_INTERVAL). Raises
    :class:`~flink_gpu.NotEnoughGpusError` when not enough are free (the message says who binds each GPU),
    :class:`TimeoutError` when the file's lock is not had within ``timeout`` seconds, OSError for a
    file that cannot be used, ValueError/TypeError for bad arguments.
    """
    by_index = _by_index(gpus)
    count, holders_per_gpu = checked_counts(count, holders_per_gpu)
    memory_bytes = checked_memory(memory)
    checks, deadline, topology = _state_settings(health_checks, nvml_timeout, topology)
    pack = _packs(placement)
    metrics_interval = _metrics_interval(metrics_interval)
    taskmanager_pid, taskmanager_start = _taskmanager(taskmanager_pid)
    path = bindings_path() if path is None else os.fspath(path)
    me = os.getpid()
    if slot is None:
        inherited = _inherited(by_index, count, path, timeout, memory_bytes, library_path, metrics_interval)
        if inherited is not None:
            return inherited
    pid, holder, registry = _holder(slot, me)
    library = _library(library_path, deadline)
    # The registry and the file change together: a release of this holder's last handle in another thread
    # waits. The core's state read within it is bounded by nvml_timeout and holds no file lock.
    with holders.lock:
        outcome = policy.bind(
            library,
            path,
            list(by_index),
            count,
            holders_per_gpu,
            holder_pid=pid,
            slot=slot,
            taskmanager=taskmanager_pid,
            health_checks=checks,
            nvml_timeout=deadline,
            lock_timeout=timeout,
            memory=memory_bytes or 0,
            topology=topology,
            pack=pack,
        )
        if outcome.shortage is not None:
            error = NotEnoughGpusError(outcome.shortage)
            error.orphans = outcome.orphans
            raise error
        key = (outcome.file_identity, me) if slot is None else (outcome.file_identity, slot, taskmanager_pid)
        held = _hold(registry, key, outcome, path, timeout, (pid, slot, taskmanager_pid, outcome.start_time))
        if taskmanager_pid is not None and taskmanager_pid != me:
            watch(held, taskmanager_pid, taskmanager_start)
    log_notices(outcome.notices, _log)  # what it left out, the file's unparsable lines, a bind without a lease
    return GPUBinding(
        [by_index[i] for i in outcome.indices],
        outcome.indices,
        path,
        held,
        held.native,
        holder,
        library_path,
        timeout,
        metrics_interval,
        outcome.memory or None,
        outcome.memory_total,
        holders_per_gpu,
    )


def _inherited(
    by_index: "dict[str, ExternalResourceInfo]",
    count: int,
    path: str,
    timeout: float,
    memory: "int | None",
    library_path: "str | None",
    metrics_interval: float,
) -> "GPUBinding | None":
    """A forked child's share of its parent's binding in ``path`` (:mod:`flink_gpu.binding.inheritance`): a
    handle that releases nothing; None when this process is a holder of its own there."""
    inherited = inheritance.inherited(set(by_index), count, path, timeout, memory)
    if inherited is None:
        return None
    return GPUBinding(
        [by_index[i] for i in inherited.indices],
        inherited.indices,
        path,
        None,
        (inherited.parent, None, None, 0),
        f"pid {inherited.parent} (inherited)",
        library_path,
        timeout,
        metrics_interval,
        inherited.memory,
        None,
        inherited.holders_per_gpu,
    )


def _metrics_interval(metrics_interval: "float | None") -> float:
    """bind's ``metrics_interval``, checked (None: the default)."""
    from flink_gpu.nvml import DEFAULT_METRICS_INTERVAL, checked_metrics_interval

    return DEFAULT_METRICS_INTERVAL if metrics_interval is None else checked_metrics_interval(metrics_interval)


def _holder(slot: "str | None", me: int) -> "tuple[int, str, dict[HolderKey, Held]]":
    """Who binds: this process (``slot`` None) or the calling thread for ``slot``: the pid or thread id the
    file records, how messages name it, and the registry its handles are counted in."""
    if slot is None:
        return me, f"pid {me}", holders.process_holders
    pid = threading.get_native_id()
    return pid, f"slot {slot} (thread {pid})", holders.thread_holders()


def _taskmanager(taskmanager_pid: object) -> "tuple[int | None, int | None]":
    """bind's ``taskmanager_pid``, checked, and its start time (None, None for None); ValueError for a pid
    that no process has."""
    if taskmanager_pid is None:
        return None, None
    pid = checked_pid(taskmanager_pid, "taskmanager_pid")
    start = process_start_time(pid)
    if start is None:
        raise ValueError(
            f"taskmanager_pid {pid} is not a running process: give the pid of the "
            "TaskManager (or parent) whose GPUs these are, or None."
        )
    return pid, start


def _hold(
    registry: "dict[HolderKey, Held]",
    key: "HolderKey",
    outcome: BindOutcome,
    path: str,
    timeout: float,
    native: "_NativeHolder",
) -> Held:
    """The holder ``key``'s entry in ``registry`` with one more handle and what ``outcome`` bound; under
    holders.lock, with the file's change."""
    held = registry.get(key)
    if held is None:
        held = registry[key] = Held(registry, key, timeout)
    held.refs += 1
    held.indices.update(outcome.indices)
    held.start_time = outcome.start_time
    held.native, held.timeout = native, timeout
    held.path = held.path or path
    return held


def _state_settings(
    health_checks: "str | Iterable[str] | None", nvml_timeout: "float | str | None", topology: str = "prefer"
) -> "tuple[tuple[str, ...] | None, float, str]":
    """bind's ``health_checks``, ``nvml_timeout`` and ``topology``, read as the driver and flink-gpu-discovery read
    them: the option's text by the core's settings reader, names and seconds by its checks (flink_gpu.nvml); (the
    checks' names or None for all, the deadline in seconds, the topology policy); ValueError naming a bad one."""
    from flink_gpu.nvml import checked_health_checks, checked_nvml_timeout, read_settings

    if not isinstance(topology, str):
        raise ValueError(f"topology {topology!r} is not a topology policy: give 'prefer' or 'ignore'.")
    health_text = health_checks if isinstance(health_checks, str) else None
    timeout_text = nvml_timeout if isinstance(nvml_timeout, str) else None
    read = read_settings("", None, timeout_text, health_text, None, None, None, arguments=True, topology=topology)
    if read.parameter_errors:
        raise ValueError(read.parameter_errors[0])
    checks: "tuple[str, ...] | None" = None
    if health_text is not None:
        checks = read.health_checks
    elif health_checks is not None:
        checks = checked_health_checks(health_checks, "health_checks")
    if nvml_timeout is None or timeout_text is not None:
        return checks, read.nvml_timeout, read.topology
    if isinstance(nvml_timeout, bool) or not isinstance(nvml_timeout, (int, float)):
        raise ValueError(
            f"nvml_timeout {nvml_timeout!r} is not a deadline: give seconds or a Flink duration such as '300 ms', "
            f"not a {type(nvml_timeout).__name__}."
        )
    return checks, checked_nvml_timeout(nvml_timeout, "nvml_timeout"), read.topology


#: bind's ``placement`` values: whether each packs
PLACEMENTS = {"spread": False, "pack": True}


def _packs(placement: str) -> bool:
    """Whether bind's ``placement`` packs; ValueError naming a value that is none of :data:`PLACEMENTS`."""
    word = placement.strip().lower() if isinstance(placement, str) else None
    if word not in PLACEMENTS:
        raise ValueError(f"Invalid value {placement!r} for placement: expected one of {', '.join(PLACEMENTS)}.")
    return PLACEMENTS[word]


def _library(library_path: "str | None", nvml_timeout: float) -> "Library | None":
    """The NVML library bind judges the GPUs with; None where it cannot be opened (each GPU is then bound as
    it is)."""
    from flink_gpu.errors import NvmlError
    from flink_gpu.nvml import open_library

    try:
        return open_library(library_path, nvml_timeout)
    except NvmlError:
        return None
