"""``flink-gpu list`` as a monitor: live readings, TaskManagers by name, the terminal's width and colour,
``--watch``.

The data is list_command.py's (holders, bindings, state); this module decides how a person sees it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from typing import Any, Callable

    from flink_gpu.nvml import Device, Library

#: The readings ``list`` shows next to each GPU's holders: (JSON field, NVML metric, unit).
READINGS = (("utilization", "utilization", "%"), ("temperature", "temperature", "C"), ("power", "power", "W"))

_TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"


# -- live readings --------------------------------------------------------------------------------


def readings(nvml: "Library", index: str) -> "dict[str, int | None]":
    """Utilization (%), temperature (°C) and power (W) of GPU ``index`` now; None where NVML cannot say."""
    values = {}
    for field, metric, _ in READINGS:
        value = nvml.read_metric(index, metric)
        values[field] = None if value < 0 else value
    return values


# -- persistence mode ------------------------------------------------------------------------------

#: Why a GPU without persistence mode is worth a line: what ``list`` and ``doctor`` say of it.
PERSISTENCE_OFF = (
    "persistence mode is off: the first claim on each GPU may take seconds (without it the "
    "driver initialises a GPU when a process first asks for its handle, and tears it down "
    "when the last process lets go)"
)
#: How to turn it on (root; it is a setting of the GPU, which flink-gpu never changes).
PERSISTENCE_FIX = "Enable it with `nvidia-persistenced` (or `nvidia-smi -pm 1`, as root)."


def persistence_mode(device: "Device | None") -> "str | None":
    """A device's persistence mode as ``list --json`` gives it: "enabled", "disabled", None (unknown)."""
    mode = device.persistence_mode if device is not None else None
    return None if mode is None else "enabled" if mode else "disabled"


def persistence_notes(gpus: "list[dict[str, Any]]") -> "list[str]":
    """The lines under ``list``'s state table: the GPUs whose persistence mode is off, and those whose
    mode the driver cannot say."""
    notes = []
    off = [g["index"] for g in gpus if g["persistence_mode"] == "disabled"]
    unknown = [g["index"] for g in gpus if g["persistence_mode"] is None]
    if off:
        notes.append(f"GPU {', '.join(off)}: {PERSISTENCE_OFF}. {PERSISTENCE_FIX}")
    if unknown:
        notes.append(f"GPU {', '.join(unknown)}: persistence mode unknown (the driver cannot say).")
    return notes


def reading_text(gpu: "dict[str, Any]", field: str, unit: str) -> "str | None":
    value = gpu.get(field)
    return None if value is None else f"{value}{unit}" if unit == "%" else f"{value} {unit}"


# -- TaskManagers by name -------------------------------------------------------------------------


def taskmanager_name(pid: int, argv: "list[str] | None") -> "str | None":
    """ "TaskManager <resource id>" (Flink's, from ``-Dtaskmanager.resource-id`` or the
    ``config.yaml`` of its ``--configDir``), "TaskManager <host>:<port>" when those are configured,
    else "TaskManager pid <pid>"; None when ``argv`` is not a Flink TaskManager's."""
    if not argv or _TASKMANAGER_MAIN not in argv:
        return None
    dynamic = _dynamic_properties(argv)
    config = _config_of(pid, argv)
    resource_id = (
        dynamic.get("taskmanager.resource-id")
        or config.get("taskmanager.resource-id")
        or _resource_id_from_log(pid, argv)
    )
    if resource_id:
        return f"TaskManager {resource_id}"
    host = dynamic.get("taskmanager.host") or config.get("taskmanager.host")
    port = dynamic.get("taskmanager.rpc.port") or config.get("taskmanager.rpc.port")
    if host and port and str(port).isdigit():
        return f"TaskManager {host}:{port}"
    return f"TaskManager pid {pid}"


def _dynamic_properties(argv: "list[str]") -> "dict[str, str]":
    """Flink's ``-D key=value`` / ``-Dkey=value`` arguments after the main class."""
    found = {}
    after = argv[argv.index(_TASKMANAGER_MAIN) + 1 :]
    for i, arg in enumerate(after):
        text = after[i + 1] if arg == "-D" and i + 1 < len(after) else arg[2:] if arg.startswith("-D") else None
        if text and "=" in text:
            key, _, value = text.partition("=")
            found[key.strip()] = value.strip()
    return found


