"""The discovery script's interface, as Flink and its stock ``nvidia-gpu-discovery.sh`` define it.

* The command line: Flink runs ``Runtime.exec(path + " " + amount + " " + args)``, which splits on
  whitespace (:func:`exec_tokens`); unset args are the literal token ``null``.
* The arguments after the amount, read with the stock script's grammar (:func:`parse_script_args`):
  ``--enable-coordination-mode`` and ``--coordination-file PATH``. The NVML backend honours them as
  the stock script does; :func:`with_coordination_file` points them at another file.
* The output: the first non-blank line holds the comma-separated GPU indices
  (:func:`split_output_lines`, :func:`parse_gpu_indices`).
* The order of GPU indices (:func:`sort_indices`, from :mod:`flink_gpu.base.gpu_index`): numeric ones
  by value (2 before 10), then the others as text.

Each rule has one implementation, in the C++ core (csrc/flink/script_args.*, csrc/flink/script_output.*),
shared with ``flink-gpu-discovery``.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from flink_gpu._native import SCRIPT_FLAGS, parse_gpu_indices, split_output_lines
from flink_gpu._native import parse_script_args as _parse_tokens
from flink_gpu._native import with_coordination_file as _with_coordination_file
from flink_gpu.base.gpu_index import compare_indices, index_sort_order, sort_indices

__all__ = [
    "COORDINATION_FILE_FLAG",
    "ENABLE_COORDINATION_FLAG",
    "SCRIPT_FLAGS",
    "ScriptArgs",
    "compare_indices",
    "exec_tokens",
    "index_sort_order",
    "parse_gpu_indices",
    "parse_script_args",
    "sort_indices",
    "split_output_lines",
    "warn_ignored",
    "with_coordination_file",
]

_log = logging.getLogger("flink_gpu.flink.script_protocol")

ENABLE_COORDINATION_FLAG, COORDINATION_FILE_FLAG, BUSY_GPUS_FLAG, NVML_TIMEOUT_FLAG = SCRIPT_FLAGS

# Java's Runtime.exec(String) tokenises with StringTokenizer's default delimiters.
_EXEC_DELIMITERS = str.maketrans("\t\n\r\f", "    ")


def exec_tokens(args: "str | None") -> "list[str]":
    """The argv tail Flink's ``Runtime.exec(path + " " + amount + " " + args)`` produces.

    Unset args become the literal token ``null`` (Java string concatenation); quotes mean nothing.
    """
    if args is None:
        return ["null"]
    return [token for token in args.translate(_EXEC_DELIMITERS).split(" ") if token]


class ScriptArgs(NamedTuple):
    """``discovery-script.args`` as the stock script understands them."""

    coordination_mode: bool
    coordination_file: str
    unknown: "tuple[str, ...]"  # tokens the stock script silently skips
    suggestions: "tuple[str | None, ...]" = ()  # per unknown token, the flag it probably meant
    file_value_missing: bool = False  # --coordination-file without a value: the default file is used
    busy_gpus: "str | None" = None  # the value of --busy-gpus ("" without one); None: not given
    nvml_timeout: "str | None" = None  # the value of --nvml-timeout (flink-gpu-discovery's), likewise
    topology: "str | None" = None  # the value of --topology, likewise


def parse_script_args(args: "str | None", key: str = "discovery-script.args", *, warn: bool = True) -> ScriptArgs:
    """Read ``args`` with nvidia-gpu-discovery.sh's grammar, tokenised as Flink passes them.

    ``null`` (what Flink passes for unset args) is ignored. A ``--coordination-file`` without a
    value (the last token, or followed by an empty one) leaves the default file, as the stock script
    does. Unless ``warn`` is false, :func:`warn_ignored` WARNs about that and about every other token
    the stock script would silently skip, naming ``key``.
    """
    tokens = exec_tokens(args) if args is not None else []
    read = _parse_tokens(tokens)
    parsed = ScriptArgs(
        read.coordination_mode,
        read.coordination_file,
        tuple(u.token for u in read.unknown),
        tuple(u.suggestion for u in read.unknown),
        read.file_value_missing,
        read.busy_gpus,
        read.nvml_timeout,
        read.topology,
    )
    if warn:
        warn_ignored(parsed, key, args)
    return parsed


def warn_ignored(parsed: ScriptArgs, key: str, args: "str | None") -> None:
    """WARN about what the stock script would silently ignore in ``args`` (parsed as ``parsed``)."""
    if parsed.file_value_missing:
        _log.warning(
            "'%s' in '%s' (%r) has no file path after it; using the default coordination "
            "file %s, as the stock script does.",
            COORDINATION_FILE_FLAG,
            key,
            args,
            parsed.coordination_file,
        )
    for token, suggestion in zip(parsed.unknown, parsed.suggestions, strict=True):
        hint = (
            f"Did you mean '{suggestion}'?"
            if suggestion
            else f"The discovery script understands {ENABLE_COORDINATION_FLAG} and {COORDINATION_FILE_FLAG} PATH."
        )
        _log.warning("Ignoring unknown token %r in '%s' (%r). %s", token, key, args, hint)


def with_coordination_file(tokens: "list[str]", path: str) -> "list[str]":
    """``tokens`` (the arguments after the amount) made to use the coordination file ``path``.

    Every ``--coordination-file`` and its value, read as :func:`parse_script_args` reads them (the
    next token, whatever it is: ``--coordination-file --enable-coordination-mode`` names a file),
    is removed and ``--coordination-file path`` appended; everything else is kept in order.
    """
    return _with_coordination_file(tokens, path)
