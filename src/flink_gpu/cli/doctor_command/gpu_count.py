"""The GPUs NVML reports on this host, against the amount a TaskManager asks for."""

from __future__ import annotations

from flink_gpu.cli._output import plural
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.errors import NvmlError
from flink_gpu.flink.framework import amount_key
from flink_gpu.gpu.settings import GPUDriverSettings

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from flink_gpu.cli.doctor_command.findings import OpenedNvml


def open_nvml(checkup: Checkup, library: "str | None") -> "OpenedNvml":
    """(library, its enumeration) of ``library``, or the NvmlError opening it."""
    if library not in checkup.nvml:
        from flink_gpu.nvml import open_library

        try:
            nvml = open_library(library)
            checkup.nvml[library] = (nvml, nvml.devices())
        except NvmlError as error:
            checkup.nvml[library] = error
    return checkup.nvml[library]


def check_gpu_count(
    checkup: Checkup,
    name: str,
    settings: GPUDriverSettings,
    amount: "int | None",
    mode: "str | None",
    discovery_loads_nvml: bool = False,
) -> "int | None":
    """The number of usable GPUs of this host, or None when NVML cannot tell. ``discovery_loads_nvml``: the
    resource's discovery loads the same NVML (the NVML backend, flink-gpu-discovery), and its check reports a
    library that does not load."""
    found = open_nvml(checkup, settings.library_path if mode != "script" else None)
    if isinstance(found, NvmlError):
        if not discovery_loads_nvml:  # else one finding: the driver's, or the discovery run's
            checkup.add(
                "note",
                "nvml",
                f"NVML is not usable here ({found}), so doctor cannot count this host's GPUs.",
                resource=name,
            )
        return None
    nvml, enumeration = found
    devices = enumeration.devices
    for device in enumeration.skipped:
        checkup.add(
            "warning", "nvml", device.reason, "Check the device with nvidia-smi; a TaskManager skips it.", resource=name
        )
    for notice in enumeration.notices:
        checkup.add(
            "note",
            "nvml",
            notice,
            "Reset the GPU (nvidia-smi -r) to apply the MIG mode, or set it back.",
            resource=name,
        )
    count = len(devices)
    if count == 0:
        checkup.add(
            "error",
            "gpu-count",
            f"NVML ({nvml.library_path}) reports no usable GPU on this host.",
            "Run doctor on a GPU host, or check the driver with nvidia-smi.",
            resource=name,
        )
        return count
    if amount is not None and amount > count:
        checkup.add(
            "error",
            "gpu-count",
            f"{amount_key(name)} is {amount}, but this host has {plural(count, 'GPU')}: discovery fails.",
            f"Lower the amount to at most {count}.",
            resource=name,
        )
    else:
        checkup.add(
            "ok", "gpu-count", f"This host has {plural(count, 'GPU')} (NVML {nvml.library_path}).", resource=name
        )
    return count
