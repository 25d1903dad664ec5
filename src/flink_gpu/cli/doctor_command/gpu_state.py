"""The state of the host's GPUs now (docs/design.md §9.1): unhealthy, degraded and busy ones, the
checks that could not be made, findings of checks ``health-checks`` leaves out, a host whose
GPUs have not registered with the NVLink fabric, and GPUs whose bindings' memory requests (the
bindings file of the configuration's coordination file, docs/design.md §9.3) no longer fit in what is free, and
workers whose bindings outlived their TaskManager (orphans).

Doctor is not a worker, so "busy" here means running a process that belongs to no flink-gpu
holder (no live owner in the coordination file, no live holder in its bindings file — a thread-mode
TaskManager whose slots bind is one — nor a descendant of one).
"""

from __future__ import annotations

import os

from flink_gpu.cli._output import plural, process_cmdline, short_command
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.cli.doctor_command.gpu_count import open_nvml
from flink_gpu.errors import IllegalConfigurationException, NvmlError
from flink_gpu.flink.framework import amount_key
from flink_gpu.flink.script_protocol import ScriptArgs
from flink_gpu.gpu.options import GPUDriverOptions
from flink_gpu.gpu.settings import GPUDriverSettings
from flink_gpu.nvml import Verdict

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from typing import Iterable, Sequence

    from flink_gpu.bindings_file import BindingSnapshot
    from flink_gpu.coordination import CoordinationEntry
    from flink_gpu.nvml import Device, DeviceState


def _holders(script_args: "ScriptArgs | None", coordination_file: str) -> "list[int]":
    """The live owners in the coordination file the TaskManagers use, if they coordinate, and the live
    holders in its bindings file: a process holder, or the TaskManager whose slots (its threads) bind.
    Pids of our namespace."""
    from flink_gpu import bindings_file
    from flink_gpu.coordination import snapshot

    holders: "list[int]" = []
    if script_args is not None and script_args.coordination_mode:
        try:
            owners = snapshot(script_args.coordination_file).entries
        except (OSError, TimeoutError):  # the coordination check reports it
            owners = ()
        holders += [entry.pid for entry in owners if entry.alive and entry.ours]
    try:
        bound = bindings_file.snapshot(bindings_file.bindings_path(coordination_file))
    except (OSError, TimeoutError):  # the memory requests' check reports it
        return holders
    for entry in bound.entries:
        if entry.alive and entry.ours:
            process = entry.pid if entry.slot is None else entry.taskmanager
            if process is not None:
                holders.append(process)
    return holders


def _check_verdict(checkup: Checkup, name: str, state: DeviceState, unregistered: bool, uses_state: bool) -> bool:
    """What the state's verdict means for a TaskManager; False for a GPU whose processes are not worth a word."""
    index = state.gpu_index
    if state.verdict is Verdict.UNHEALTHY:
        if unregistered:
            return False  # the host finding says it once
        then = (
            "a TaskManager never gets it"
            if uses_state
            else "the discovery script still hands it out (it checks nothing but the index); "
            "flink-gpu-discovery or discovery-mode nvml would leave it out"
        )
        checkup.add(
            "warning" if uses_state else "error",
            "gpu-state",
            f"GPU {index} is {state.health}: {then}.",
            f"Check it with `nvidia-smi -q -i {index}`; a lost GPU or one that needs "
            "a reset needs `nvidia-smi -r` or a reboot, a failed row remapping or a "
            "corrupted InfoROM needs service.",
            resource=name,
        )
    elif state.verdict is Verdict.UNKNOWN:
        checkup.add(
            "warning",
            "gpu-state",
            f"GPU {index} is {state.health}: "
            + (
                "a TaskManager does not get it while its NVML query does not return."
                if uses_state
                else "the discovery script hands it out without asking NVML."
            ),
            "The NVIDIA driver may hang on it: check `dmesg` for Xid errors and whether "
            f"`nvidia-smi -q -i {index}` answers; a GPU that stays so needs a reset or a reboot.",
            resource=name,
        )
        return False
    elif state.verdict is Verdict.DEGRADED:
        checkup.add(
            "note",
            "gpu-state",
            f"GPU {index} is {state.health}: "
            + (
                "it is handed out only after every healthy GPU."
                if uses_state
                else "the discovery script hands it out like any other."
            ),
            "Reset it (`nvidia-smi -r`) when it is idle to apply the pending retirement or remapping.",
            resource=name,
        )
    return True


