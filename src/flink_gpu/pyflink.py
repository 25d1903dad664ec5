"""External resource infos for PyFlink user functions (docs/design.md §7).

PyFlink (up to 2.3) has no Python API for ``RuntimeContext.getExternalResourceInfos``, so a Python
UDF cannot see the GPUs its TaskManager discovered. Call this from ``open()`` instead::

    from flink_gpu import cuda_visible_devices
    from flink_gpu.pyflink import get_external_resource_infos

    class Infer(MapFunction):
        def open(self, ctx):
            gpus = get_external_resource_infos(ctx, "gpu")
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(gpus)

* Thread mode (``python.execution-mode: thread``): the function runs inside the TaskManager JVM and
  PyFlink's context wraps the Java ``StreamingRuntimeContext``; its infos are asked for directly
  and converted to :class:`~flink_gpu.GPUInfo` with every property the Java info exposes.
* Process mode (the default): the Python worker is a descendant of the TaskManager JVM and cannot
  ask it. The TaskManager's discovery (the stock script or ``flink-gpu-discovery`` in coordination
  mode) recorded ``<index> <pid>`` lines for the JVM in the coordination file, so the worker reads
  the file named by the TaskManager's configuration (``$FLINK_CONF_DIR``, inherited) and takes the
  GPUs of its nearest ancestor that holds any, at most the configured amount, completed with uuid,
  name, … from NVML where NVML can be loaded. A resource the TaskManager gives no infos for (not
  listed in ``external-resources``, no positive amount, no loadable driver factory, discovery not
  in coordination mode) gives none here either, and the file is not read.

Nothing found is an empty frozenset and a WARN saying what was tried; it never raises for that.

Flink gives every slot of a TaskManager all of its GPUs. To give each slot its own, bind them in
``open()`` (docs/design.md §9.3)::

    from flink_gpu.pyflink import bind_gpus

    class Infer(MapFunction):
        def open(self, ctx):
            self.gpus = bind_gpus(ctx, "gpu", count=1)
            self.gpus.register_metrics(ctx.get_metrics_group())
            device = torch.device(f"cuda:{self.gpus.devices[0]}")

        def map(self, value):
            self.gpus.update_metrics()  # thread mode: refreshes the gauges, at most once a second
            ...

        def close(self):
            self.gpus.release()
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from flink_gpu.errors import IllegalConfigurationException, NotEnoughGpusError, SlotUnknownError
from flink_gpu.gpu.info import GPUInfo
from flink_gpu.gpu.taskmanager_view import TaskManagerView, taskmanager_view

if TYPE_CHECKING:
    from flink_gpu.binding import GPUBinding

# PyFlink's runtime contexts and the Java objects behind them (pemja proxies) are untyped: they are Any here.

__all__ = ["ResourceLookup", "bind_gpus", "get_external_resource_infos", "lookup_external_resource_infos"]

_log = logging.getLogger("flink_gpu.pyflink")

#: How far up the process tree to look; a TaskManager's Python worker is 1-3 levels below it.
_MAX_ANCESTRY = 64


class ResourceLookup(NamedTuple):
    """What :func:`lookup_external_resource_infos` found, and how."""

    infos: frozenset[GPUInfo]
    mode: str  # "thread": asked the Java context; "process": read the coordination file
    reason: str | None  # why ``infos`` is empty (None when it is not)
    coordination_file: str | None = None  # process mode: the file that was read
    holder_pid: int | None = None  # process mode: the ancestor whose GPUs these are


def get_external_resource_infos(runtime_context: Any, name: str) -> frozenset[GPUInfo]:
    """The infos of external resource ``name`` (e.g. ``"gpu"``) of this function's TaskManager.

    ``runtime_context`` is the PyFlink ``RuntimeContext`` given to ``open()`` (``None`` is accepted
    in process mode). Returns a frozenset of :class:`~flink_gpu.GPUInfo`; empty, with a WARN that
    names what was tried, when nothing can be found.
    """
    lookup = lookup_external_resource_infos(runtime_context, name)
    if lookup.reason is not None:
        _log.warning("No external resource infos for %r (%s mode): %s", name, lookup.mode, lookup.reason)
    return lookup.infos


def lookup_external_resource_infos(runtime_context: Any, name: str) -> ResourceLookup:
    """Like :func:`get_external_resource_infos`, returning the reason instead of logging it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"The external resource name must be a non-empty string, got {name!r}.")
    java_context = _java_context(runtime_context)
    if java_context is not None:
        return _from_java(java_context, name)
    return _from_coordination_file(name)


