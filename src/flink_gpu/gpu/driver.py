"""GPUDriverFactory and GPUDriver: Flink's GPU plugin with a choice of backend (SPEC 3, 4.1)."""

from __future__ import annotations

import logging
import operator
from typing import Mapping

from flink_gpu.config import Configuration
from flink_gpu.errors import FlinkException, IllegalConfigurationException, NvmlError
from flink_gpu.framework import ExternalResourceDriver, ExternalResourceDriverFactory
from flink_gpu.gpu.info import GPUInfo
from flink_gpu.gpu.options import DEFAULT_DISCOVERY_SCRIPT, DISCOVERY_MODES, GPUDriverOptions

_log = logging.getLogger("flink_gpu.gpu.driver")

_SCRIPT_PATH_KEY = (
    f"external-resource.<resource_name>.param.{GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key}")


class GPUDriver(ExternalResourceDriver):
    """Discovers the GPUs of this host, by discovery script or in-process NVML.

    ``config`` holds the driver-relative keys (``external-resource.<name>.param.`` stripped).
    Construction checks the configuration and, for NVML, loads the library; nothing runs until
    :meth:`retrieve_resource_info`. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, config: Configuration | Mapping[str, object] | None = None) -> None:
        config = Configuration.coerce(config)
        mode = _discovery_mode(config)
        args = config.get(GPUDriverOptions.DISCOVERY_SCRIPT_ARG)
        library_path = config.get(GPUDriverOptions.NVML_LIBRARY_PATH)
        if library_path is not None and not library_path.strip():
            library_path = None
        self._closed = False

        if mode == "script":
            path = config.get(GPUDriverOptions.DISCOVERY_SCRIPT_PATH)
            self._backend = _script_backend(config, path, args)
            reason = "discovery-mode is 'script'"
        elif mode == "nvml":
            self._backend = _nvml_backend(_open_nvml(library_path), args)
            reason = "discovery-mode is 'nvml'"
        else:
            self._backend, mode, reason = _auto(config, args, library_path)
            _log.info("GPU discovery uses the %s backend: %s.", mode, reason)
        self.mode = mode  # "script" or "nvml"
        self.reason = reason  # why that backend was chosen, for logs and `flink-gpu doctor`

    def retrieve_resource_info(self, amount: int) -> frozenset[GPUInfo]:
        """The GPUs for a worker asking for ``amount`` of them, as an immutable set."""
        amount = operator.index(amount)
        if amount <= 0:
            raise ValueError(
                "The gpuAmount should be positive when retrieving the GPU resource information.")
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

    def create_external_resource_driver(
            self, config: Configuration | Mapping[str, object] | None) -> GPUDriver:
        return GPUDriver(config)


def _discovery_mode(config: Configuration) -> str:
    option = GPUDriverOptions.DISCOVERY_MODE
    value = config.get(option)
    mode = value.strip().lower()
    if mode not in DISCOVERY_MODES:
        raise IllegalConfigurationException(
            f"Invalid value '{value}' for key '{option.key}': expected one of "
            f"{', '.join(DISCOVERY_MODES)}.")
    return mode


def _script_backend(config: Configuration, path: str | None, args: str | None):
    from flink_gpu.gpu.script import ScriptDiscovery, check_script

    option = GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT
    timeout = config.get(option)
    if not timeout > 0:
        raise IllegalConfigurationException(
            f"Invalid value for key '{option.key}': the timeout must be positive, got {timeout} s.")
    return ScriptDiscovery(check_script(path, _SCRIPT_PATH_KEY), args, timeout)


def _open_nvml(library_path: str | None):
    from flink_gpu.nvml import open_library

    return open_library(library_path)


def _nvml_backend(nvml, args: str | None):
    from flink_gpu.gpu.nvml import NvmlDiscovery, parse_script_args

    return NvmlDiscovery(nvml, parse_script_args(args))


def _auto(config: Configuration, args: str | None, library_path: str | None):
    """SPEC 4.1: an explicit script path wins; else NVML if it loads; else the default script."""
    path_option = GPUDriverOptions.DISCOVERY_SCRIPT_PATH
    if config.contains(path_option):
        return (_script_backend(config, config.get(path_option), args), "script",
                f"{path_option.key} is set")
    from flink_gpu.gpu.nvml import NvmlDiscovery, parse_script_args

    script_args = parse_script_args(args)
    try:
        nvml = _open_nvml(library_path)
    except NvmlError as error:
        try:
            backend = _script_backend(config, DEFAULT_DISCOVERY_SCRIPT, args)
        except FileNotFoundError as missing:
            # Flink's text first; then why a script nobody configured was looked for at all
            raise FileNotFoundError(
                f"{missing} discovery-mode is 'auto', {path_option.key} is not set and NVML is "
                f"not usable ({error}), so the default script was tried.") from missing
        return (backend, "script",
                f"{path_option.key} is not set and NVML is not usable ({error}); running "
                f"{DEFAULT_DISCOVERY_SCRIPT}")
    backend = NvmlDiscovery(nvml, script_args)
    version = nvml.driver_version
    return (backend, "nvml",
            f"{path_option.key} is not set and NVML loaded from {nvml.library_path}"
            + (f" (driver {version})" if version else ""))