def _check_processes(
    checkup: Checkup,
    name: str,
    state: DeviceState,
    belongs: "dict[tuple[str, int], int]",
    uses_state: bool,
    policy: str,
    busy_key: str,
) -> None:
    """The processes on a GPU that no flink-gpu holder runs, and what the busy-gpus policy makes of them."""
    index = state.gpu_index
    if not state.processes_known:
        checkup.add(
            "warning",
            "gpu-state",
            f"NVML gives no permission to list the processes on GPU {index}; they count as not busy.",
            "Run the TaskManager (and "
            "doctor) as a user that may see the GPUs' processes (NVML hides other "
            "users' processes from unprivileged users).",
            resource=name,
        )
        return
    foreign = [(p.pid, p.visible) for p in state.processes if (index, p.pid) not in belongs]
    if not foreign:
        return
    hidden = [pid for pid, visible in foreign if not visible]
    shown = "; ".join(
        f"pid {pid}"
        + (f" ({short_command(process_cmdline(pid), 40)})" if visible else " (not visible in this PID namespace)")
        for pid, visible in foreign
    )
    if not uses_state or policy == "ignore":
        then = (
            "a TaskManager may get it and share it"
            if uses_state
            else "the discovery script may hand it out and the worker would share it"
        )
        level, fix = "warning", (f"Set {busy_key}: avoid (the default) or exclude." if uses_state else None)
    elif policy == "exclude":
        level, then, fix = "note", f"with {busy_key} exclude a TaskManager never gets it", None
    else:
        level, then, fix = (
            "note",
            "a TaskManager gets it only when the idle GPUs are too few",
            f"Set {busy_key}: exclude to never share a GPU.",
        )
    checkup.add(
        level,
        "gpu-state",
        f"GPU {index} runs {plural(len(foreign), 'process', 'processes')} of no flink-gpu holder ({shown}): {then}.",
        fix,
        resource=name,
    )
    if hidden:
        checkup.add(
            "note",
            "gpu-state",
            f"NVML lists pid {', '.join(map(str, hidden))} on "
            f"GPU {index}, which this PID namespace cannot see: NVML reports host pids "
            "in a container. They count as foreign, even when they are the "
            "TaskManager's own.",
            "Share the host PID namespace (hostPID) so that "
            f"own processes are recognised, or set {busy_key}: ignore when the "
            "container's GPUs are its own.",
            resource=name,
        )


def check_gpu_state(
    checkup: Checkup,
    name: str,
    settings: GPUDriverSettings,
    script_args: "ScriptArgs | None",
    amount: "int | None",
    mode: "str | None",
    uses_state: bool,
) -> None:
    """``uses_state``: the TaskManager's discovery reads the GPUs' state (the NVML backend or
    flink-gpu-discovery); a stock or custom script hands GPUs out by index alone."""
    found = open_nvml(checkup, settings.library_path if mode != "script" else None)
    if isinstance(found, NvmlError):
        return  # the gpu-count check said so
    from flink_gpu.gpu.nvml_discovery import process_holders

    nvml, enumeration = found
    devices = enumeration.devices
    if not devices:
        return
    # the nvlink check is judged by how the GPUs are joined (read once per process)
    topology = nvml.topology(sorted({d.index for d in devices}))
    states = nvml.states(os.getpid(), None, settings.health_checks, topology=topology)
    belongs = process_holders(nvml, _holders(script_args, settings.script_args.coordination_file))
    try:
        policy = settings.busy_policy(warn=False)
    except IllegalConfigurationException:  # a bad --busy-gpus: the driver check reports it
        policy = settings.busy_gpus
    busy_key = settings.key(GPUDriverOptions.BUSY_GPUS)
    checks_key = settings.key(GPUDriverOptions.HEALTH_CHECKS)
    unregistered = _check_fabric(checkup, name, states)
    _check_unchecked(checkup, name, states)
    _check_persistence(checkup, name, devices)
    unhealthy = 0
    for state in states:
        _check_left_out(checkup, name, state, checks_key, uses_state)
        unhealthy += state.verdict is Verdict.UNHEALTHY
        if not _check_verdict(checkup, name, state, unregistered, uses_state):
            continue
        _check_processes(checkup, name, state, belongs, uses_state, policy, busy_key)
    _check_memory_requests(checkup, name, settings.script_args.coordination_file, states)
    if amount is not None and uses_state and unhealthy and amount > len(states) - unhealthy:
        checkup.add(
            "error",
            "gpu-state",
            f"{amount_key(name)} is {amount}, but only "
            f"{plural(len(states) - unhealthy, 'GPU')} of this host "
            f"{'is' if len(states) - unhealthy == 1 else 'are'} healthy: discovery fails.",
            "Repair or replace the unhealthy GPUs, or lower the amount.",
            resource=name,
        )