_STARTING = "Starting TaskManager with ResourceID: "
_LOG_HEAD = 1 << 18  # the line comes within the first few hundred lines of the log


#: The most ``list`` reads of a TaskManager's configuration file (Flink's are a few KiB).
_CONFIG_MOST = 1 << 20


def _holders_file_head(pid: int, path: str, limit: int) -> "bytes | None":
    """The first ``limit`` bytes of ``path``, a file the holder ``pid`` names in its argv: only a plain
    file of data that the holder's user (or root) owns, never the kernel's (``/proc/kmsg``), a FIFO
    or a device (docs/SECURITY.md says what and why)."""
    from flink_gpu.base.regular_files import read_named_file_head

    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    return read_named_file_head(path, limit, (uid, 0))


def _resource_id_from_log(pid: int, argv: "list[str]") -> "str | None":
    """The resource id a TaskManager generated for itself, from its log (``-Dlog.file=``, set by
    Flink's bin/ scripts): "Starting TaskManager with ResourceID: <id>"."""
    paths = [arg[len("-Dlog.file=") :] for arg in argv if arg.startswith("-Dlog.file=")]
    if not paths:
        return None
    data = _holders_file_head(pid, paths[-1], _LOG_HEAD)
    if data is None:
        return None
    head = data.decode("utf-8", "replace")
    found = head.find(_STARTING)
    if found < 0:
        return None
    resource_id = head[found + len(_STARTING) :].split("\n", 1)[0].strip()
    return resource_id if resource_id and resource_id.isprintable() else None


def _config_of(pid: int, argv: "list[str]") -> "dict[str, object]":
    """The TaskManager's configuration (``--configDir``), as far as it can be read; {} otherwise (also for
    a file another user than the holder's, or root, owns: it is the holder's word, not ours to read)."""
    if "--configDir" not in argv:
        return {}
    position = argv.index("--configDir")
    if position + 1 >= len(argv):
        return {}
    from flink_gpu.flink.config_files import find_configuration_file, load_configuration_file

    try:
        file = find_configuration_file(argv[position + 1])
        content = _holders_file_head(pid, file, _CONFIG_MOST + 1)
        if content is None or len(content) > _CONFIG_MOST:
            return {}
        return load_configuration_file(file, content=content).data
    except Exception:  # missing, unreadable or broken: the name falls back to the pid
        return {}


def process_text(pid: int, argv: "list[str] | None", width: "int | None" = None) -> str:
    """A holder as a person wants to see it: a TaskManager by name, anything else by its command."""
    from flink_gpu.cli._output import short_command

    name = taskmanager_name(pid, argv)
    if name is not None:  # the pid is shown beside it already
        return "TaskManager" if name == f"TaskManager pid {pid}" else name
    return short_command(argv) if width is None else short_command(argv, width)


# -- the terminal ---------------------------------------------------------------------------------


def terminal_width() -> "int | None":
    """The terminal's columns when stdout is one (``$COLUMNS`` wins there); None for a pipe or a
    file, which get whole lines."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def colour_enabled() -> bool:
    """ANSI colour on a terminal, unless ``NO_COLOR`` is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


_COLOURS = {"green": "32", "yellow": "33", "red": "31", "bold": "1"}


def verdict_colour(text: str) -> "str | None":
    """The colour of a health verdict, a holder cell or a reading."""
    if text.startswith(("unhealthy", "CONFLICT")):
        return "red"
    if text.startswith("degraded") or "(stale: " in text or text.endswith("liveness unknown"):
        return "yellow"
    if text in ("ok", "free"):
        return "green"
    return None


def paint(text: str, colour: "str | None") -> str:
    return text if colour is None else f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"


# -- --watch --------------------------------------------------------------------------------------


def watch(show: "Callable[[], int]", interval: float) -> int:
    """Calls ``show()`` every ``interval`` seconds, the screen cleared before each on a terminal,
    until Ctrl-C (exit 0: stopping a watch is its normal end)."""
    import time

    clear = sys.stdout.isatty()
    try:
        while True:
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            started = time.monotonic()
            status = show()
            print(f"\nEvery {interval:g} s ({time.strftime('%H:%M:%S')}); Ctrl-C stops.", flush=True)
            if status != 0:
                return status
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
