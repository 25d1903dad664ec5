"""``flink-gpu coordination show|clean``, ``claim`` and ``release``: the coordination file's entries for people,
and the helpers ``list`` shares to show them (a holder's command). Which file: cli/coordination_file.py."""

from __future__ import annotations

import os
import sys

from flink_gpu.cli import UsageError
from flink_gpu.cli._output import (
    document,
    emit_json,
    owner_description,
    plural,
    process_cmdline,
    table,
)
from flink_gpu.cli.coordination_file import print_note, resolve
from flink_gpu.flink.script_protocol import sort_indices

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace
    from typing import Any, Iterable, Iterator

    from flink_gpu.coordination import CoordinationEntry, UnparsableLine


def run(args: Namespace) -> int:
    if args.command == "coordination":
        return show(args) if args.action == "show" else clean(args)
    if args.command == "claim":
        return claim(args)
    return release(args)


# -- an entry for people and tools (``list`` shows holders with these too) ----------------------------

OTHER_NAMESPACE = "held in another PID namespace, liveness unknown"
#: A held lease proves that some process holds its byte: the holder, or one that opened the lease file.
LEASE_HELD = "lease held by another process, in another PID namespace"


def entry_cmdline(entry: CoordinationEntry) -> "list[str] | None":
    """The argv of the process the line records where it runs in our namespace (None otherwise): a live
    owner's, and a stale line's whose process still runs (its pid with the recorded start time), as `clean`
    shows what it removed."""
    if not entry.ours:
        return None
    if entry.alive:
        return process_cmdline(entry.pid)
    from flink_gpu.coordination import process_start_time

    if entry.start_time is None or process_start_time(entry.pid) != entry.start_time:
        return None  # gone, or its pid is another process's now
    cmdline = process_cmdline(entry.pid)
    return cmdline if process_start_time(entry.pid) == entry.start_time else None  # not a pid reused meanwhile


def _entry_json(entry: CoordinationEntry) -> "dict[str, Any]":
    return {
        "line_number": entry.line_number,
        "index": entry.index,
        "pid": entry.pid,
        "start_time": entry.start_time,
        "alive": entry.alive,
        "state": entry.state,
        "liveness": entry.liveness,
        "liveness_known": entry.liveness_known,
        "ours": entry.ours,
        "namespace": entry.namespace,
        "lease": entry.lease,
        "lease_file": entry.lease_file,
        "cmdline": entry_cmdline(entry),
    }


def entry_command(pid: int, cmdline: "list[str] | None") -> "str | None":
    """A holder for people (``cmdline`` is for tools): a Flink TaskManager by its name, any other process by
    its command line cut short; None without a command line."""
    from flink_gpu.cli.list_view import process_text

    return None if cmdline is None else process_text(pid, cmdline)


def unparsable_json(lines: "Iterable[UnparsableLine]") -> "list[dict[str, Any]]":
    return [{"line_number": line.line_number, "text": line.text} for line in lines]


# -- coordination show / clean -----------------------------------------------------------------


def _entry_rows(entries: "Iterable[CoordinationEntry]") -> "Iterator[list[Any]]":
    for entry in entries:
        state = entry.state if entry.liveness_known else LEASE_HELD if entry.state == "lease held" else OTHER_NAMESPACE
        cmdline = entry_cmdline(entry)
        yield [
            entry.line_number,
            entry.index,
            entry.pid,
            entry.start_time,
            state,
            entry_command(entry.pid, cmdline),
        ]


_ENTRY_HEADERS = ["LINE", "GPU", "PID", "START TIME", "STATE", "COMMAND"]