def _fabric_unregistered(state: "DeviceState") -> bool:
    """The GPU's NVLink fabric registration has not completed (not started or in progress)."""
    return any(check.name == "fabric" and check.verdict is Verdict.UNHEALTHY for check in state.checks)


def _check_fabric(checkup: Checkup, name: str, states: "Sequence[DeviceState]") -> bool:
    """One host finding when no GPU of the host has registered with the NVLink fabric: the
    Fabric Manager is not running or not done (docs/design.md §9.1). True when it was made."""
    if not states or not all(_fabric_unregistered(state) for state in states):
        return False
    waiting = any(
        "in progress" in (check.finding or "") for state in states for check in state.checks if check.name == "fabric"
    )
    checkup.add(
        "error",
        "gpu-state",
        f"No GPU of this host has completed its NVLink fabric registration"
        f"{' (some are in progress)' if waiting else ''}: CUDA fails with error 802 "
        "(cudaErrorSystemNotReady) until it has, and no GPU is handed out.",
        "Start the Fabric Manager (`systemctl status nvidia-fabricmanager`; its version must be "
        "the driver's) and wait for the registration to complete (`nvidia-smi -q | grep -A3 Fabric`).",
        resource=name,
    )
    return True


def _check_unchecked(checkup: Checkup, name: str, states: "Iterable[DeviceState]") -> None:
    """What was not looked at, one note per set of checks not made: "not checked" is not "healthy"."""
    gpus: "dict[str, list[str]]" = {}
    for state in states:
        unchecked = ", ".join(
            f"{check.name} ({check.outcome})" for check in state.checks if check.outcome not in ("ok", "finding")
        )
        if unchecked:
            gpus.setdefault(unchecked, []).append(state.gpu_index)
    for unchecked, indices in gpus.items():
        checkup.add("note", "gpu-state", f"Not checked on GPU {', '.join(indices)}: {unchecked}.", None, resource=name)


def _check_persistence(checkup: Checkup, name: str, devices: "Iterable[Device]") -> None:
    """One note for the GPUs whose persistence mode is off (a MIG GPU once, by its units' parent); none
    where the driver cannot say (an optional query: no finding)."""
    from flink_gpu.cli.list_view import PERSISTENCE_FIX, PERSISTENCE_OFF

    off = sorted({str(d.index) for d in devices if d.persistence_mode is False}, key=int)
    if off:
        checkup.add("note", "gpu-state", f"GPU {', '.join(off)}: {PERSISTENCE_OFF}.", PERSISTENCE_FIX, resource=name)


def _check_left_out(checkup: Checkup, name: str, state: "DeviceState", checks_key: str, uses_state: bool) -> None:
    """A finding of a check that health-checks leaves out."""
    index = state.gpu_index
    for found in state.checks:
        check, finding = found.name, found.finding
        if found.outcome == "finding" and not found.enforced and found.verdict is not Verdict.OK:
            then = "a TaskManager may still get it" if uses_state else "the discovery script hands it out"
            checkup.add(
                "warning",
                "gpu-state",
                f"GPU {index}: {finding}, but {checks_key} leaves {check} out: {then}.",
                f"Put {check} back into {checks_key} unless you know this GPU is fine.",
                resource=name,
            )


# -- the bindings' memory requests against what is free ---------------------------------------------


def _nearest_user(pid: int, users: "set[int]") -> "int | None":
    """The process of ``users`` that ``pid`` is or descends from, the nearest one (a worker under its
    TaskManager is the worker's), None when it is none of theirs (the core's process_ancestry)."""
    from flink_gpu.nvml import process_ancestry

    return next((ancestor.pid for ancestor in process_ancestry(pid) if ancestor.pid in users), None)