def bind_gpus(
    runtime_context: Any,
    name: str = "gpu",
    count: int = 1,
    subtasks_per_gpu: int = 1,
    memory: "int | str | None" = None,
    topology: "str | None" = None,
    placement: str = "spread",
) -> GPUBinding:
    """Binds ``count`` of the TaskManager's GPUs of resource ``name`` to this subtask's slot and returns
    the :class:`flink_gpu.binding.GPUBinding` (``infos``, ``cuda_visible_devices``, ``devices``,
    ``register_metrics(group)``; a context manager, ``release()`` in ``close()``).

    Distinct slots of one TaskManager get distinct GPUs; with ``subtasks_per_gpu=k`` up to k slots share
    one, least-shared first. With ``memory`` (bytes, or a Flink memory size such as ``"12 gb"``) each of
    its GPUs gives the slot that much: a GPU is bound only where the slots' requests fit its memory and
    its free memory covers this one (both limits apply with ``subtasks_per_gpu``);
    ``binding.memory_limit`` is it, and ``binding.apply_memory_limit()`` hands it to PyTorch or CuPy
    (docs/design.md §9.3, Memory, says who enforces what in which mode). Code of the same slot (a second
    call, chained operators) gets the same binding, topped up when it asks for more. The holder is the
    slot: in process mode the Python worker (PyFlink runs one per slot; its death frees the binding), in
    thread mode the slot's allocation id in the JVM, held by the threads that bound it (a failed task's
    thread ends and frees it). A process forked from the worker shares the worker's binding in a bindings
    file only while the worker still binds there; once the worker released it or died, the child binds
    there as a holder of its own.
    With ``count`` of two or more, the slot gets the best joined set of its TaskManager's GPUs (NVLink, then
    PCIe; docs/design.md §9.6) unless ``topology`` is ``"ignore"`` (None: the resource's ``topology`` parameter,
    ``prefer`` by default). ``placement``: ``"spread"`` (least-shared GPU first) or ``"pack"`` (fill a GPU up to
    ``subtasks_per_gpu`` slots before the next, so that whole GPUs stay free).
    Raises :class:`flink_gpu.NotEnoughGpusError` when the TaskManager has no GPUs for ``name`` or too
    few are left, saying who binds them and what to change,
    :class:`flink_gpu.SlotUnknownError` when a thread-mode subtask's slot cannot be told, and
    ``IllegalConfigurationException`` (a ValueError) naming the file, key and value when the TaskManager's
    configuration has a malformed option that the binding reads (``topology``, ``nvml-timeout``,
    ``health-checks``, ``metrics.interval``; ``--topology``, ``--nvml-timeout`` in the args), Java plugin or not.
    """
    from flink_gpu.binding import bind, bindings_path, checked_counts, checked_memory

    count, subtasks_per_gpu = checked_counts(count, subtasks_per_gpu, holders_name="subtasks_per_gpu")
    memory_bytes = checked_memory(memory)
    if not isinstance(name, str) or not name:
        raise ValueError(f"The external resource name must be a non-empty string, got {name!r}.")
    view = taskmanager_view(name)
    if view.errors:  # else a malformed metrics.interval (...) would silently be the default
        raise IllegalConfigurationException(" ".join(view.errors))
    java_context = _java_context(runtime_context)
    lookup = _from_java(java_context, name) if java_context is not None else _from_coordination_file(name, view)
    if not lookup.infos:
        raise NotEnoughGpusError(
            f"No GPUs of '{name}' to bind in {lookup.mode} mode: {lookup.reason} {_NO_GPUS_HINT.format(name=name)}"
        )
    taskmanager: "int | None"  # thread mode: this JVM; process mode: the ancestor that holds the GPUs
    if lookup.mode == "thread":
        slot = _slot_id(java_context)
        taskmanager, path = os.getpid(), view.path
    else:
        slot, taskmanager, path = None, lookup.holder_pid, lookup.coordination_file
    try:
        binding = bind(
            lookup.infos,
            count,
            subtasks_per_gpu,
            slot=slot,
            taskmanager_pid=taskmanager,
            path=bindings_path(path),
            library_path=view.library,
            metrics_interval=view.metrics_interval,
            health_checks=view.health_checks,
            nvml_timeout=view.nvml_timeout,
            memory=memory_bytes,
            topology=topology if topology is not None else view.topology or "prefer",
            placement=placement,
        )
    except NotEnoughGpusError as error:  # the same error, told what this TaskManager can serve
        advice = _binding_advice(
            name,
            lookup.infos,
            taskmanager,
            count,
            subtasks_per_gpu,
            lookup.mode == "thread",
            memory_bytes,
            orphaned=bool(error.orphans),
        )
        error.args = (f"{error} {advice}",)
        raise
    if _log.isEnabledFor(logging.INFO):
        _log.info(
            "Bound %s to %s of the TaskManager (pid %s), %s mode: %s",
            _subtask_name(runtime_context, java_context),
            binding.holder,
            taskmanager,
            lookup.mode,
            _described_gpus(binding, view.library),
        )
    return binding


