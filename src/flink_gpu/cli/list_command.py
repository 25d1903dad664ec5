"""``flink-gpu list``: the GPUs, their holders in the coordination file, their bindings under each TaskManager
and their state, as tables or ``--json``. How a person sees it (readings, names, width, colour, ``--watch``)
is list_view.py's."""

from __future__ import annotations

import os

from flink_gpu.cli import UsageError, list_view
from flink_gpu.cli._output import (
    document,
    emit_json,
    error_message,
    gib,
    plural,
    process_cmdline,
    short_command,
    table,
)
from flink_gpu.cli.coordination_command import OTHER_NAMESPACE, entry_cmdline, entry_command, unparsable_json
from flink_gpu.cli.coordination_file import CoordinationFile, print_note, resolve
from flink_gpu.flink.script_protocol import sort_indices

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace
    from typing import Any, Callable, Iterator

    from flink_gpu.coordination import CoordinationEntry, CoordinationSnapshot
    from flink_gpu.nvml import Device, Library, Topology


def run(args: Namespace) -> int:
    if args.watch is not None:
        if args.json:
            raise UsageError(
                "--watch redraws tables for a person; for JSON, run `flink-gpu list --json` as often as needed."
            )
        return list_view.watch(lambda: list_gpus(args), args.watch)
    return list_gpus(args)


def _device_rows(gpus: "list[dict[str, Any]]", holders_known: bool) -> "Iterator[list[Any]]":
    """The rows of the device table: a GPU in MIG mode as a row of its own (no memory, no holder:
    its units are handed out) with its MIG units indented under it (docs/design.md §9.2)."""
    parent = None
    for g in gpus:
        holder = _holder_text(g) if holders_known else "?"
        if "parent_index" not in g:
            yield [g["index"], g["uuid"], g["name"], gib(g["memory_total"]), g["pci_bus_id"], holder]
            continue
        if g["parent_index"] != parent:
            parent = g["parent_index"]
            yield [str(parent), g["parent_uuid"], f"{g['name']} (MIG)", "", g["pci_bus_id"], ""]
        yield [
            f"  {g['index']}",
            g["uuid"],
            f"MIG gi {g['mig_gi']} ci {g['mig_ci']}",
            gib(g["memory_total"]),
            g["pci_bus_id"],
            holder,
        ]


def _gpu_document(
    nvml: Library,
    device: Device,
    live: "dict[str, list[CoordinationEntry]]",
    stale: "dict[str, list[CoordinationEntry]]",
    states: "dict[str, dict[str, Any]]",
    bindings: "dict[str, Any]",
    requested: "dict[str, int]",
) -> "dict[str, Any]":
    """One GPU of ``list --json``: the device, its holders, its state and its readings."""
    index = device.gpu_index
    return {
        "index": index,
        "uuid": device.uuid,
        "name": device.name,
        # the enumeration's total; where it read none, the state's reading (merged below)
        "memory_total": device.memory_total,
        # what the live holders of the bindings file request of it (None: that file was not read)
        "memory_requested": None if bindings["error"] is not None else requested.get(index, 0),
        "pci_bus_id": device.pci_bus_id,
        "minor_number": device.minor_number,
        "persistence_mode": list_view.persistence_mode(device),
        **(
            {}
            if device.mig_slot is None
            else {  # a MIG unit (docs/design.md §9.2)
                "parent_index": str(device.parent_index),
                "parent_uuid": device.parent_uuid,
                "mig_slot": device.mig_slot,
                "mig_gi": device.mig_gi,
                "mig_ci": device.mig_ci,
            }
        ),
        "holders": [
            {
                "pid": e.pid,
                "cmdline": entry_cmdline(e),
                "command": entry_command(e.pid, entry_cmdline(e)),
                "liveness_known": e.liveness_known,
                "ours": e.ours,
                "namespace": e.namespace,
            }
            for e in live.get(index, [])
        ],
        "stale_holders": [e.pid for e in stale.get(index, [])],
        **states.get(index, _NO_STATE),
        **list_view.readings(nvml, index),
    }