class _MemoryUser:
    """The process whose CUDA memory is its holders' on one GPU: a process holder itself, or for the slots
    of a TaskManager (thread mode: they run in it) the TaskManager; ``pid`` None where that process is not
    one of this PID namespace's (or a slot recorded no TaskManager), so that its use cannot be told."""

    def __init__(self, pid: "int | None", why: "str | None") -> None:
        self.pid = pid
        self.why = why  # why its use cannot be told (pid None)
        self.requested = 0  # bytes its holders request of the GPU
        self.used = 0  # bytes its processes use of the GPU, as far as NVML says
        self.unread: "list[int]" = []  # its processes whose used memory NVML does not give


def _memory_users(holders: "dict[str, list[CoordinationEntry]]") -> "dict[str, _MemoryUser]":
    """The users of one GPU from its live holders' lines there (by holder_key), each with what its holders
    request of it: a holder once, its largest line's request."""
    users: "dict[str, _MemoryUser]" = {}
    for entries in holders.values():
        first = entries[0]
        if first.slot is not None:
            key = f"taskmanager {first.taskmanager_key}"
            pid = first.taskmanager if first.ours else None
            why = (
                f"{first.holder} recorded no TaskManager"
                if first.taskmanager is None
                else f"the TaskManager of {first.holder}, pid {first.taskmanager}, is of another PID namespace"
            )
        else:
            key = first.holder_key
            pid = first.pid if first.ours else None
            why = f"{first.holder} is of another PID namespace"
        # one process, one user: a process that is a holder and the TaskManager of slots too
        user = users.setdefault(
            f"pid {pid}" if pid is not None else key, _MemoryUser(pid, None if pid is not None else why)
        )
        user.requested += _request(entries)
    return users


def _request(entries: "list[CoordinationEntry]") -> int:
    """A holder's memory request of a GPU (bytes; 0: none)."""
    from flink_gpu.bindings_file import memory_request

    return memory_request(entries) or 0


#: The holders a memory finding names with their requests; more are counted.
_REQUESTS_SHOWN = 4


def _check_memory_requests(
    checkup: Checkup, name: str, coordination_file: str, states: "Sequence[DeviceState]"
) -> None:
    """A warning per GPU whose live bindings request more memory than they can still get: the requests, less
    what their holders' own processes already use of the GPU (each user at most its request), against the
    GPU's free memory. Where the holders' use cannot be told it is not subtracted, and the finding says so."""
    import shlex

    from flink_gpu import bindings_file
    from flink_gpu.flink.grammars import format_memory_size as size

    path = bindings_file.bindings_path(coordination_file)
    try:
        found = bindings_file.snapshot(path)
    except (OSError, TimeoutError) as error:
        from flink_gpu.cli._output import error_message

        checkup.add(
            "note",
            "gpu-state",
            f"Cannot read the bindings file {path} ({error_message(error)}): the bindings' memory requests "
            "are not checked against the GPUs' free memory.",
            None,
            resource=name,
        )
        return
    check_orphans(checkup, name, found)
    per_gpu: "dict[str, dict[str, list[CoordinationEntry]]]" = {}
    for entry in found.entries:
        if entry.alive:
            per_gpu.setdefault(entry.index, {}).setdefault(entry.holder_key, []).append(entry)
    for state in states:
        index = state.gpu_index
        holders = per_gpu.get(index, {})
        asking = [(entries[0].holder, _request(entries)) for entries in holders.values() if _request(entries)]
        if not asking:
            continue
        users = _memory_users(holders)
        requested = sum(user.requested for user in users.values())
        requests = ", ".join(f"{holder}: {size(bytes_)}" for holder, bytes_ in asking[:_REQUESTS_SHOWN])
        if len(asking) > _REQUESTS_SHOWN:
            requests += f" and {plural(len(asking) - _REQUESTS_SHOWN, 'more holder')}"
        free = state.memory_free
        if free is None:
            checkup.add(
                "note",
                "gpu-state",
                f"GPU {index}: its bindings request {size(requested)} of its memory ({requests}), but NVML did "
                "not read its free memory: doctor cannot tell whether the requests still fit.",
                None,
                resource=name,
            )
            continue
        untold = _holders_use(state, users)
        needed = sum(max(0, user.requested - user.used) for user in users.values())
        subtracted = requested - needed
        if needed <= free:
            checkup.add(
                "ok",
                "gpu-state",
                f"GPU {index}: the memory its bindings request ({size(requested)}"
                + (f", {size(needed)} of it not yet in use by their holders" if subtracted else "")
                + f") fits in its {size(free)} free.",
                None,
                resource=name,
            )
            continue
        message = f"GPU {index}: its bindings request {size(requested)} of its memory ({requests})"
        if subtracted:
            message += f"; their holders already use {size(subtracted)} of that, so {size(needed)} more is needed"
        message += f", but only {size(free)} is free: a holder that allocates what it asked for may run out of memory."
        if untold:
            what = (
                "Not all that the holders' own processes use of it could be told"
                if subtracted
                else "What the holders' own processes use of it could not be told"
            )
            message += (
                f" {what} ({'; '.join(untold)}), so {'that part' if subtracted else 'it'} was not subtracted: "
                "the requests may still fit."
            )
        checkup.add(
            "warning",
            "gpu-state",
            message,
            "Something that is not bound uses the GPU's memory, or a binding uses more than it asked for: find it "
            f"with `nvidia-smi -i {index}` (the GPU's processes and their memory) and "
            f"`flink-gpu list --file {shlex.quote(coordination_file)}` (each binding's request, and the processes "
            "of no holder), then stop it; or lower the requests (the `memory` of bind_gpus or bind), or bind "
            "fewer holders to the GPU.",
            resource=name,
        )