def show(args: Namespace) -> int:
    from flink_gpu import coordination

    file = resolve(args)
    path = file.path
    snapshot = coordination.snapshot(path, timeout=args.timeout)
    if args.json:
        emit_json(
            document(
                "coordination show",
                **file.json_fields(),
                exists=snapshot.exists,
                entries=[_entry_json(e) for e in snapshot.entries],
                unparsable=unparsable_json(snapshot.unparsable),
            )
        )
        return 0
    print_note(file)
    if not (snapshot.entries or snapshot.unparsable):
        print(file.records_nothing(snapshot.exists))
        return 0
    stale, unknown = snapshot.stale, snapshot.liveness_unknown
    print(
        f"Coordination file {file.named()}: {plural(len(snapshot.entries), 'entry', 'entries')} "
        f"({len(snapshot.entries) - len(stale) - len(unknown)} live, {len(stale)} stale"
        + (f", {len(unknown)} of other PID namespaces with liveness unknown" if unknown else "")
        + ")"
        + (f", {plural(len(snapshot.unparsable), 'unparsable line')}" if snapshot.unparsable else "")
    )
    if snapshot.entries:
        print()
        print(table(_ENTRY_HEADERS, _entry_rows(snapshot.entries)))
    if snapshot.unparsable:
        print("\nUnparsable lines (kept as they are; the GPU they name is never reclaimed):")
        for line in snapshot.unparsable:
            print(f"  line {line.line_number}: {line.text!r}")
    if stale:
        them = "it" if len(stale) == 1 else "them"
        print(
            f"\n{plural(len(stale), 'entry', 'entries')} of dead owners: the next claim that "
            f"needs {them} reclaims {them}; `flink-gpu coordination clean{file.flags}` removes {them} now."
        )
    if unknown:
        them = "it" if len(unknown) == 1 else "them"
        print(
            f"\n{plural(len(unknown), 'entry', 'entries')} {OTHER_NAMESPACE}: never reclaimed by pid; "
            f"if the owner is gone, `flink-gpu coordination clean --foreign-namespaces{file.flags}` removes {them}."
        )
    return 0


def clean(args: Namespace) -> int:
    from flink_gpu import coordination

    file = resolve(args, writes=True)
    path = file.path
    foreign = args.foreign_namespaces
    exists = os.path.lexists(path)
    result = coordination.clean_stale(path, timeout=args.timeout, other_namespaces=foreign) if exists else None
    removed = result.removed if result else ()
    unparsable = result.unparsable if result else ()
    if args.json:
        emit_json(
            document(
                "coordination clean",
                **file.json_fields(),
                exists=exists,
                foreign_namespaces=foreign,
                removed=[_entry_json(e) for e in removed],
                unparsable=unparsable_json(unparsable),
            )
        )
        return 0
    print_note(file)
    if not exists:
        print(file.records_nothing(exists=False, outcome="nothing to clean"))
        return 0
    dead = [e for e in removed if not e.alive]
    unknown = [e for e in removed if e.alive]  # --foreign-namespaces
    if dead:
        print(f"Removed {plural(len(dead), 'stale entry', 'stale entries')} from {file.named()}:")
        print(table(_ENTRY_HEADERS, _entry_rows(dead), indent="  "))
    if unknown:
        freed = sort_indices({e.index for e in unknown})  # one GPU may have had several holders' lines
        print(
            f"Removed {plural(len(unknown), 'entry', 'entries')} {OTHER_NAMESPACE}, from {file.named()} "
            f"(--foreign-namespaces; GPU{'' if len(freed) == 1 else 's'} {', '.join(freed)} may be claimed "
            "again):"
        )
        print(table(_ENTRY_HEADERS, _entry_rows(unknown), indent="  "))
    if not removed:
        print(f"No stale entry in {file.named()}" + (" and none of another PID namespace." if foreign else "."))
    for line in unparsable:
        print(
            f"Kept unparsable line {line.line_number}: {line.text!r} (fix or delete it by hand; "
            "its GPU is never reclaimed)"
        )
    return 0


# -- claim / release ---------------------------------------------------------------------------