def _state_table(gpus: "list[dict[str, Any]]", width: "int | None", style: Any) -> str:
    """The second table of ``list``: each GPU's health, readings, locality and processes."""
    return table(
        ["GPU", "HEALTH", "UTIL", "MEMORY USED", "TEMP", "POWER", "NUMA", "CPUS", "PROCESSES"],
        (
            [
                g["index"],
                g["health"],
                list_view.reading_text(g, "utilization", "%"),
                gib(g["memory_used"]),
                list_view.reading_text(g, "temperature", "C"),
                list_view.reading_text(g, "power", "W"),
                g["numa_node"],
                g["cpu_affinity"],
                _processes_text(g),
            ]
            for g in gpus
        ),
        width=width,
        shrink=8,
        style=style,
        optional=(7, 6),
    )


def _print_holders(
    file: CoordinationFile,
    snapshot: "CoordinationSnapshot | None",
    snapshot_error: "str | None",
    stale: "dict[str, list[CoordinationEntry]]",
    unknown: "list[str]",
) -> None:
    """What ``list`` says of the coordination file: where it is, its dead and unknown holders, its bad lines."""
    print_note(file)
    if snapshot is None:
        print(f"Holders unknown: {snapshot_error}")
    elif snapshot.exists:
        print(f"Holders from the coordination file {file.named()}.")
        stale_count = sum(len(pids) for pids in stale.values())
        if stale_count:
            print(
                f"  {plural(stale_count, 'entry', 'entries')} of dead processes (reclaimable); "
                f"`flink-gpu coordination clean{file.flags}` removes "
                f"{'it' if stale_count == 1 else 'them'}."
            )
        _print_unknown_liveness(snapshot, file)
        for line in snapshot.unparsable:
            print(f"  line {line.line_number} cannot be parsed (its GPU is never reclaimed): {line.text!r}")
        if unknown:
            print(f"  entries name GPU(s) this host does not have: {', '.join(unknown)}")


def list_gpus(args: Namespace) -> int:
    from flink_gpu import coordination
    from flink_gpu.nvml import open_library

    # before NVML: a configuration that cannot be read is a usage error, whatever the GPUs
    file = resolve(args)
    path = file.path
    nvml = open_library()
    enumeration = nvml.devices()
    devices, skipped = enumeration.devices, enumeration.skipped
    snapshot: "CoordinationSnapshot | None" = None
    snapshot_error = None
    try:
        snapshot = coordination.snapshot(path, timeout=args.timeout)
    except (OSError, TimeoutError) as error:  # the GPUs are still worth listing
        snapshot_error = error_message(error)
    live: "dict[str, list[CoordinationEntry]]" = {}
    stale: "dict[str, list[CoordinationEntry]]" = {}
    if snapshot is not None:
        for entry in snapshot.entries:
            (live if entry.alive else stale).setdefault(entry.index, []).append(entry)
    present = {d.gpu_index for d in devices} | {s.gpu_index for s in skipped}
    unknown = sort_indices(
        {e.index for e in snapshot.entries if e.index not in present} if snapshot is not None else ()
    )

    # read once per process, and what the nvlink health check is judged by: --json always carries it
    topology = nvml.topology(sorted({d.index for d in devices}))
    # only holders whose pid is a pid of ours can be matched with the processes NVML lists
    states = _gpu_states(nvml, {index: [e.pid for e in entries if e.ours] for index, entries in live.items()}, topology)
    bindings, requested = _bindings_view(path, args.timeout, present, _claimed(live))
    gpus = [_gpu_document(nvml, device, live, stale, states, bindings, requested) for device in devices]
    coordination_doc = {
        **file.json_fields(),
        "exists": bool(snapshot and snapshot.exists),
        "error": snapshot_error,
        "unparsable": unparsable_json(snapshot.unparsable if snapshot else ()),
        "unknown_indices": unknown,
    }
    if args.json:
        emit_json(
            document(
                "list",
                nvml={
                    "library_path": nvml.library_path,
                    "driver_version": nvml.driver_version,
                    "notices": list(enumeration.notices),
                },
                gpus=gpus,
                skipped=[{"index": s.gpu_index, "code": s.code, "reason": s.reason} for s in skipped],
                coordination=coordination_doc,
                bindings=bindings,
                topology=_topology_json(topology),
            )
        )
        return 0

    driver = f" (driver {nvml.driver_version})" if nvml.driver_version else ""
    print(
        f"NVML {nvml.library_path}{driver}: {plural(len(devices), 'GPU')}"
        + (f", {len(skipped)} skipped" if skipped else "")
    )
    width = list_view.terminal_width()
    style = _style()
    if snapshot is not None and not (snapshot.exists and (snapshot.entries or snapshot.unparsable)):
        # above the tables, where a person reads "free"
        print()
        print(file.records_nothing(snapshot.exists))
    if gpus:
        print()
        print(
            table(
                ["INDEX", "UUID", "NAME", "MEMORY", "BUS ID", "HOLDER"],
                _device_rows(gpus, snapshot is not None),
                width=width,
                shrink=5,
                style=style,
                optional=(4, 1),
            )
        )  # narrow: the bus id, then the uuid give way (--json has them)
        print()
        print(_state_table(gpus, width, style))
        _print_state_notes(gpus)
        for note in list_view.persistence_notes(gpus):
            print(f"  {note}")
        if args.topology:
            print()
            print(topology_text(topology, {d.index: d.cpu_affinity for d in devices if d.mig_slot is None}))
    if skipped:
        print("\nSkipped devices:")
        for skip in skipped:
            print(f"  {skip.gpu_index}: {skip.reason}")
    for notice in enumeration.notices:
        print(f"\nNote: {notice}")
    print()
    _print_holders(file, snapshot, snapshot_error, stale, unknown)
    _print_bindings(bindings, width, style, gpus)
    return 0


