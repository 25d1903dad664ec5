"""What a TaskManager's configuration says about a GPU resource, for a process-mode Python worker that runs
beside it (docs/design.md §7): the coordination file its discovery records the GPUs in, with the rules Flink's
TaskManager applies before it runs any driver, and the resource's NVML settings."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from flink_gpu.errors import IllegalConfigurationException

__all__ = ["TaskManagerView", "configured_amount", "taskmanager_view"]

_FileStat = tuple[int, int, int, int, int]
_ConfigurationSignature = tuple[_FileStat | None, ...]

_ARGS_WARNED: "set[tuple[str, str | None]]" = set()  # (key, discovery-script.args) already parsed with warnings here


class TaskManagerView(NamedTuple):
    """What the TaskManager's configuration says about resource ``name`` for a process-mode worker."""

    path: str | None  # the coordination file to read; None: the TaskManager discovered nothing
    notes: list[str]  # how it was found, and why nothing is there when path is None (views are cached: never changed)
    library: str | None = None  # param.nvml.library-path of the resource
    amount: int | None = None  # external-resource.<name>.amount; None when the configuration is unknown
    metrics_interval: float | None = None  # param.metrics.interval (None: unknown, the default)
    health_checks: "tuple[str, ...] | None" = None  # param.health-checks (None: unknown, all)
    nvml_timeout: float | None = None  # param.nvml-timeout, else --nvml-timeout (None: unknown, the default)
    topology: str | None = None  # param.topology, else --topology (None: unknown, the default)
    # what bind_gpus cannot use of the configuration (a malformed metrics.interval, ...): one sentence each,
    # naming the file, the key, the value and what to write; bind_gpus refuses to bind while there is any
    errors: "tuple[str, ...]" = ()


# (FLINK_CONF_DIR, name) -> (the configuration files' stat, the view they gave)
_VIEWS: "dict[tuple[str, str], tuple[_ConfigurationSignature, TaskManagerView]]" = {}


def _configuration_signature(conf_dir: str) -> "_ConfigurationSignature":
    """What tells that the configuration in ``conf_dir`` changed: each candidate file's identity,
    size and times (a file that is absent counts as None)."""
    from flink_gpu.flink.config_files import CONFIGURATION_FILE_NAMES

    signature: "list[_FileStat | None]" = []
    for file_name in CONFIGURATION_FILE_NAMES:
        try:
            st = os.stat(os.path.join(conf_dir, file_name))
        except OSError:
            signature.append(None)
        else:
            signature.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(signature)


def taskmanager_view(name: str) -> TaskManagerView:
    """What the TaskManager's configuration (in ``$FLINK_CONF_DIR``) says about resource ``name``, read again
    only when the configuration files change: every operator's open() asks, and parsing the YAML costs far
    more than two stat() calls."""
    conf_dir = os.environ.get("FLINK_CONF_DIR")
    if not conf_dir:
        return _read_taskmanager_view(name, conf_dir)
    signature = _configuration_signature(conf_dir)
    cached = _VIEWS.get((conf_dir, name))
    if cached is not None and cached[0] == signature:
        return cached[1]
    view = _read_taskmanager_view(name, conf_dir)
    _VIEWS[(conf_dir, name)] = (signature, view)
    return view


