"""Coordination between the TaskManagers of a host: needed or not, on or off, its file usable."""

from __future__ import annotations

import os
import shlex

from flink_gpu.cli._output import plural
from flink_gpu.cli.doctor_command.cleaners import check_age_cleaners
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.cli.doctor_command.gpu_count import open_nvml
from flink_gpu.cli.doctor_command.taskmanagers import taskmanagers_per_host
from flink_gpu.coordination import DEFAULT_PATH, companion_problems, snapshot
from flink_gpu.deploy.requests import KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX
from flink_gpu.errors import NvmlError
from flink_gpu.flink.framework import amount_key, system_config_key
from flink_gpu.flink.script_protocol import ENABLE_COORDINATION_FLAG, ScriptArgs
from flink_gpu.gpu.options import GPUDriverOptions
from flink_gpu.gpu.settings import GPUDriverSettings

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from typing import Sequence

    from flink_gpu.coordination import CoordinationEntry, CoordinationSnapshot
    from flink_gpu.nvml import DeviceState, GpuLink, Topology


def check_coordination(
    checkup: Checkup,
    name: str,
    settings: GPUDriverSettings,
    script_args: "ScriptArgs | None",
    amount: "int | None",
    count: "int | None",
) -> None:
    """``script_args`` is None for a custom script, whose coordination doctor cannot see."""
    per_host, source, host = taskmanagers_per_host(checkup)
    if script_args is None:  # a custom script: whether it coordinates is its own business
        if per_host == 1:
            checkup.add(
                "ok",
                "coordination",
                f"One TaskManager per host (from {source}): coordination is not needed.",
                resource=name,
            )
        elif per_host is not None:
            checkup.add(
                "note",
                "coordination",
                f"{per_host} TaskManagers share "
                f"{'host ' + host if host else 'a host'} (from {source}); doctor cannot "
                "tell whether the custom discovery script gives them different GPUs.",
                resource=name,
            )
        return
    if not script_args.coordination_mode:
        fix = (
            f"Add {ENABLE_COORDINATION_FLAG} to "
            f"{settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_ARG)} (every TaskManager of a "
            f"host then shares {DEFAULT_PATH} and gets different GPUs)."
        )
        if per_host is not None and per_host > 1:
            where = f"host {host}" if host else "a host"
            checkup.add(
                "error",
                "coordination",
                f"{per_host} TaskManagers share {where} "
                f"(from {source}), but coordination is off: each one takes the first "
                f"GPU(s) of the host, so they all get the same ones.",
                fix,
                resource=name,
            )
        elif per_host == 1:
            checkup.add(
                "ok",
                "coordination",
                f"One TaskManager per host (from {source}): coordination is not needed.",
                resource=name,
            )
        elif _deployment_isolates(checkup, name):
            checkup.add(
                "note",
                "coordination",
                "Coordination is off; on Kubernetes/YARN each "
                "TaskManager container is given its own GPUs, so it is not needed there.",
                resource=name,
            )
        else:
            checkup.add(
                "note",
                "coordination",
                "Coordination is off, and doctor cannot tell how "
                "many TaskManagers share a host (no conf/workers file). If several do, "
                "they all get the same first GPU(s).",
                fix + " Or tell doctor with --taskmanagers-per-host N.",
                resource=name,
            )
        return
    path = script_args.coordination_file
    checkup.add("ok", "coordination", f"Coordination mode is on (file {path}).", resource=name)
    if per_host is not None and amount is not None and count is not None and per_host * amount > count:
        checkup.add(
            "error",
            "gpu-count",
            f"{per_host} TaskManagers per host (from {source}) "
            f"× {amount} GPU(s) each > the host's {count} GPUs: the last TaskManagers "
            "get none.",
            f"Lower {amount_key(name)} or the number of TaskManagers per host.",
            resource=name,
        )
    found = check_coordination_file(checkup, name, path)
    if found is not None:
        check_holder_links(checkup, name, found)
    check_age_cleaners(checkup, name, path)