def _style() -> "Callable[[str], str] | None":
    """Colours for the tables' verdicts on a terminal (none for a pipe, or with NO_COLOR)."""
    if not list_view.colour_enabled():
        return None
    return lambda value: list_view.paint(value, list_view.verdict_colour(value))


# -- list: the bindings under their TaskManager (docs/design.md §9.3) ------------------------------


def _claimed(live: "dict[str, list[CoordinationEntry]]") -> "dict[str, list[str]]":
    """Owner (its holder_key: two containers' pid 1 are two owners) -> the GPUs its live coordination
    entries claim, in index order."""
    out: "dict[str, list[str]]" = {}
    for index in sort_indices(live):
        for entry in live[index]:
            out.setdefault(entry.holder_key, []).append(index)
    return out


def _binding_holder_json(name: str, entries: "list[CoordinationEntry]", unjudged: "set[str]") -> "dict[str, Any]":
    """One live holder of the bindings file: a process (``pid``) or a slot (its binding ``threads``);
    ``unjudged``: the holder_keys of workers whose TaskManager's liveness this namespace cannot tell."""
    from flink_gpu import bindings_file as binding

    first = entries[0]
    slot = first.slot
    return {
        "holder": name,
        "slot": slot,
        "pid": None if slot is not None else first.pid,
        "threads": sorted({e.pid for e in entries}) if slot is not None else [],
        "gpus": sort_indices({e.index for e in entries}),
        "holders_per_gpu": first.holders_per_gpu,
        "memory": binding.memory_request(entries),
        "liveness_known": all(e.liveness_known for e in entries),
        "orphaned": None if first.holder_key in unjudged else False,
        "cmdline": entry_cmdline(first) if slot is None else None,
    }


def _taskmanager_order(first: CoordinationEntry) -> "tuple[int, int, int]":
    """Ours by pid, then other namespaces' by namespace and pid, then holders that recorded none (``first``:
    a live entry of the TaskManager's holders)."""
    if first.taskmanager is None:
        return 2, 0, 0
    return (0, 0, first.taskmanager) if first.ours else (1, first.namespace or 0, first.taskmanager)