def _read_taskmanager_view(name: str, conf_dir: "str | None") -> TaskManagerView:
    """The coordination file the TaskManager's discovery of ``name`` records its GPUs in, with the
    rules Flink's TaskManager applies before it runs any driver: the resource must be enabled, with
    a positive amount and a loadable driver factory; its discovery must be in coordination mode."""
    from flink_gpu.coordination import DEFAULT_PATH
    from flink_gpu.flink.framework import JAVA_GPU_FACTORY, configured_factory_name, param_prefix
    from flink_gpu.gpu.options import GPUDriverOptions

    key = param_prefix(name) + GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key
    if not conf_dir:
        return TaskManagerView(
            DEFAULT_PATH,
            [
                f"FLINK_CONF_DIR is not set, so the TaskManager's configuration is unknown; used the "
                f"default coordination file {DEFAULT_PATH}"
            ],
        )
    from flink_gpu.flink.configuration import Configuration
    from flink_gpu.gpu.settings import GPUDriverSettings

    where = f"the configuration in FLINK_CONF_DIR={conf_dir}"
    try:
        conf = Configuration.from_yaml(conf_dir)
    except Exception as error:  # a broken file must not break the operator; say why instead
        return TaskManagerView(
            DEFAULT_PATH,
            [f"could not read '{key}' from {where} ({error}); used the default coordination file {DEFAULT_PATH}"],
        )
    amount, refusal = configured_amount(conf, name)
    if refusal is not None:
        return TaskManagerView(None, [f"{where}: {refusal}, so the TaskManager discovered nothing"])
    params = conf.prefixed(param_prefix(name))
    errors: "tuple[str, ...]" = ()
    try:
        # Flink's Java plugin reads only the script's path and args: our options' errors do not stop it, but
        # bind_gpus reads some of them (GPUDriverSettings.binding_errors)
        settings = GPUDriverSettings.from_config_lenient(params, name)
        errors = _binding_errors(conf_dir, settings.binding_errors)
        if configured_factory_name(conf, name) != JAVA_GPU_FACTORY:
            GPUDriverSettings.from_config(params, name)  # flink_gpu's driver is not built with a wrong option
    except Exception as error:
        return TaskManagerView(
            None,
            [f"{where}: the GPU driver of '{name}' cannot be built ({error}), so the TaskManager discovered nothing"],
            errors=errors,
        )
    try:
        nvml_timeout = settings.nvml_timeout_seconds()
    except IllegalConfigurationException:  # a bad --nvml-timeout: in errors
        nvml_timeout = settings.nvml_timeout
    # every UDF's open() looks this up: say what is wrong with the args once per process
    if (key, settings.script_args_text) not in _ARGS_WARNED:
        settings.warn_ignored_args()
        _ARGS_WARNED.add((key, settings.script_args_text))
    if not settings.script_args.coordination_mode:
        return TaskManagerView(
            None,
            [
                f"'{key}' in {where} does not contain --enable-coordination-mode, so the TaskManager's "
                "discovery records nothing in the coordination file for process-mode Python workers to "
                "read; enable it to make its GPUs visible to them"
            ],
            settings.library_path,
            amount,
            settings.metrics_interval,
            settings.health_checks,
            nvml_timeout,
            settings.topology,
            errors,
        )
    return TaskManagerView(
        settings.script_args.coordination_file,
        [f"read '{key}' from {where}"],
        settings.library_path,
        amount,
        settings.metrics_interval,
        settings.health_checks,
        nvml_timeout,
        settings.topology,
        errors,
    )


def _binding_errors(conf_dir: str, errors: "tuple[str, ...]") -> "tuple[str, ...]":
    """``errors`` (the core's sentences, naming key, value and what is accepted) with the file they are in."""
    from flink_gpu.flink.config_files import find_configuration_file

    if not errors:
        return ()
    file = find_configuration_file(conf_dir)  # the file Configuration.from_yaml read
    return tuple(
        f"The TaskManager's configuration {file} has a value bind_gpus cannot use (it reads this key even where "
        f"Flink's Java plugin does not): {error}"
        for error in errors
    )


def configured_amount(conf: Any, name: str) -> tuple[int | None, str | None]:
    """The amount of ``name`` a TaskManager with ``conf`` retrieves, or why it gives no infos for
    ``name`` whatever its driver would find: the framework's own rules, as the TaskManager applies
    them."""
    from flink_gpu.flink.framework import (
        EXTERNAL_RESOURCE_LIST,
        amount_key,
        configured_factory_name,
        driver_factory_key,
        external_resource_amounts,
        external_resource_names,
        load_factory,
    )

    list_key = EXTERNAL_RESOURCE_LIST.key
    try:
        listed = external_resource_names(conf)
        amounts = external_resource_amounts(conf)
    except Exception as error:  # the TaskManager does not start with such a configuration
        return None, f"a TaskManager does not start with it ({error})"
    if name not in listed:
        resources = conf.get_string(list_key, "")
        if not listed:
            return None, f"'{list_key}' is {resources!r}, which enables no external resource"
        return None, f"'{name}' is not listed in '{list_key}' ({resources!r})"
    if name not in amounts:
        amount = conf.get_string(amount_key(name))
        if amount is None:
            return None, f"'{name}' has no amount: '{amount_key(name)}' is not set"
        return None, (f"'{name}' has no valid amount: '{amount_key(name)}' is {amount!r}; it must be positive")
    factory_key = driver_factory_key(name)
    factory_name = configured_factory_name(conf, name)
    if factory_name is None:
        return None, f"'{name}' has no driver factory: '{factory_key}' is not set"
    try:
        load_factory(factory_name)
    except Exception as error:
        return None, (f"the driver factory of '{name}' ('{factory_key}': {factory_name}) cannot be loaded ({error})")
    return amounts[name], None