def _owner(args: Namespace) -> int:
    """The owner: --owner, else the parent of this command (this process exits right away)."""
    from flink_gpu.coordination import process_start_time

    owner = os.getppid() if args.owner is None else args.owner
    if process_start_time(owner) is None and args.command == "claim":
        raise UsageError(f"--owner {owner}: no such (live) process; GPUs claimed for it would be reclaimable at once.")
    return owner


def claim(args: Namespace) -> int:
    from flink_gpu import coordination, policy
    from flink_gpu.errors import NotEnoughGpusError
    from flink_gpu.nvml import open_library

    owner = _owner(args)
    file = resolve(args, writes=True)
    path = file.path
    nvml = open_library()
    # the driver's one discovery (design.md §9.1): never an unhealthy GPU, degraded and busy ones last; only
    # the GPUs it reads are opened, only those it could hand out enumerated
    outcome = policy.discover(
        nvml,
        args.amount,
        None,
        owner=owner,
        coordination_file=path,
        lock_timeout=args.timeout,
        known_devices=(),
        topology=args.topology,
    )
    uuids = {d.gpu_index: d.uuid for d in outcome.devices}
    units = {d.gpu_index for d in outcome.devices if d.mig_slot is not None}
    states, left_out = outcome.states, outcome.left_out
    health = {state.gpu_index: state.health for state in states}
    for gpu in left_out:
        print(f"flink-gpu claim: WARNING: GPU {gpu.index} left out: {gpu.why}", file=sys.stderr)
    coordination.log_notices(outcome.notices)
    if outcome.shortage is not None:
        raise NotEnoughGpusError(outcome.shortage)
    got = sort_indices(outcome.chosen)
    busy = {state.gpu_index: state.busy_reason for state in states if state.busy}
    for index in got:
        if index in busy:
            print(f"flink-gpu claim: WARNING: GPU {index} is {busy[index]} (too few idle GPUs)", file=sys.stderr)
    if args.json:
        emit_json(
            document(
                "claim",
                **file.json_fields(),
                amount=args.amount,
                owner={"pid": owner, "cmdline": process_cmdline(owner)},
                gpus=[{"index": i, "uuid": uuids.get(i), "health": health.get(i)} for i in got],
                left_out=[{"index": gpu.index, "reason": gpu.why} for gpu in left_out],
            )
        )
        return 0
    print_note(file)
    if not got:
        print("Claimed no GPU (N is 0).")
        return 0
    print(f"Claimed GPU {', '.join(got)} for {owner_description(owner)} in {file.named()}.")
    print(table(["GPU", "UUID", "HEALTH"], ([i, uuids.get(i), health.get(i)] for i in got), indent="  "))
    print(f"They stay claimed until `flink-gpu release{_owner_flag(args)}{file.flags}` or until pid {owner} exits.")
    if len(got) > 1 and units & set(got):
        # CUDA uses one MIG instance per process (design.md §9.2): one line per process to start
        print("CUDA uses one MIG instance per process: give each process one of")
        for i in got:
            print(f"  CUDA_VISIBLE_DEVICES={uuids.get(i) or i}")
    else:
        print(f"CUDA_VISIBLE_DEVICES={','.join(uuids.get(i) or i for i in got)}")
    return 0


def _owner_flag(args: Namespace) -> str:
    return "" if args.owner is None else f" --owner {args.owner}"


def release(args: Namespace) -> int:
    from flink_gpu import coordination

    owner = _owner(args)
    file = resolve(args, writes=True)
    released = coordination.release(owner, path=file.path, indices=args.gpus, timeout=args.timeout)
    if args.json:
        emit_json(
            document(
                "release",
                **file.json_fields(),
                owner={"pid": owner, "cmdline": process_cmdline(owner)},
                released=list(released),
            )
        )
        return 0
    print_note(file)
    if released:
        print(f"Released GPU {', '.join(released)} of {owner_description(owner)} in {file.named()}.")
    else:
        print(f"{owner_description(owner)} held no GPU{'' if args.gpus is None else ' of those'} in {file.named()}.")
    return 0
