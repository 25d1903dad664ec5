"""The discovery script's arguments, as the stock script's grammar (script_protocol) reads them."""

from __future__ import annotations

import os

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.flink.script_protocol import COORDINATION_FILE_FLAG, ENABLE_COORDINATION_FLAG, ScriptArgs
from flink_gpu.gpu.options import GPUDriverOptions
from flink_gpu.gpu.settings import GPUDriverSettings


def check_args(
    checkup: Checkup, name: str, settings: GPUDriverSettings, stock: bool, script: "str | None"
) -> "ScriptArgs | None":
    """The arguments of a stock script (or of the nvml backend); None for a custom script."""
    key = settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_ARG)
    if not stock and script is not None:
        args = settings.script_args_text
        checkup.add(
            "note",
            "args",
            f"{os.path.basename(script)} is not the stock discovery "
            f"script, so doctor cannot check its arguments "
            f"({'unset' if args is None else repr(args)}).",
            resource=name,
        )
        return None
    parsed = settings.script_args
    if parsed.file_value_missing:
        checkup.add(
            "warning",
            "args",
            f"{key} has {COORDINATION_FILE_FLAG} without a file path "
            f"after it: the discovery script uses the default coordination file "
            f"{parsed.coordination_file}.",
            f"Write `{COORDINATION_FILE_FLAG} "
            f"/path/of/file` in {key}, or drop {COORDINATION_FILE_FLAG} to use the "
            "default file.",
            resource=name,
        )
    for token, suggestion in zip(parsed.unknown, parsed.suggestions, strict=True):
        if suggestion:
            consequence = (
                ", so coordination mode is OFF"
                if suggestion == ENABLE_COORDINATION_FLAG and not parsed.coordination_mode
                else ""
            )
            checkup.add(
                "error",
                "args",
                f"{key} has {token!r}, which the discovery script does "
                f"not know: it is silently ignored{consequence}. (Flink's documentation "
                f"misspells the flag as --enable-coordination.)",
                f"Write {suggestion!r} instead of {token!r} in {key}.",
                resource=name,
            )
        else:
            checkup.add(
                "warning",
                "args",
                f"{key} has {token!r}, which the discovery script does not know; it is ignored.",
                f"Remove {token!r} from {key}; the "
                f"script understands {ENABLE_COORDINATION_FLAG} and "
                f"{COORDINATION_FILE_FLAG} PATH.",
                resource=name,
            )
    return parsed
