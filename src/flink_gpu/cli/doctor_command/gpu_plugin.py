"""A GPU resource, checked as the TaskManager that uses it builds its driver.

Flink's Java factory is checked as a Java TaskManager uses it (the plugin jar must be installed and
the discovery script always runs); ``flink_gpu``'s factory as ``flink_gpu`` builds its driver (the
backend selection of docs/design.md §4.1).
"""

from __future__ import annotations

import difflib
import glob
import os
import shlex

from flink_gpu.cli.doctor_command.coordination import check_coordination
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.cli.doctor_command.gpu_count import check_gpu_count
from flink_gpu.cli.doctor_command.gpu_state import check_gpu_state
from flink_gpu.cli.doctor_command.script import check_script, run_script, script_fix
from flink_gpu.cli.doctor_command.script_args import check_args
from flink_gpu.errors import FlinkException, IllegalConfigurationException, NvmlError
from flink_gpu.flink.configuration import ConfigOption, Configuration
from flink_gpu.flink.framework import JAVA_GPU_FACTORY, param_prefix
from flink_gpu.gpu.options import BINDING_OPTIONS, GPUDriverOptions
from flink_gpu.gpu.script_discovery import check_script as usable_script
from flink_gpu.gpu.settings import GPUDriverSettings

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from flink_gpu.gpu.driver import GPUDriverFactory

_STOCK_SCRIPTS = ("nvidia-gpu-discovery.sh", "flink-gpu-discovery")


def check_params(checkup: Checkup, name: str, params: Configuration, java: bool) -> None:
    """Keys under ``param.`` the GPU plugin does not read: a typo is silently ignored."""
    flink_keys = [GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key, GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key]
    # every option of ours, from the options class itself, so that a new one is never called a typo
    ours = [
        option.key
        for option in vars(GPUDriverOptions).values()
        if isinstance(option, ConfigOption) and option.key not in flink_keys
    ]
    for key in params.keys():
        if key in flink_keys:
            continue
        if key in ours:
            if java:
                read_by_bindings = key in {option.key for option in BINDING_OPTIONS}
                checkup.add(
                    "note",
                    "params",
                    f"{param_prefix(name)}{key} is a flink_gpu option: Flink's Java plugin ignores it and always runs "
                    "the discovery script"
                    + (", but bind_gpus reads it from the TaskManager's configuration." if read_by_bindings else "."),
                    resource=name,
                )
            continue
        match = difflib.get_close_matches(key, flink_keys + ours, n=1, cutoff=0.6)
        checkup.add(
            "warning",
            "params",
            f"{param_prefix(name)}{key} is not an option of the GPU plugin; it is ignored.",
            f"Did you mean {param_prefix(name)}{match[0]}?"
            if match
            else f"Remove it; the plugin reads {', '.join(flink_keys + ours)}.",
            resource=name,
        )


def check_java_gpu(checkup: Checkup, name: str, params: Configuration, amount: "int | None") -> None:
    settings = GPUDriverSettings.from_config_lenient(params, name)
    _check_plugin_jar(checkup, name)
    script = check_script(checkup, name, settings)
    errors = list(settings.binding_parameter_errors)
    # a wrong flag fails flink-gpu-discovery's run, the finding about it; the stock script passes it by
    if settings.binding_flag_error and not (script and os.path.basename(script) == "flink-gpu-discovery"):
        errors.append(settings.binding_flag_error)
    for error in errors:  # the TaskManager starts, but every bind_gpus of its jobs refuses
        checkup.add(
            "error",
            "params",
            f"{error} Flink's Java plugin does not read it, but bind_gpus does, and refuses to bind with it.",
            f"Correct it in {checkup.file}.",
            resource=name,
        )
    _check_gpus(checkup, name, settings, amount, "script", script)