def _deployment_isolates(checkup: Checkup, name: str) -> bool:
    """Whether Kubernetes or YARN gives each TaskManager container its own GPUs."""
    return any(
        (checkup.config.get_string(system_config_key(name, suffix)) or "").strip()
        for suffix in (KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX)
    )


def check_coordination_file(checkup: Checkup, name: str, path: str) -> "CoordinationSnapshot | None":
    """The file's problems; its snapshot, None where it does not exist or cannot be read."""
    # always named: a bare `coordination clean` reads the shell's $FLINK_CONF_DIR, maybe another cluster's
    flag = f" --file {shlex.quote(path)}"
    for problem in companion_problems(path):  # another user's file beside it is refused by every claim and bind
        checkup.add(
            "error",
            "coordination-file",
            problem,
            "Remove that file if it is nobody's, then create the set before the workers start (docs/SECURITY.md, "
            "Permissions).",
            resource=name,
        )
    if not os.path.lexists(path):
        directory = os.path.dirname(os.path.abspath(path)) or "/"
        if not os.access(directory, os.W_OK | os.X_OK):
            checkup.add(
                "error",
                "coordination-file",
                f"The coordination file {path} does not "
                f"exist and {directory} is not writable for this user, so it cannot be "
                "created.",
                "Create it for the TaskManagers' user and group, never writable by every user (install -m 0660 "
                f"-o <user> -g <group> /dev/null {shlex.quote(path)}; docs/SECURITY.md, Permissions), or choose "
                "another --coordination-file.",
                resource=name,
            )
        return None
    try:
        found = snapshot(path, timeout=2.0)
    except (OSError, TimeoutError) as error:
        checkup.add(
            "error",
            "coordination-file",
            f"The coordination file cannot be used: {error}",
            "Make it a regular file that the TaskManagers' user can read and write.",
            resource=name,
        )
        return None
    if not os.access(path, os.R_OK | os.W_OK):
        checkup.add(
            "error",
            "coordination-file",
            f"The coordination file {path} is not readable and writable for this user.",
            f"Give the TaskManagers' group write permission (chgrp <group> {shlex.quote(path)}; chmod 0660 "
            f"{shlex.quote(path)}), or run the TaskManagers as its owner.",
            resource=name,
        )
    # a line without a lease is a discovery script's (the stock one, flink-gpu-discovery) or `flink-gpu claim`'s:
    # Flink's Java plugin never releases, so its TaskManagers' lines outlive every stop-cluster.sh
    never_released = [e for e in found.stale if e.lease is None]
    if never_released:
        checkup.add(
            "note",
            "coordination-file",
            f"{plural(len(never_released), 'entry', 'entries')} of {path} (GPU "
            f"{', '.join(e.index for e in never_released)}) {'is' if len(never_released) == 1 else 'are'} of "
            "ended holders that never release (the discovery of Flink's GPU plugin, `flink-gpu claim`): normal "
            "after stop-cluster.sh; a claim takes such a GPU back when no free one is left.",
            resource=name,
        )
    # a holder with a lease releases when it ends normally: its lines left behind mean it did not
    unreleased = [e for e in found.stale if e.lease is not None]
    if unreleased:
        checkup.add(
            "warning",
            "coordination-file",
            f"{plural(len(unreleased), 'entry', 'entries')} of "
            f"{path} belong to processes that ended without releasing (GPU {', '.join(e.index for e in unreleased)}); "
            "they are reclaimed when GPUs run short.",
            f"flink-gpu coordination clean{flag}",
            resource=name,
        )
    unknown = found.liveness_unknown
    if unknown:
        checkup.add(
            "note",
            "coordination-file",
            f"{plural(len(unknown), 'entry', 'entries')} of "
            f"{path} {'is' if len(unknown) == 1 else 'are'} held in another PID namespace, "
            f"liveness unknown (GPU {', '.join(e.index for e in unknown)}): written without "
            "a lease (flink-gpu-discovery, `flink-gpu claim`), so this "
            "namespace cannot tell whether the owner still runs, and never reclaims them.",
            f"If their owners are gone: flink-gpu coordination clean --foreign-namespaces{flag}",
            resource=name,
        )
    for line in found.unparsable:
        checkup.add(
            "warning",
            "coordination-file",
            f"Line {line.line_number} of {path} cannot be parsed ({line.text!r}); the GPU it names is never reclaimed.",
            f"Delete or correct that line of {path}.",
            resource=name,
        )
    return found


