"""GPUDriverFactory and GPUDriver: Flink's GPU plugin with a choice of backend (docs/design.md §3, 4.1)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping, Union

from flink_gpu.coordination import whole_amount
from flink_gpu.errors import FlinkException, NvmlError
from flink_gpu.flink.configuration import Configuration
from flink_gpu.flink.framework import ExternalResourceDriver, ExternalResourceDriverFactory, param_prefix
from flink_gpu.gpu.info import GPUInfo
from flink_gpu.gpu.nvml_discovery import NvmlDiscovery
from flink_gpu.gpu.options import DEFAULT_DISCOVERY_SCRIPT, GPUDriverOptions
from flink_gpu.gpu.settings import GPUDriverSettings
from flink_gpu.nvml import Library, open_library

if TYPE_CHECKING:
    from flink_gpu.gpu.script_discovery import ScriptDiscovery

    #: What retrieves the GPUs: the discovery script or NVML.
    Backend = Union[ScriptDiscovery, NvmlDiscovery]

_log = logging.getLogger("flink_gpu.gpu.driver")

#: Flink's GPUDriver takes its amount as a Java long.
_FLINK_AMOUNT_MAX = 2**63 - 1

# a driver built from its param keys alone does not know its resource's name: Flink's placeholder
_UNKNOWN_RESOURCE = "<resource_name>"


class GPUDriver(ExternalResourceDriver):
    """Discovers the GPUs of this host, by discovery script or in-process NVML.

    ``config`` holds the driver-relative keys (``external-resource.<name>.param.`` stripped), or
    is the :class:`~flink_gpu.gpu.settings.GPUDriverSettings` already read from them.
    Construction checks the configuration and, for NVML, loads the library; nothing runs until
    :meth:`retrieve_resource_info`. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, config: Configuration | Mapping[str, object] | GPUDriverSettings | None = None) -> None:
        settings = config if isinstance(config, GPUDriverSettings) else GPUDriverSettings.from_config(config)
        self.settings = settings
        self._closed = False
        self._backend: Backend
        mode = settings.mode
        if mode == "script":
            self._backend = _script_backend(settings, settings.script_path)
            reason = "discovery-mode is 'script'"
        elif mode == "nvml":
            self._backend = _nvml_backend(_open_nvml(settings), settings)
            reason = "discovery-mode is 'nvml'"
        else:
            self._backend, mode, reason = _auto(settings)
            _log.info("GPU discovery uses the %s backend: %s.", mode, reason)
        self.mode = mode  # "script" or "nvml"
        self.reason = reason  # why that backend was chosen, for logs and `flink-gpu doctor`

    def retrieve_resource_info(self, amount: int) -> frozenset[GPUInfo]:
        """The GPUs for a worker asking for ``amount`` of them, as an immutable set.

        An amount that is no int (a bool, float, str…) is a :class:`TypeError` naming it; one that
        is not positive, Flink's :class:`ValueError`; one beyond a Java long, a
        :class:`~flink_gpu.FlinkException` (no host has that many GPUs).
        """
        amount = whole_amount(amount)
        if amount <= 0:
            raise ValueError("The gpuAmount should be positive when retrieving the GPU resource information.")
        if amount > _FLINK_AMOUNT_MAX:  # the stock script's bash would wrap it around to a small count
            raise FlinkException(
                f"Could not get enough GPU resources: {amount} requested, more than "
                f"any host has (Flink's amounts are at most {_FLINK_AMOUNT_MAX})."
            )
        if self._closed:
            raise FlinkException("This GPUDriver has been closed.")
        return self._backend.retrieve(amount)

    def close(self) -> None:
        """Release what the driver holds (the NVML handle and cached devices). Idempotent."""
        if not self._closed:
            self._closed = True
            close = getattr(self._backend, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.mode
        return f"<GPUDriver {state}: {self.reason}>"


class GPUDriverFactory(ExternalResourceDriverFactory):
    """Flink's ``org.apache.flink.externalresource.gpu.GPUDriverFactory``."""

    def create_external_resource_driver(self, config: Configuration | Mapping[str, object] | None) -> GPUDriver:
        return GPUDriver(config)


def _script_backend(settings: GPUDriverSettings, path: str) -> ScriptDiscovery:
    from flink_gpu.gpu.script_discovery import ScriptDiscovery, check_script

    key = param_prefix(settings.resource_name or _UNKNOWN_RESOURCE) + GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key
    return ScriptDiscovery(check_script(path, key), settings)


def _open_nvml(settings: GPUDriverSettings) -> Library:
    return open_library(settings.library_path, settings.nvml_timeout_seconds())


def _nvml_backend(nvml: Library, settings: GPUDriverSettings) -> NvmlDiscovery:
    settings.warn_ignored_args()
    return NvmlDiscovery(nvml, settings)


# A host without a GPU (a laptop, CI) has no NVML: say how to get simulated GPUs instead.
_NO_GPU_HINT = (
    "No GPU on this host? Use the bundled NVML simulator: run under "
    '`eval "$(flink-gpu --simulate 4 taskmanager-env)"` (or flink_gpu.simulator.run), '
    "which sets FLINK_GPU_NVML_LIBRARY and FLINK_GPU_SIM_DEVICES before NVML starts."
)


def _auto(settings: GPUDriverSettings) -> tuple[Backend, str, str]:
    """docs/design.md §4.1: an explicit script path wins; else NVML if it loads; else the default script."""
    path_key = GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key
    if settings.script_path_set:
        return _script_backend(settings, settings.script_path), "script", f"{path_key} is set"
    settings.warn_ignored_args()
    try:
        nvml = _open_nvml(settings)
    except NvmlError as error:
        from flink_gpu.gpu.script_discovery import DiscoveryScriptNotFound

        try:
            backend: Backend = _script_backend(settings, DEFAULT_DISCOVERY_SCRIPT)
        except DiscoveryScriptNotFound as missing:
            # Flink's text first; then why a script nobody configured was looked for at all
            # one exception: both causes are in its message (a chained traceback of three says no more)
            raise DiscoveryScriptNotFound(
                missing.path,
                f"{missing} discovery-mode is 'auto', {path_key} is not set and NVML is "
                f"not usable ({error}), so the default script was tried. {_NO_GPU_HINT}",
            ) from None
        return (
            backend,
            "script",
            f"{path_key} is not set and NVML is not usable ({error}); running {DEFAULT_DISCOVERY_SCRIPT}",
        )
    backend = NvmlDiscovery(nvml, settings)
    version = nvml.driver_version
    return (
        backend,
        "nvml",
        f"{path_key} is not set and NVML loaded from {nvml.library_path}" + (f" (driver {version})" if version else ""),
    )