def _bindings_view(
    path: str, timeout: float, present: "set[str]", claimed: "dict[str, list[str]]"
) -> "tuple[dict[str, Any], dict[str, int]]":
    """The bindings file beside the coordination file ``path``: live holders grouped under the
    TaskManager whose GPUs they bind, a pid of the namespace that wrote the line (``claimed``: what each
    coordination owner holds); and per GPU index, the memory its live holders request (bytes: each holder
    once, its largest line on that GPU; GPUs without a request are left out)."""
    from flink_gpu import bindings_file as binding
    from flink_gpu.base.gpu_index import index_sort_order

    view: "dict[str, Any]" = {
        "path": binding.bindings_path(path),
        "exists": False,
        "error": None,
        "taskmanagers": [],
        "stale": [],
        "orphans": [],
        "unparsable": [],
        "unknown_indices": [],
    }
    try:
        snapshot = binding.snapshot(view["path"], timeout=timeout)
    except (OSError, TimeoutError) as error:  # the GPUs are still worth listing
        view["error"] = error_message(error)
        return view, {}
    # per TaskManager (its taskmanager_key; None: not recorded), per holder (its holder_key), the live lines
    holders: "dict[str | None, dict[str, list[CoordinationEntry]]]" = {}
    orphans = snapshot.orphans()
    orphan_lines = {e.line_number for entries in orphans.values() for e in entries}
    for entry in snapshot.entries:
        if entry.line_number in orphan_lines:
            continue  # not a dead holder's: it still runs (below)
        if entry.alive:
            holders.setdefault(entry.taskmanager_key, {}).setdefault(entry.holder_key, []).append(entry)
        else:
            view["stale"].append(
                {
                    "line_number": entry.line_number,
                    "index": entry.index,
                    "pid": entry.pid,
                    "slot": entry.slot,
                    "taskmanager": entry.taskmanager,
                }
            )
    unjudged = {entry.holder_key for entry in snapshot.unjudged_workers()}
    for taskmanager in sorted(holders, key=lambda key: _taskmanager_order(next(iter(holders[key].values()))[0])):
        rows = [_binding_holder_json(entries[0].holder, entries, unjudged) for entries in holders[taskmanager].values()]
        first = next(iter(holders[taskmanager].values()))[0]
        pid = first.taskmanager
        cmdline = process_cmdline(pid) if pid is not None and first.ours else None
        view["taskmanagers"].append(
            {
                "pid": pid,
                "namespace": None if pid is None else first.namespace,
                "ours": first.ours,
                "cmdline": cmdline,
                "command": None if pid is None else entry_command(pid, cmdline),
                "claimed": [] if taskmanager is None else claimed.get(taskmanager, []),
                "holders": index_sort_order(rows, lambda row: row["gpus"][0]),
            }
        )
    for pid, lines in orphans.items():
        view["orphans"].append(
            {
                "pid": pid,
                "taskmanager": lines[0].taskmanager,
                "gpus": sort_indices({e.index for e in lines}),
                "memory": binding.memory_request(lines),
                "cmdline": entry_cmdline(lines[0]),
            }
        )
    view.update(
        exists=snapshot.exists,
        unparsable=[{"line_number": line.line_number, "text": line.text} for line in snapshot.unparsable],
        unknown_indices=sort_indices({e.index for e in snapshot.entries if e.index not in present}),
    )
    requested: "dict[str, int]" = {}
    for by_holder in holders.values():
        for entries in by_holder.values():
            for index in {e.index for e in entries}:
                request = binding.memory_request(e for e in entries if e.index == index)
                if request:
                    requested[index] = requested.get(index, 0) + request
    return view, requested


def _request_text(holder: "dict[str, Any]") -> str:
    """A holder's memory request as its MEMORY REQUEST cell: "12 GiB" (one GPU), "12 GiB each" (per GPU of
    several), "none"."""
    from flink_gpu.flink.grammars import format_memory_size

    memory = holder["memory"]
    if memory is None:
        return "none"
    return format_memory_size(memory) + (" each" if len(holder["gpus"]) > 1 else "")


def _binding_rows(holders: "list[dict[str, Any]]", memory: bool) -> "Iterator[list[Any]]":
    """``memory``: with the MEMORY REQUEST column (after SHARED), which a view without requests leaves out."""
    for holder in holders:
        if not holder["liveness_known"]:
            command = OTHER_NAMESPACE
        elif holder["slot"] is not None:
            threads = holder["threads"]
            command = f"binding thread{'s' if len(threads) > 1 else ''} {', '.join(map(str, threads))}"
        else:
            command = short_command(holder["cmdline"])
        share = holder["holders_per_gpu"]
        yield [
            holder["holder"],
            ", ".join(holder["gpus"]),
            "alone" if share in (None, 1) else f"up to {share}",
            *([_request_text(holder)] if memory else []),
            command,
        ]