def _described_gpus(binding: GPUBinding, library: "str | None") -> str:
    """ "GPU 0 (GPU-…), GPU 1 (…)" for a log line, each with the binding's memory request when it has one
    ("GPU 0 (GPU-…, memory request 4 GiB)"): thread mode's Java infos carry the index only, so the uuid is
    NVML's."""
    from flink_gpu.flink.grammars import format_memory_size

    uuids = {info.get_property("index"): info.get_property("uuid") for info in binding.infos}
    missing = [index for index in binding.indices if not uuids.get(index)]
    if missing:
        completed, _ = _nvml_infos(missing, library)
        uuids.update({info.index: info.get_property("uuid") for info in completed})
    request = "" if binding.memory_limit is None else f", memory request {format_memory_size(binding.memory_limit)}"
    return ", ".join(f"GPU {index} ({uuids.get(index) or 'uuid unknown'}{request})" for index in binding.indices)


# Where a TaskManager that found no GPU says why (Flink's StaticExternalResourceInfoProvider logs it).
_NO_GPUS_HINT = (
    'If the TaskManager found no GPU, its log (log/flink-*-taskexecutor-*.log) has "Failed to retrieve '
    'information of external resource {name}" with the cause; `flink-gpu doctor $FLINK_CONF_DIR` in '
    "the shell that starts the TaskManager checks its configuration and environment "
    "(docs/flink-cluster.md)."
)


def _subtask_name(runtime_context: Any, java_context: Any) -> str:
    """ "<operator> subtask <i>" for the log line of a binding; what cannot be read is left out."""
    try:
        if java_context is not None:
            task = java_context.getTaskInfo()
            return f"{task.getTaskName()} subtask {int(task.getIndexOfThisSubtask())}"
        if runtime_context is not None:
            return f"{runtime_context.get_task_name()} subtask {runtime_context.get_index_of_this_subtask()}"
    except Exception:  # a context without the calls (a test's stand-in, an older PyFlink): name what is known
        pass
    return "a subtask"