def check_orphans(checkup: Checkup, name: str, found: "BindingSnapshot") -> None:
    """A warning per orphaned worker of the bindings file ``found`` (its TaskManager gone, it still runs: its
    binding counts for nothing, what it allocated is not free), and one note on the workers of other PID
    namespaces, whose TaskManagers this namespace cannot tell alive or gone."""
    from flink_gpu.base.gpu_index import sort_indices
    from flink_gpu.bindings_file import memory_request, orphan_text

    for pid, entries in found.orphans().items():
        gpus = sort_indices({entry.index for entry in entries})
        checkup.add(
            "warning",
            "gpu-state",
            f"{orphan_text(pid, entries[0].taskmanager, gpus, memory_request(entries))}: no bind counts its binding "
            "any longer, but what it allocated there is not free.",
            f"End it: kill {pid}.",
            resource=name,
        )
    workers: "dict[str, list[CoordinationEntry]]" = {}
    for entry in found.unjudged_workers():
        workers.setdefault(entry.holder_key, []).append(entry)
    if workers:
        named = "; ".join(
            f"pid {lines[0].pid} of PID namespace {lines[0].namespace} (GPU "
            f"{', '.join(sort_indices({line.index for line in lines}))}) for TaskManager pid {lines[0].taskmanager}"
            for lines in workers.values()
        )
        checkup.add(
            "note",
            "gpu-state",
            f"{plural(len(workers), 'worker')} of another PID namespace {'binds' if len(workers) == 1 else 'bind'} "
            f"GPUs for a TaskManager there ({named}): orphaned? cannot tell from this PID namespace; a binding "
            "counts while its worker holds its lease, even once its TaskManager is gone.",
            "`flink-gpu doctor` or `flink-gpu list` in the worker's PID namespace names an orphan and how to end it.",
            resource=name,
        )


def _holders_use(state: "DeviceState", users: "dict[str, _MemoryUser]") -> "list[str]":
    """Sets each user's ``used`` from the processes NVML lists on the GPU (a process counts to the nearest
    user it is or descends from); what could not be told, one phrase each."""
    if not (state.processes_known and state.processes_read):
        return ["NVML gives no permission to list the GPU's processes"]
    untold = [user.why for user in users.values() if user.why is not None and user.requested]
    by_pid = {user.pid: user for user in users.values() if user.pid is not None}
    hidden = []
    counted: "set[int]" = set()  # a process NVML lists as compute and graphics uses its memory once
    for process in state.processes:
        pid, used = process.pid, process.used_memory
        if pid in counted:
            continue
        counted.add(pid)
        if not process.visible:
            hidden.append(pid)
            continue
        nearest = _nearest_user(pid, set(by_pid))
        if nearest is None:
            continue
        if used is None:
            by_pid[nearest].unread.append(pid)
        else:
            by_pid[nearest].used += used
    unread = sorted(pid for user in by_pid.values() if user.requested for pid in user.unread)
    if unread:
        untold.append(f"NVML gives no used memory for pid {', '.join(map(str, unread))}")
    if hidden:
        untold.append(
            f"NVML lists pid {', '.join(map(str, hidden))}, which this PID namespace cannot see: it may be a holder's"
        )
    return untold