def _requested_lines(gpus: "list[dict[str, Any]]") -> "list[str]":
    """Per GPU of this host that its live holders request memory of: "GPU 0: requested 24 GiB of 80 GiB"
    (of its total as NVML reads it), in index order."""
    from flink_gpu.flink.grammars import format_memory_size

    lines = []
    for gpu in gpus:
        requested = gpu.get("memory_requested")
        if not requested:
            continue
        total = gpu["memory_total"]
        if total is None:
            of = "of an unknown total (NVML did not read the GPU's memory)"
        else:
            of = f"of {format_memory_size(total)}" + (": more than it has" if requested > total else "")
        lines.append(f"GPU {gpu['index']}: requested {format_memory_size(requested)} {of}")
    return lines


def _print_bindings(
    view: "dict[str, Any]",
    width: "int | None" = None,
    style: "Callable[[str], str] | None" = None,
    gpus: "list[dict[str, Any]] | None" = None,
) -> None:
    """The bindings section of ``list``: nothing when there is no bindings file. ``gpus``: the GPU records,
    for the memory each GPU's holders request of its total."""
    if view["error"] is not None:
        print(f"\nBindings unknown: {view['error']}")
        return
    if not view["exists"]:
        return
    print(f"\nBindings from {view['path']} (GPUs bound to the holders inside a TaskManager):")
    if not view["taskmanagers"]:
        print("  no live holder.")
    # a MEMORY REQUEST column only where some holder requests memory
    memory = any(h["memory"] is not None for t in view["taskmanagers"] for h in t["holders"])
    for taskmanager in view["taskmanagers"]:
        if taskmanager["pid"] is None:
            print("  Holders without a recorded TaskManager:")
        else:
            claimed = f"holds GPU {', '.join(taskmanager['claimed'])}" if taskmanager["claimed"] else "holds no GPU"
            where = "" if taskmanager["ours"] else f" of PID namespace {taskmanager['namespace']}"
            name = list_view.taskmanager_name(taskmanager["pid"], taskmanager["cmdline"])
            if name is not None and name != f"TaskManager pid {taskmanager['pid']}":
                # Flink's TaskManager: by its name rather than its java command line
                print(f"  {name} (pid {taskmanager['pid']}{where}, {claimed} in the coordination file)")
            else:
                command = (
                    ""
                    if taskmanager["cmdline"] is None or name is not None
                    else f": {short_command(taskmanager['cmdline'])}"
                )
                print(f"  TaskManager pid {taskmanager['pid']}{where} ({claimed} in the coordination file){command}")
        print(
            table(
                ["HOLDER", "GPU", "SHARED", *(["MEMORY REQUEST"] if memory else []), "COMMAND"],
                _binding_rows(taskmanager["holders"], memory),
                indent="    ",
                width=width,
                shrink=4 if memory else 3,
                style=style,
            )
        )
        unjudged = [h for h in taskmanager["holders"] if h["orphaned"] is None]
        if unjudged:
            one = len(unjudged) == 1
            print(
                f"    {', '.join(h['holder'] for h in unjudged)}: orphaned? cannot tell from this PID namespace; "
                + ("it keeps its GPU while it holds its" if one else "they keep their GPUs while they hold their")
                + f" lease, even once TaskManager pid {taskmanager['pid']} is gone (`flink-gpu list` in PID "
                f"namespace {taskmanager['namespace']} tells)."
            )
    for line in _requested_lines(gpus or []):
        print(f"  {line}")
    from flink_gpu.bindings_file import orphan_text

    for orphan in view["orphans"]:
        text = orphan_text(orphan["pid"], orphan["taskmanager"], orphan["gpus"], orphan["memory"])
        print(f"  {text}: end it (kill {orphan['pid']}).")
    if view["stale"]:
        count = len(view["stale"])
        print(
            f"  {plural(count, 'entry', 'entries')} of dead holders: "
            + (
                "its GPU is free again, and the next bind removes it."
                if count == 1
                else "their GPUs are free again, and the next bind removes them."
            )
        )
    for line in view["unparsable"]:
        print(f"  line {line['line_number']} cannot be parsed (its GPU is never bound): {line['text']!r}")
    if view["unknown_indices"]:
        print(f"  entries name GPU(s) this host does not have: {', '.join(view['unknown_indices'])}")


