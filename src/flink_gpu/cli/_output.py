"""Output helpers of the command line: aligned tables, JSON documents, errors, process names."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Iterable, Sequence

SCHEMA = 1
# A holder's command line is cut to this many characters in tables (JSON has it whole).
_COMMAND_WIDTH = 60


def known_errors() -> tuple:
    """The exceptions that are a failed operation (exit 1), reported as one clear line."""
    from flink_gpu.errors import FlinkException

    # IllegalConfigurationException and NvmlError are a ValueError and a FlinkException
    return (FlinkException, OSError, TimeoutError, ValueError)


def document(command: str, ok: bool = True, **fields: Any) -> dict:
    return {"schema": SCHEMA, "command": command, "ok": ok, **fields}


def emit_json(doc: dict) -> None:
    json.dump(_valid_unicode(doc), sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()


def _valid_unicode(value: Any) -> Any:
    """``value`` with every string made valid Unicode: a byte that is not UTF-8 (a lone surrogate of
    ``surrogateescape``, as file lines and command lines are decoded) becomes the text ``\\xff``, since
    strict JSON parsers reject a lone surrogate."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:
                return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:  # a surrogate no byte stands for: its code point, escaped
                return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_valid_unicode(key): _valid_unicode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_valid_unicode(item) for item in value]
    return value


def fail(args, command: str, error: BaseException, code: int) -> int:
    """Report ``error`` (JSON on stdout with --json, always a line on stderr); return ``code``."""
    message = error_message(error)
    if getattr(args, "verbose", False):
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    if getattr(args, "json", False):
        emit_json(document(command, ok=False,
                           error={"type": type(error).__name__, "message": message}))
    print(f"flink-gpu {command}: error: {message}", file=sys.stderr)
    hint = _hint(error)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    return code


def error_message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        # not "[Errno 13] ...: 'path'": the library's sentences already name the file
        message = error.strerror
        if error.filename is not None and os.fspath(error.filename) not in message:
            message += f": {os.fspath(error.filename)}"
        return message
    return str(error) or type(error).__name__


def _bare_os_error(error: BaseException) -> bool:
    """An OSError with only the C library's text (no sentence of ours saying what to do)."""
    return (isinstance(error, OSError) and error.errno is not None
            and error.strerror == os.strerror(error.errno))


def _is_simulator(library_path: str) -> bool:
    from flink_gpu import simulator

    try:
        return bool(library_path) and os.path.samefile(library_path, simulator.library_path())
    except OSError:  # no simulator in this installation, or the library path is gone
        return False


def _hint(error: BaseException) -> "str | None":
    from flink_gpu.errors import NvmlError

    if isinstance(error, NvmlError) and _is_simulator(error.library_path):
        return ("this NVML is the bundled simulator: it failed as its FLINK_GPU_SIM_* settings say "
                "(a spec it rejects is named on the line above).")
    if isinstance(error, NvmlError):
        return ("no usable NVIDIA driver here? Try the bundled simulator: flink-gpu --simulate 4 "
                "<command>; or point FLINK_GPU_NVML_LIBRARY at libnvidia-ml.so.1.")
    if isinstance(error, PermissionError) and _bare_os_error(error):
        return "run as a user that may read and write the file, or choose another one with --file."
    return None


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "") -> str:
    """Left-aligned columns separated by two spaces; ``None`` shows as ``-``."""
    cells = [[str(h) for h in headers]]
    cells += [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        text = "  ".join(value.ljust(width) for value, width in zip(row, widths))
        lines.append(indent + text.rstrip())
    return "\n".join(lines)


def plural(count: int, word: str, many: "str | None" = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def gib(size: "int | None") -> "str | None":
    if size is None:
        return None
    return f"{size / 2 ** 30:.1f} GiB"


def process_cmdline(pid: int) -> "list[str] | None":
    """The argv of ``pid`` from /proc (``[comm]`` for a process without one); None when gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    if raw:
        return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")]
    try:  # a kernel thread or a zombie: only its name is left
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return [f"[{handle.read().decode('utf-8', 'replace').strip()}]"]
    except OSError:
        return None


def short_command(argv: "list[str] | None", width: int = _COMMAND_WIDTH) -> str:
    if argv is None:
        return "?"
    import shlex

    text = " ".join(part if part.startswith("[") and len(argv) == 1 else shlex.quote(part)
                    for part in argv)
    # a command line is anybody's bytes: newlines would break the table, escapes drive the terminal
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= width else text[:width - 3] + "..."


def owner_description(pid: int) -> str:
    argv = process_cmdline(pid)
    return f"pid {pid}" if argv is None else f"pid {pid} ({short_command(argv, 40)})"


def coordination_path(args) -> str:
    if args.file is not None:
        return os.path.abspath(args.file)
    from flink_gpu.coordination import DEFAULT_PATH

    return DEFAULT_PATH
