"""Output helpers of the command line: aligned tables, JSON documents, errors, process names."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

if TYPE_CHECKING:
    from argparse import Namespace

SCHEMA = 1
# A holder's command line is cut to this many characters in tables (JSON has it whole).
_COMMAND_WIDTH = 60


def known_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that are a failed operation (exit 1), reported as one clear line."""
    from flink_gpu.errors import FlinkException

    # IllegalConfigurationException and NvmlError are a ValueError and a FlinkException
    return (FlinkException, OSError, TimeoutError, ValueError)


def document(command: str | None, ok: bool = True, **fields: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "command": command, "ok": ok, **fields}


def emit_json(doc: dict[str, Any]) -> None:
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


def fail(args: Namespace, command: str, error: BaseException, code: int) -> int:
    """Report ``error`` (JSON on stdout with --json, always a line on stderr); return ``code``."""
    message = error_message(error)
    if getattr(args, "verbose", False):
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    if getattr(args, "json", False):
        emit_json(document(command, ok=False, error={"type": type(error).__name__, "message": message}))
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
    return isinstance(error, OSError) and error.errno is not None and error.strerror == os.strerror(error.errno)


def _is_simulator(library_path: str) -> bool:
    from flink_gpu import simulator

    try:
        return bool(library_path) and os.path.samefile(library_path, simulator.library_path())
    except OSError:  # no simulator in this installation, or the library path is gone
        return False


def _hint(error: BaseException) -> "str | None":
    from flink_gpu.errors import NvmlError

    if isinstance(error, NvmlError) and _is_simulator(error.library_path):
        return (
            "this NVML is the bundled simulator: it failed as its FLINK_GPU_SIM_* settings say "
            "(a spec it rejects is named on the line above)."
        )
    if isinstance(error, NvmlError):
        return (
            "no usable NVIDIA driver here? Try the bundled simulator: flink-gpu --simulate 4 "
            "<command>; or point FLINK_GPU_NVML_LIBRARY at libnvidia-ml.so.1."
        )
    if isinstance(error, PermissionError) and _bare_os_error(error):
        return "run as a user that may read and write the file, or choose another one with --file."
    return None


# A column cut to fit a terminal keeps at least this many characters, other columns giving way first.
_MIN_SHRUNK = 30


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    indent: str = "",
    width: "int | None" = None,
    shrink: "int | None" = None,
    style: Callable[[str], str] | None = None,
    optional: Sequence[int] = (),
) -> str:
    """Left-aligned columns separated by two spaces; ``None`` shows as ``-``.

    ``width`` (a terminal's columns) with ``shrink`` (a column's position): the ``optional`` columns
    are left out, in that order, while the ``shrink`` column would have fewer than 30 characters,
    then its cells are cut so that the lines fit. ``style(value)``: a function giving a cell's text
    its colour (``value`` painted; the padding stays outside, so the columns stay aligned)."""
    cells = [[str(h) for h in headers]]
    cells += [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if width is not None and shrink is not None:
        keep = list(range(len(headers)))
        for column in optional:
            others = len(indent) + sum(widths[i] for i in keep if i != shrink) + 2 * (len(keep) - 1)
            if widths[shrink] <= width - others or width - others >= _MIN_SHRUNK:
                break
            keep.remove(column)
        cells = [[row[i] for i in keep] for row in cells]
        widths = [widths[i] for i in keep]
        shrink = keep.index(shrink)
        headers = [headers[i] for i in keep]
        others = len(indent) + sum(widths) - widths[shrink] + 2 * (len(headers) - 1)
        room = max(len(cells[0][shrink]), 8, width - others)
        if widths[shrink] > room:
            for row in cells[1:]:
                if len(row[shrink]) > room:
                    row[shrink] = row[shrink][: room - 3] + "..."
            widths[shrink] = room
    lines = []
    for number, row in enumerate(cells):
        parts = []
        for value, column_width in zip(row, widths, strict=True):
            padding = " " * (column_width - len(value))
            parts.append((style(value) if style is not None and number > 0 else value) + padding)
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def plural(count: int, word: str, many: "str | None" = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def gib(size: "int | None") -> "str | None":
    if size is None:
        return None
    return f"{size / 2**30:.1f} GiB"


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

    text = " ".join(part if part.startswith("[") and len(argv) == 1 else shlex.quote(part) for part in argv)
    # a command line is anybody's bytes: newlines would break the table, escapes drive the terminal
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= width else text[: width - 3] + "..."


def owner_description(pid: int) -> str:
    argv = process_cmdline(pid)
    return f"pid {pid}" if argv is None else f"pid {pid} ({short_command(argv, 40)})"