# a GPU that went missing between the enumeration and the state query: nothing known
_NO_STATE: "dict[str, Any]" = {
    "health": None,
    "findings": [],
    "checks": {},
    "memory_used": None,
    "memory_free": None,
    "numa_node": None,
    "cpu_affinity": None,
    "compute_mode": None,
    "processes_known": False,
    "processes": [],
}


def _gpu_states(nvml: Library, live: "dict[str, list[int]]", topology: Topology) -> "dict[str, dict[str, Any]]":
    """Per GPU index: its state now (docs/design.md §9.1), the nvlink check judged by ``topology``, each
    process on it marked with the flink-gpu holder (a live owner in the coordination file) it belongs to, if
    any."""
    from flink_gpu.gpu.nvml_discovery import process_holders

    belongs = process_holders(nvml, (pid for pids in live.values() for pid in pids))
    static = {device.gpu_index: device for device in nvml.devices().devices}
    result = {}
    for state in nvml.states(os.getpid(), None, topology=topology):
        index = state.gpu_index
        device = static.get(index)
        result[index] = {
            # the state's own reading where the enumeration read no total (it is not in _NO_STATE)
            **({} if device is None or device.memory_total is not None else {"memory_total": state.memory_total}),
            "health": state.health,
            "findings": list(state.findings),
            "checks": {check.name: {"outcome": check.outcome, "finding": check.finding} for check in state.checks},
            "memory_used": state.memory_used,
            "memory_free": state.memory_free,
            "numa_node": device.numa_node if device else None,
            "cpu_affinity": device.cpu_affinity if device else None,
            # a GPU not read in time (health "unknown: ...") has no process list either
            "compute_mode": state.compute_mode,
            "processes_known": state.processes_known and state.processes_read,
            "processes": [
                {
                    "pid": process.pid,
                    "kind": process.kind,
                    "used_memory": process.used_memory,
                    "visible": process.visible,
                    "cmdline": process_cmdline(process.pid) if process.visible else None,
                    "holder": belongs.get((index, process.pid)),
                }
                for process in state.processes
            ],
        }
    return result


def _processes_text(gpu: "dict[str, Any]") -> str:
    if not gpu["processes_known"]:
        if (gpu["health"] or "").startswith("unknown:"):
            return "? (not read in time)"
        return "? (no permission to list them)"
    parts = []
    for process in gpu["processes"]:
        if not process["visible"]:
            parts.append(f"pid {process['pid']} (not visible here)")
            continue
        whose = f"holder pid {process['holder']}" if process["holder"] is not None else "not a flink-gpu holder's"
        parts.append(f"pid {process['pid']} {short_command(process['cmdline'], 30)} ({whose})")
    return "; ".join(parts) or "none"


def _print_state_notes(gpus: "list[dict[str, Any]]") -> None:
    """What the state table cannot say in a cell: why a GPU is unhealthy, invisible pids."""
    for gpu in gpus:
        for finding in gpu["findings"]:
            if finding != gpu["health"]:
                print(f"  GPU {gpu['index']}: {finding}")
    # a GPU whose state was not read (health "unknown: ...") has no checks to speak of
    unchecked = {g["index"]: _unchecked(g) for g in gpus if not (g["health"] or "").startswith("unknown:")}
    # what every GPU shares (a PCIe host's "fabric (not supported)") is said once
    shared = [item for item in next(iter(unchecked.values()), []) if all(item in u for u in unchecked.values())]
    if shared and len(unchecked) > 1:
        which = "Every GPU" if len(unchecked) == len(gpus) else f"GPU {', '.join(unchecked)}"
        print(f"  {which}: not checked: {', '.join(shared)}")
    else:
        shared = []
    for index, items in unchecked.items():
        rest = [item for item in items if item not in shared]
        if rest:
            print(f"  GPU {index}: not checked: {', '.join(rest)}")
    hidden = sorted({p["pid"] for g in gpus for p in g["processes"] if not p["visible"]})
    if hidden:
        print(
            f"  NVML lists pid {', '.join(map(str, hidden))}, which this PID namespace cannot "
            "see (a container sees host pids): busy-gpus counts them as foreign."
        )