def check_python_gpu(
    checkup: Checkup, name: str, factory: "GPUDriverFactory", params: Configuration, amount: "int | None"
) -> None:
    # a bad mode or timeout is reported by the driver check below; the checks after it still see
    # the script, its arguments and the NVML library
    settings = GPUDriverSettings.from_config_lenient(params, name)
    try:
        driver = factory.create_external_resource_driver(params)  # as a worker builds it
    except (FileNotFoundError, FlinkException, IllegalConfigurationException) as error:
        if isinstance(error, NvmlError):
            fix = (
                f"Install the NVIDIA driver, or set "
                f"{settings.key(GPUDriverOptions.NVML_LIBRARY_PATH)} to its "
                "libnvidia-ml.so.1, or use discovery-mode: script."
            )
        else:
            fix = script_fix(checkup, settings, error)
        checkup.add("error", "driver", f"The GPU driver of {name!r} cannot be built: {error}", fix, resource=name)
        # the arguments, GPU count and coordination are still worth checking
        mode = "nvml" if isinstance(error, NvmlError) else None
        _check_gpus(checkup, name, settings, amount, mode, None)
        return
    with driver:
        mode, reason = driver.mode, driver.reason
    checkup.add("ok", "driver", f"flink_gpu uses the {mode} backend: {reason}.", resource=name)
    script = None
    if mode == "script":
        script = usable_script(settings.script_path, settings.key(GPUDriverOptions.DISCOVERY_SCRIPT_PATH))
    _check_gpus(checkup, name, settings, amount, mode, script)


def _check_plugin_jar(checkup: Checkup, name: str) -> None:
    home = checkup.flink_home
    if home is None:
        checkup.add(
            "note",
            "plugin",
            "FLINK_HOME is unknown, so doctor cannot check that Flink's GPU plugin jar is installed.",
            "Set FLINK_HOME (or pass the conf directory of the Flink installation) to check it.",
            resource=name,
        )
        return
    jars = sorted(glob.glob(os.path.join(home, "plugins", "*", "flink-external-resource-gpu*.jar")))
    if jars:
        checkup.add("ok", "plugin", f"Flink's GPU plugin is installed: {jars[0]}.", resource=name)
        return
    shipped = os.path.join(home, "opt", "external-resource-gpu")
    if os.path.isdir(shipped):
        fix = f"cp -r {shlex.quote(shipped)} {shlex.quote(os.path.join(home, 'plugins'))}/"
    else:
        fix = (
            "Download flink-external-resource-gpu-<your Flink version>.jar (Maven Central, "
            f"org.apache.flink) into {os.path.join(home, 'plugins', 'external-resource-gpu')}/."
        )
    checkup.add(
        "error",
        "plugin",
        f"Flink's GPU plugin is not installed: no "
        f"flink-external-resource-gpu jar under {os.path.join(home, 'plugins')}, so a "
        f"TaskManager cannot load {JAVA_GPU_FACTORY}.",
        fix,
        resource=name,
    )


def _check_gpus(
    checkup: Checkup,
    name: str,
    settings: GPUDriverSettings,
    amount: "int | None",
    mode: "str | None",
    script: "str | None",
) -> None:
    """What follows the driver: its arguments, the host's GPUs, coordination, one script run.

    ``mode`` is the backend ("script" or "nvml"), None when the driver could not be built.
    """
    stock = mode == "nvml" or (script is not None and os.path.basename(script) in _STOCK_SCRIPTS)
    script_args = check_args(checkup, name, settings, stock, script)
    # the NVML backend and flink-gpu-discovery choose by the GPUs' state; other scripts do not
    uses_state = mode == "nvml" or (script is not None and os.path.basename(script) == "flink-gpu-discovery")
    count = check_gpu_count(checkup, name, settings, amount, mode, discovery_loads_nvml=uses_state)
    if uses_state and not (mode == "nvml" and settings.library_path):  # else nvml.library-path names the library
        checkup.nvml_resources.append(name)
    check_gpu_state(checkup, name, settings, script_args, amount, mode, uses_state)
    check_coordination(checkup, name, settings, script_args, amount, count)
    if script is not None:
        run_script(checkup, name, settings, script, script_args)