def check_holder_links(checkup: Checkup, name: str, found: CoordinationSnapshot) -> None:
    """A WARN per live holder whose GPUs are joined worse (by the one choice's measure: fewer NVLinks summed over
    their pairs, else a worse PCIe level) than the best joined set of as many among the GPUs no other live holder
    has and that are healthy and idle (a claim never trades a class for a link) (docs/cli.md,
    "`list --topology`"): GPUs a claim with ``topology: prefer`` would have taken."""
    held: "dict[str, list[CoordinationEntry]]" = {}
    for entry in found.entries:
        if entry.alive:
            held.setdefault(entry.holder_key, []).append(entry)
    if not any(len({e.index for e in entries}) > 1 for entries in held.values()):
        return  # no holder of two or more: no topology is read
    opened = open_nvml(checkup, None)
    if isinstance(opened, NvmlError):
        return  # the gpu-count check said so
    nvml, enumeration = opened
    whole = sorted({d.index for d in enumeration.devices if d.mig_slot is None})
    taken = {e.index for entries in held.values() for e in entries}
    topology: "Topology | None" = None
    idle: "set[int]" = set()
    for entries in held.values():
        mine = sorted({int(e.index) for e in entries if e.index.isdigit() and int(e.index) in whole})
        if len(mine) < 2 or len(mine) != len({e.index for e in entries}):
            continue  # one GPU, or a MIG unit or a GPU this host lacks among them
        if topology is None:
            topology = nvml.topology(whole)
            # a free GPU counts only where a claim would take it before the holder's: healthy, nothing on it
            idle = {s.index for s in nvml.states(os.getpid(), None, None, topology=topology) if idle_and_ok(s)}
        among = [gpu for gpu in whole if gpu in mine or (str(gpu) not in taken and gpu in idle)]
        best = topology.best_set(among, len(mine))
        if not topology.joined_better(best, mine):
            continue
        first = entries[0]
        who = f"pid {first.pid}" + ("" if first.ours else f" of PID namespace {first.namespace}")
        checkup.add(
            "warning",
            "coordination-file",
            f"{who} holds GPU {', '.join(map(str, mine))}, {_links_text(topology, mine)}, while GPU "
            f"{', '.join(map(str, best))}, free to it, are {_links_text(topology, best)}.",
            "Restart that holder when convenient: its next claim (topology: prefer, the default) takes the best "
            "joined set of its class.",
            resource=name,
        )


def _pairs(gpus: "Sequence[int]") -> "list[tuple[int, int]]":
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]


def idle_and_ok(state: "DeviceState") -> bool:
    """A whole GPU of the best class to any claimer: healthy, no process on it."""
    return state.mig_slot is None and state.health == "ok" and state.processes_known and not state.processes


def _links_text(topology: Topology, gpus: "Sequence[int]") -> str:
    """'joined by NV4' (two GPUs), 'joined by NV4 and PHB' (their pairs' cells, best first)."""
    links = sorted({topology.between(a, b) for a, b in _pairs(gpus)}, key=lambda link: _joined_key(link))
    cells = list(dict.fromkeys(link.cell for link in links))
    return "joined by " + (cells[0] if len(cells) == 1 else ", ".join(cells[:-1]) + " and " + cells[-1])


def _joined_key(link: GpuLink) -> "tuple[int, int]":
    return -link.nvlinks, link.pcie_level
