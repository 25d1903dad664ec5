"""The discovery script's arguments, read with the stock script's grammar."""

from __future__ import annotations

import difflib
import os

from flink_gpu.cli.doctor.findings import Checkup
from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.framework import param_prefix
from flink_gpu.gpu.nvml import _ENABLE_COORDINATION, _KNOWN_FLAGS
from flink_gpu.gpu.options import GPUDriverOptions


def args_key(name: str) -> str:
    return f"{param_prefix(name)}{GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key}"


def check_args(checkup: Checkup, name: str, args: "str | None", stock: bool,
               script: "str | None"):
    """The parsed arguments of a stock script (or of the nvml backend), else None."""
    from flink_gpu.gpu.nvml import parse_script_args

    key = args_key(name)
    if not stock and script is not None:
        checkup.add("note", "args", f"{os.path.basename(script)} is not the stock discovery "
                    f"script, so doctor cannot check its arguments "
                    f"({'unset' if args is None else repr(args)}).", resource=name)
        return None
    try:
        parsed = parse_script_args(args, key)
    except IllegalConfigurationException as error:
        checkup.add("error", "args", str(error), f"Write `--coordination-file /path/of/file` in "
                    f"{key}.", resource=name)
        return None
    for token in parsed.unknown:
        known = difflib.get_close_matches(token, _KNOWN_FLAGS, n=1, cutoff=0.6)
        if known:
            consequence = (", so coordination mode is OFF" if known[0] == _ENABLE_COORDINATION
                           and not parsed.coordination_mode else "")
            checkup.add("error", "args", f"{key} has {token!r}, which the discovery script does "
                        f"not know: it is silently ignored{consequence}. (Flink's documentation "
                        f"misspells the flag as --enable-coordination.)",
                        f"Write {known[0]!r} instead of {token!r} in {key}.", resource=name)
        else:
            checkup.add("warning", "args", f"{key} has {token!r}, which the discovery script "
                        "does not know; it is ignored.", f"Remove {token!r} from {key}; the "
                        f"script understands {_ENABLE_COORDINATION} and --coordination-file PATH.",
                        resource=name)
    return parsed
