"""The GPU driver's options (docs/design.md §3.1): Flink's two, with Flink's keys and defaults, and ours.

Keys are relative to ``external-resource.<name>.param.``: the driver sees them with that prefix
already stripped.
"""

from __future__ import annotations

from typing import Any

from flink_gpu.flink.configuration import ConfigOption, Duration, config_option
from flink_gpu.nvml import DEFAULT_METRICS_INTERVAL, DEFAULT_NVML_TIMEOUT, MIN_METRICS_INTERVAL

#: Where Flink ships the stock script, relative to ``$FLINK_HOME``.
DEFAULT_DISCOVERY_SCRIPT = "plugins/external-resource-gpu/nvidia-gpu-discovery.sh"

#: The values ``discovery-mode`` accepts (docs/design.md §4.1).
DISCOVERY_MODES = ("auto", "nvml", "script")


class GPUDriverOptions:
    """``ConfigOption``s read by ``GPUDriver``; the first two are Flink's ``GPUDriver`` options."""

    DISCOVERY_SCRIPT_PATH: ConfigOption[str] = config_option(
        "discovery-script.path",
        str,
        DEFAULT_DISCOVERY_SCRIPT,
        "The path of the GPU discovery script; a relative path is resolved against $FLINK_HOME "
        "(the working directory when unset). Setting it selects the script backend in auto mode.",
    )

    DISCOVERY_SCRIPT_ARG: ConfigOption[str] = config_option(
        "discovery-script.args",
        str,
        None,
        "The arguments passed to the discovery script after the amount, split on whitespace. The "
        "NVML backend reads the stock script's flags from it: --enable-coordination-mode and "
        "--coordination-file PATH.",
    )

    DISCOVERY_MODE: ConfigOption[str] = config_option(
        "discovery-mode",
        str,
        "auto",
        "How GPUs are discovered: 'script' runs the discovery script as Flink does, 'nvml' asks "
        "NVML in-process, 'auto' uses the script when discovery-script.path is set, else NVML "
        "when it loads, else the script at its default path.",
    )

    NVML_LIBRARY_PATH: ConfigOption[str] = config_option(
        "nvml.library-path",
        str,
        None,
        "The libnvidia-ml to load (default: $FLINK_GPU_NVML_LIBRARY, else libnvidia-ml.so.1).",
    )

    DISCOVERY_SCRIPT_TIMEOUT: ConfigOption[float] = config_option(
        "discovery-script.timeout",
        Duration,
        10.0,
        "How long the discovery script may run before it and everything it started is killed "
        "(Flink: fixed 10 s). Read as seconds.",
    )

    BUSY_GPUS: ConfigOption[str] = config_option(
        "busy-gpus",
        str,
        "avoid",
        "NVML mode: what to do with GPUs that run processes of others (not this worker, its "
        "TaskManager or their descendants). 'avoid' takes them only when the idle GPUs are too "
        "few, 'exclude' never takes them, 'ignore' takes GPUs in index order as Flink does. Case "
        "and surrounding blanks are ignored; overrides --busy-gpus in discovery-script.args.",
    )

    TOPOLOGY: ConfigOption[str] = config_option(
        "topology",
        str,
        "prefer",
        "NVML mode: how a claim of two or more GPUs picks them within the best health/busy class. "
        "'prefer' takes the set best joined by NVLink, then by PCIe (the host's topology is read once per "
        "process); 'ignore' takes them in index order as Flink does and reads no topology. Case and "
        "surrounding blanks are ignored; overrides --topology in discovery-script.args.",
    )

    NVML_TIMEOUT: ConfigOption[float] = config_option(
        "nvml-timeout",
        Duration,
        DEFAULT_NVML_TIMEOUT,
        "NVML mode: how long the GPUs' state may take to read on a claim (docs/design.md §9.5). A GPU "
        "whose NVML query does not return in time is 'unknown' and not handed out, with a WARN naming "
        "it and the query; the claim goes on with the others. Also bounds nvmlInit and the device "
        "enumeration (an NvmlError naming the stalled call). Must be positive; overrides "
        "--nvml-timeout in discovery-script.args. Read as seconds.",
    )

    HEALTH_CHECKS: ConfigOption[str] = config_option(
        "health-checks",
        str,
        "all",
        "NVML mode: which health checks decide whether a GPU is handed out (docs/design.md §9.1): "
        "a comma-separated list of check names (inforom, remapped-rows, ecc, recovery-action, "
        "fabric, retired-pages, nvlink), 'all', and '-name' to leave one out, read left to right, e.g. "
        "'all,-inforom'. A check left out is still read and shown by flink-gpu list and doctor; "
        "a lost GPU is never handed out.",
    )

    METRICS_INTERVAL: ConfigOption[float] = config_option(
        "metrics.interval",
        Duration,
        DEFAULT_METRICS_INTERVAL,
        f"How often the GPU gauges of a process (flink_gpu.binding's register_metrics) read NVML, at most: "
        f"one reader per process refreshes the values every gauge shows, whatever Flink's reporters or "
        f"PyFlink's bundles ask. At least {MIN_METRICS_INTERVAL:g} s. Read as seconds.",
    )


#: The options of ours that bind_gpus reads from the TaskManager's configuration (flink_gpu.gpu.taskmanager_view),
#: whichever driver factory the TaskManager runs: Flink's Java plugin reads none of them, a binding does.
BINDING_OPTIONS: "tuple[ConfigOption[Any], ...]" = (
    GPUDriverOptions.NVML_LIBRARY_PATH,
    GPUDriverOptions.TOPOLOGY,
    GPUDriverOptions.NVML_TIMEOUT,
    GPUDriverOptions.HEALTH_CHECKS,
    GPUDriverOptions.METRICS_INTERVAL,
)