def _unchecked(gpu: "dict[str, Any]") -> "list[str]":
    """The health checks not made on a GPU, "<check> (<why>)"."""
    return [
        f"{name} ({check['outcome']})"
        for name, check in gpu["checks"].items()
        if check["outcome"] not in ("ok", "finding")
    ]


def _print_unknown_liveness(snapshot: CoordinationSnapshot, file: CoordinationFile) -> None:
    unknown = snapshot.liveness_unknown
    if unknown:
        them = "it" if len(unknown) == 1 else "them"
        print(
            f"  {plural(len(unknown), 'entry', 'entries')} {OTHER_NAMESPACE} (GPU "
            f"{', '.join(e.index for e in unknown)}): never reclaimed by pid; if the owner is gone, "
            f"`flink-gpu coordination clean --foreign-namespaces{file.flags}` removes {them}."
        )


#: The dead owners of a GPU named by pid in its HOLDER cell; more are counted.
_DEAD_PIDS_SHOWN = 2


def _holder_text(gpu: "dict[str, Any]") -> str:
    holders = gpu["holders"]
    if holders:
        text = ", ".join(
            f"pid {h['pid']}: {h['command'] or '?'}" if h["liveness_known"] else f"pid {h['pid']}: {OTHER_NAMESPACE}"
            for h in holders
        )
        if len(holders) > 1:
            text = "CONFLICT " + text
    else:
        text = "free"
    dead = gpu["stale_holders"]
    if len(dead) > _DEAD_PIDS_SHOWN:  # a cell, not a list: --json has every pid
        text += f" (stale: {len(dead)} dead owners; `flink-gpu coordination clean`)"
    elif dead:
        text += f" (stale: dead pid {', '.join(map(str, dead))})"
    return text


# -- list --topology: how the GPUs are joined (docs/design.md §9.6) -------------------------------------

#: The legend `nvidia-smi topo -m` prints under its matrix, in its words.
TOPOLOGY_LEGEND = (
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)


def topology_text(topology: Topology, cpu_affinity: "dict[int, str | None]") -> str:
    """The matrix as `nvidia-smi topo -m` prints it: a row and a column per GPU, its CPU and NUMA affinity
    ("N/A" where unknown), the legend, and "?" explained where NVML did not say."""
    names = [f"GPU{gpu}" for gpu in topology.gpus]
    header = ["", *names, "CPU Affinity", "NUMA Affinity"]
    rows = [
        [
            name,
            *(f" {cell} " if cell == "X" else cell for cell in cells),
            cpu_affinity.get(gpu) or "N/A",
            "N/A" if numa is None else str(numa),
        ]
        for name, gpu, cells, numa in zip(names, topology.gpus, topology.matrix, topology.numa, strict=True)
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines += ["", "Legend:", "", *TOPOLOGY_LEGEND]
    if any("?" in cells for cells in topology.matrix):
        lines.append("  ?    = Not known: NVML did not say, or not in time")
    lines += [f"  {stall}" for stall in topology.stalls]
    return "\n".join(lines)


def _topology_json(topology: Topology) -> "dict[str, Any]":
    """``list --json``'s "topology": the matrix's GPUs, rows and cells, and per GPU its NVLinks and NUMA node."""
    return {
        "gpus": [str(gpu) for gpu in topology.gpus],
        "matrix": [list(row) for row in topology.matrix],
        "nvlinks": [
            {"known": links.known, "count": links.count, "inactive": links.inactive, "to_switch": links.to_switch}
            for links in topology.nvlinks
        ],
        "numa_nodes": list(topology.numa),
        "stalls": list(topology.stalls),
    }