def _binding_advice(
    name: str,
    infos: Iterable[GPUInfo],
    taskmanager: "int | None",
    count: int,
    subtasks_per_gpu: int,
    thread_mode: bool,
    memory: "int | None" = None,
    orphaned: bool = False,
) -> str:
    """What the TaskManager can serve and what to change, for a NotEnoughGpusError of bind_gpus (``orphaned``:
    the core named orphaned workers that hold the memory asked for, and how to end them: nothing else to change)."""
    from flink_gpu.base.gpu_index import sort_indices, unit_parent

    gpus = sort_indices(info.index for info in infos)
    units = [index for index in gpus if unit_parent(index) is not None]
    whole = len(gpus) - len(units)
    has = f"The TaskManager (pid {taskmanager}) has {len(gpus)} GPU(s) of '{name}' ({', '.join(gpus)}) for its slots"
    amount = f"'external-resource.{name}.amount'"
    # what one slot can hold: each GPU once, and one MIG unit at most (CUDA uses one per process)
    per_slot = whole + (1 if units else 0)
    if count > per_slot:
        why = " (a process binds at most one MIG unit)" if units else ""
        return (
            f"{has}; one slot can bind at most {per_slot} of them{why}, fewer than the {count} it asks for: "
            f"raise {amount}, or bind fewer."
        )
    # thread mode: every slot is a thread of the JVM, and all of them share one MIG unit
    places = (whole + (1 if units else 0) if thread_mode else len(gpus)) * subtasks_per_gpu
    mig = (
        " (in thread mode all slots share one MIG unit: use process mode to give each slot its own)"
        if units and thread_mode
        else ""
    )
    if memory is not None and orphaned:
        return f"{has}."
    if memory is not None:  # the core named each GPU's requests and free memory
        from flink_gpu.flink.grammars import format_memory_size

        return (
            f"{has}, each shared by at most {subtasks_per_gpu} (subtasks_per_gpu) slots, each asking "
            f"{format_memory_size(memory)} of it (memory){mig}. Ask for less memory, raise {amount}, or lower "
            "the parallelism (or taskmanager.numberOfTaskSlots) of the operators that bind GPUs."
        )
    return (
        f"{has}, each shared by at most {subtasks_per_gpu} (subtasks_per_gpu), so at most {places // count} of "
        f"its slots can bind {count} each{mig}. Raise {amount}, raise subtasks_per_gpu, or lower the parallelism "
        "(or taskmanager.numberOfTaskSlots) of the operators that bind GPUs."
    )


def _slot_id(java_context: Any) -> str:
    """The slot of a thread-mode subtask: its allocation id (all subtasks of one slot share it).

    PyFlink 2.3's ``get_index_of_this_subtask()`` calls a Java method removed in Flink 2.0; the Java
    context's ``getTaskInfo()`` is what Flink 2 has."""
    try:
        allocation = java_context.getTaskInfo().getAllocationIDAsString()
    except Exception as error:
        raise SlotUnknownError(
            f"Cannot tell this subtask's slot: the Java RuntimeContext has no "
            f"getTaskInfo().getAllocationIDAsString() ({error})."
        ) from None
    if allocation is None:  # str() would make every such subtask the one slot "None"
        raise SlotUnknownError(
            "Cannot tell this subtask's slot: its allocation id is unknown "
            "(getTaskInfo().getAllocationIDAsString() returned null), so it cannot be given "
            "GPUs of its own. Bind in process mode (python.execution-mode: process), where the "
            "slot's Python worker is the holder."
        )
    return str(allocation)


# -- thread mode ---------------------------------------------------------------------------------


def _java_context(runtime_context: Any) -> Any:
    """The Java ``RuntimeContext`` behind PyFlink's thread-mode context, or None (process mode)."""
    context = runtime_context
    # window functions wrap PyFlink's context in another one: unwrap until Java answers
    for _ in range(4):
        if context is None:
            return None
        if hasattr(context, "getExternalResourceInfos"):
            return context
        context = getattr(context, "_runtime_context", None)
    return None


def _java_iterable(value: Any) -> list[Any]:
    """A Java collection as a Python list, whatever pemja made of it."""
    if value is None:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "toArray"):
        return list(value.toArray())
    return list(value)


def _java_optional(value: Any) -> str | None:
    """A Java ``Optional<String>`` as str or None (pemja may or may not have unwrapped it)."""
    if value is None or isinstance(value, str):
        return value
    if value.isPresent():
        return str(value.get())
    return None


def _from_java(java_context: Any, name: str) -> ResourceLookup:
    infos = []
    for java_info in _java_iterable(java_context.getExternalResourceInfos(name)):
        index = _java_optional(java_info.getProperty("index"))
        properties = {}
        for key in map(str, _java_iterable(java_info.getKeys())):
            if key != "index":
                value = _java_optional(java_info.getProperty(key))
                if value is not None:
                    properties[key] = value
        if index is None:
            # not a GPU info (another resource type): keep its properties under its string form
            index = str(java_info.toString())
        infos.append(GPUInfo(index, properties))
    reason = None
    if not infos:
        reason = (
            f"the TaskManager's RuntimeContext.getExternalResourceInfos({name!r}) returned no "
            f"infos. Check that '{name}' is listed in 'external-resources' with an amount and "
            "a driver-factory.class, and the TaskManager log for the driver's WARN; a local "
            "MiniCluster never loads external resource drivers."
        )
    return ResourceLookup(frozenset(infos), "thread", reason)


# -- process mode --------------------------------------------------------------------------------


def _nvml_infos(indices: list[str], library: str | None) -> tuple[list[GPUInfo], str | None]:
    """GPUInfos for ``indices`` with NVML's properties where NVML answers; the note if it does not."""
    from flink_gpu.errors import NvmlError

    try:
        from flink_gpu.gpu.nvml_discovery import gpu_info
        from flink_gpu.nvml import open_library

        devices = {device.gpu_index: device for device in open_library(library).devices().devices}
    except NvmlError as error:
        return [GPUInfo(index) for index in indices], f"NVML is not available ({error}); infos carry the index only"
    # an info only for the GPUs asked for: building one reads every property
    return [gpu_info(devices[index]) if index in devices else GPUInfo(index) for index in indices], None


def _from_coordination_file(name: str, view: "TaskManagerView | None" = None) -> ResourceLookup:
    from flink_gpu import coordination
    from flink_gpu.flink.script_protocol import sort_indices

    view = view if view is not None else taskmanager_view(name)
    path, notes, library, amount = view.path, view.notes, view.library, view.amount
    notes = list(notes)  # a view may be reused: the notes of this lookup are its own
    if path is None:
        return ResourceLookup(frozenset(), "process", "; ".join(notes) + ".")
    try:
        snapshot = coordination.snapshot(path)
    except (OSError, TimeoutError) as error:
        notes.append(f"could not read the coordination file {path}: {error}")
        return ResourceLookup(frozenset(), "process", "; ".join(notes) + ".", path)
    if not snapshot.exists:
        notes.append(f"the coordination file {path} does not exist")
        return ResourceLookup(frozenset(), "process", "; ".join(notes) + ".", path)
    held: dict[int, list[str]] = {}
    for entry in snapshot.entries:
        # our ancestors are pids of our namespace: another container's pid 1 is not our TaskManager
        if entry.alive and entry.ours:
            held.setdefault(entry.pid, []).append(entry.index)
    chain = []  # the pids tried, for the message
    from flink_gpu.nvml import process_ancestry

    for ancestor in process_ancestry(os.getpid(), _MAX_ANCESTRY):
        pid = ancestor.pid
        chain.append((pid, ancestor.command))
        indices = held.get(pid)
        if indices:
            indices = sort_indices(set(indices))
            if amount is not None and len(indices) > amount:
                # the TaskManager's driver gives the lowest `amount` of what its JVM holds
                _log.warning(
                    "The coordination file %s holds %d GPUs (%s) for pid %d, more than the "
                    "amount %d of %r the TaskManager is configured with; using GPU(s) %s.",
                    path,
                    len(indices),
                    ",".join(indices),
                    pid,
                    amount,
                    name,
                    ",".join(indices[:amount]),
                )
                indices = indices[:amount]
            infos, note = _nvml_infos(indices, library)
            if note:
                _log.info("GPUs %s of pid %d in %s: %s.", ",".join(indices), pid, path, note)
            return ResourceLookup(frozenset(infos), "process", None, path, pid)
    tried = ", ".join(f"{pid} ({command})" for pid, command in chain) or "none (no /proc)"
    notes.append(
        f"no live entry in the coordination file {path} belongs to this process or an "
        f"ancestor (tried pids {tried}; the file holds pids "
        f"{', '.join(map(str, sorted(held))) or 'none'})"
    )
    return ResourceLookup(frozenset(), "process", "; ".join(notes) + ".", path)
