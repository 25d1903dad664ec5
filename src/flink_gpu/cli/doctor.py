"""``flink-gpu doctor``: why a Flink configuration gives a TaskManager no GPU, each with its fix.

The checks follow the path a TaskManager takes (SPEC 2, 3): the resource list, each resource's
amount and factory, then for the GPU plugin its discovery script (present, executable, and run
once), its arguments, coordination between the TaskManagers of a host and the host's GPUs.

A configuration naming Flink's Java factory (``org.apache.flink.externalresource.gpu.
GPUDriverFactory``) is checked as a Java TaskManager uses it: the plugin jar must be installed and
the discovery script always runs. One naming a Python factory (``flink_gpu.GPUDriverFactory``) is
checked as ``flink_gpu`` builds its driver (backend selection of SPEC 4.1).
"""

from __future__ import annotations

import os
import shlex
from typing import NamedTuple

from flink_gpu.cli import UsageError
from flink_gpu.cli._output import document, emit_json, error_message, plural
from flink_gpu.config import ConfigOption, Configuration
from flink_gpu.deployment import KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX
from flink_gpu.errors import FlinkException, IllegalConfigurationException, NvmlError
from flink_gpu.framework import (JAVA_FACTORY_ALIASES, amount_key, driver_factory_key,
                                 external_resource_names, param_prefix, system_config_key)
from flink_gpu.gpu.nvml import _ENABLE_COORDINATION, _KNOWN_FLAGS
from flink_gpu.gpu.options import DEFAULT_DISCOVERY_SCRIPT, GPUDriverOptions

JAVA_GPU_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"
_STOCK_SCRIPTS = ("nvidia-gpu-discovery.sh", "flink-gpu-discovery")
# the key suffixes of a resource (SPEC 2.1), to find resources that are configured but not listed
_RESOURCE_SUFFIXES = (".amount", ".driver-factory.class", ".kubernetes.config-key", ".yarn.config-key")
_LEVELS = {"error": "[FAIL]", "warning": "[WARN]", "note": "[note]", "ok": "[ ok ]"}


class Finding(NamedTuple):
    resource: "str | None"
    check: str
    level: str  # error, warning, note, ok
    message: str
    fix: "str | None"


def _snippet(*lines: str) -> str:
    return "\n".join(lines)


def _gpu_snippet(name: str = "gpu", amount: int = 1) -> str:
    return _snippet(f"external-resources: {name}",
                    f"external-resource.{name}.amount: {amount}",
                    f"external-resource.{name}.driver-factory.class: {JAVA_GPU_FACTORY}")


class Doctor:
    def __init__(self, args) -> None:
        self.args = args
        self.findings: "list[Finding]" = []
        self.file, self.conf_dir = _configuration_file(args.conf)
        self.flink_home, self.flink_home_source = _flink_home(self.conf_dir)
        self.config: "Configuration | None" = None
        self._nvml_counts: "dict[str | None, object]" = {}

    def add(self, level: str, check: str, message: str, fix: "str | None" = None,
            resource: "str | None" = None) -> None:
        self.findings.append(Finding(resource, check, level, message, fix))

    # -- the whole configuration ------------------------------------------------------------

    def _load(self) -> Configuration:
        """Loads the file, turning the loader's WARN lines (lines Flink skips) into findings."""
        import logging

        warnings: "list[logging.LogRecord]" = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = warnings.append
        logger = logging.getLogger("flink_gpu.config")
        saved = logger.level, logger.propagate
        logger.setLevel(logging.WARNING)
        logger.propagate = False
        logger.addHandler(handler)
        try:
            return Configuration.from_yaml(self.file)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(saved[0])
            logger.propagate = saved[1]
            for record in warnings:
                self.add("warning", "configuration", f"{record.getMessage()}; Flink skips that "
                         "line too.", "Write each setting as `key: value` (a space after the "
                         "colon, a non-empty value).")

    def check(self) -> None:
        try:
            self.config = self._load()
        except (IllegalConfigurationException, OSError) as error:
            self.add("error", "configuration",
                     f"The configuration cannot be read: {error_message(error)}",
                     "Fix the file so that Flink can read it (a Flink TaskManager would not start).")
            return
        config = self.config
        raw_list = config.get_string("external-resources")
        try:
            names = external_resource_names(config)
        except IllegalConfigurationException as error:
            self.add("error", "resource-list", f"external-resources ({raw_list!r}) cannot be "
                     f"parsed: {error}", "Separate names with ';' and close every quote, e.g. "
                     "`external-resources: gpu`.")
            return
        configured = _configured_names(config)
        if names:
            self.add("ok", "resource-list", f"external-resources lists {', '.join(names)}.")
        for name in sorted(configured - set(names)):
            same = [n for n in names if n.lower() == name.lower()]
            message = (f"external-resource.{name}.* keys are set, but {name!r} is not listed in "
                       f"external-resources ({_listed(names)}): a TaskManager ignores them.")
            if same:
                message += f" Names are case-sensitive: {same[0]!r} is listed."
            listed = ";".join([*names, name])
            self.add("error", "unlisted-resource", message,
                     f"List it: `external-resources: {listed}`"
                     + (f", or rename the keys to external-resource.{same[0]}.*" if same else "")
                     + ".", resource=name)
        if not names:
            why = ("external-resources is 'none'" if raw_list == "none"
                   else "external-resources is not set" if raw_list is None
                   else "external-resources lists no name")
            if not configured:
                self.add("error", "resource-list", f"No external resource is enabled: {why}, so "
                         "a TaskManager gets no GPU.", "Add to the configuration:\n"
                         + _gpu_snippet())
            return
        gpu_resources = [name for name in names if self.check_resource(name)]
        if gpu_resources:
            self.check_slots()

    # -- one resource ---------------------------------------------------------------------

    def check_resource(self, name: str) -> bool:
        """Checks ``name``; True when it is a GPU resource."""
        amount = self.check_amount(name)
        self.check_resource_keys(name)
        factory, factory_name = self.check_factory(name)
        if factory is None:
            return False
        from flink_gpu.gpu.driver import GPUDriverFactory

        params = self.config.prefixed(param_prefix(name))
        if factory_name in JAVA_FACTORY_ALIASES:
            self.check_params(name, params, java=True)
            self.check_java_gpu(name, params, amount)
        elif isinstance(factory, GPUDriverFactory):
            self.check_params(name, params, java=False)
            self.check_python_gpu(name, factory, params, amount)
        else:
            self.check_other_driver(name, factory, factory_name, params)
            return False
        return True

    def check_amount(self, name: str) -> "int | None":
        key = amount_key(name)
        try:
            amount = self.config.get(ConfigOption(key, int))
        except IllegalConfigurationException as error:
            self.add("error", "amount", f"{error} A TaskManager fails to start.",
                     f"Set `{key}` to a whole number of GPUs per TaskManager, e.g. `{key}: 1`.",
                     resource=name)
            return None
        if amount is None:
            self.add("error", "amount", f"{key} is not set: a TaskManager ignores resource "
                     f"{name!r}.", f"Set it to the number per TaskManager, e.g. `{key}: 1`.",
                     resource=name)
            return None
        if amount <= 0:
            self.add("error", "amount", f"{key} is {amount}: it must be positive, so a "
                     f"TaskManager ignores resource {name!r}.", f"Set e.g. `{key}: 1`.",
                     resource=name)
            return None
        self.add("ok", "amount", f"{key} is {amount}.", resource=name)
        return amount

    def check_resource_keys(self, name: str) -> None:
        """Keys of ``name`` no resource option has (``ammount``): Flink ignores a typo silently."""
        import difflib

        prefix = f"external-resource.{name}."
        known = [suffix[1:] for suffix in _RESOURCE_SUFFIXES]
        # keys of a listed resource whose name extends this one ("gpu" and "gpu.a100") are its own
        longer = [f"external-resource.{other}." for other in external_resource_names(self.config)
                  if other.startswith(prefix[len("external-resource."):])]
        for key in self.config.keys():
            rest = key[len(prefix):]
            if (not key.startswith(prefix) or rest in known or rest.startswith("param.")
                    or any(key.startswith(other) for other in longer)):
                continue
            match = difflib.get_close_matches(rest, known, n=1, cutoff=0.6)
            self.add("warning", "resource-keys", f"{key} is not an option of external resources; "
                     "Flink ignores it.",
                     f"Did you mean {prefix}{match[0]}?" if match else
                     f"Remove it; a resource reads {', '.join(prefix + k for k in known)} and "
                     f"{prefix}param.*.", resource=name)

    def check_factory(self, name: str):
        from flink_gpu import framework

        key = driver_factory_key(name)
        value = self.config.get_string(key)
        if value is None or not value.strip():
            self.add("error", "factory", f"{key} is not set: a TaskManager loads no driver for "
                     f"{name!r}.", f"For GPUs set `{key}: {JAVA_GPU_FACTORY}`.", resource=name)
            return None, value
        # The framework's own loader, so that doctor resolves names exactly as a worker does.
        loader = framework._FactoryLoader()
        try:
            factory = loader.load(value)  # not stripped: a worker (and Flink) does not strip it
        except framework._FactoryNotFound as error:
            self.add("error", "factory", f"Factory class {value} of {name!r} was not found "
                     f"({error.detail}).", _factory_fix(key, value), resource=name)
            return None, value
        except framework._FactoryLoadFailed as error:
            self.add("error", "factory", f"Factory class {value} of {name!r} cannot be loaded: "
                     f"{error}", "Fix or reinstall the package that provides it.", resource=name)
            return None, value
        except Exception as error:
            self.add("error", "factory", f"Factory {value} of {name!r} raised "
                     f"{type(error).__name__}: {error}", "Fix the factory's constructor.",
                     resource=name)
            return None, value
        self.add("ok", "factory", f"{key} is {value}.", resource=name)
        return factory, value

    def check_other_driver(self, name, factory, factory_name, params) -> None:
        try:
            driver = factory.create_external_resource_driver(params)
        except Exception as error:
            self.add("error", "driver", f"Factory {factory_name} cannot create the driver of "
                     f"{name!r}: {type(error).__name__}: {error}",
                     f"Fix the external-resource.{name}.param.* keys the factory reads.",
                     resource=name)
            return
        close = getattr(driver, "close", None)
        if callable(close):
            close()
        self.add("ok", "driver", f"The driver of {name!r} was created (doctor does not run "
                 "drivers other than the GPU plugin).", resource=name)

    # -- the GPU plugin -------------------------------------------------------------------

    def check_params(self, name: str, params: Configuration, java: bool) -> None:
        """Keys under ``param.`` the GPU plugin does not read: a typo is silently ignored."""
        import difflib

        flink_keys = [GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key, GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key]
        ours = [GPUDriverOptions.DISCOVERY_MODE.key, GPUDriverOptions.NVML_LIBRARY_PATH.key,
                GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT.key]
        for key in params.keys():
            if key in flink_keys:
                continue
            if key in ours:
                if java:
                    self.add("note", "params", f"{param_prefix(name)}{key} is a flink_gpu option: "
                             "Flink's Java plugin ignores it and always runs the discovery script.",
                             resource=name)
                continue
            match = difflib.get_close_matches(key, flink_keys + ours, n=1, cutoff=0.6)
            self.add("warning", "params", f"{param_prefix(name)}{key} is not an option of the GPU "
                     "plugin; it is ignored.",
                     f"Did you mean {param_prefix(name)}{match[0]}?" if match else
                     f"Remove it; the plugin reads {', '.join(flink_keys + ours)}.", resource=name)

    def check_java_gpu(self, name: str, params: Configuration, amount: "int | None") -> None:
        self.check_plugin_jar(name)
        script = self.check_script(name, params)
        self.check_gpu_common(name, params, amount, "script", script, java=True)

    def check_python_gpu(self, name, factory, params, amount) -> None:
        try:
            driver = factory.create_external_resource_driver(params)
        except (FileNotFoundError, FlinkException, IllegalConfigurationException) as error:
            if isinstance(error, NvmlError):
                fix = ("Install the NVIDIA driver, or set "
                       f"{param_prefix(name)}{GPUDriverOptions.NVML_LIBRARY_PATH.key} to its "
                       "libnvidia-ml.so.1, or use discovery-mode: script.")
            else:
                fix = self._script_fix(name, params, error)
            self.add("error", "driver", f"The GPU driver of {name!r} cannot be built: {error}",
                     fix, resource=name)
            # the arguments, GPU count and coordination are still worth checking
            mode = "nvml" if isinstance(error, NvmlError) else None
            self.check_gpu_common(name, params, amount, mode, None)
            return
        with driver:
            mode, reason = driver.mode, driver.reason
        self.add("ok", "driver", f"flink_gpu uses the {mode} backend: {reason}.", resource=name)
        script = None
        if mode == "script":
            from flink_gpu.gpu.script import check_script

            script = check_script(params.get(GPUDriverOptions.DISCOVERY_SCRIPT_PATH),
                                  self._script_key(name))
        self.check_gpu_common(name, params, amount, mode, script)

    def check_plugin_jar(self, name: str) -> None:
        home = self.flink_home
        if home is None:
            self.add("note", "plugin", "FLINK_HOME is unknown, so doctor cannot check that Flink's "
                     "GPU plugin jar is installed.", "Set FLINK_HOME (or pass the conf directory "
                     "of the Flink installation) to check it.", resource=name)
            return
        import glob

        jars = sorted(glob.glob(os.path.join(home, "plugins", "*", "flink-external-resource-gpu*.jar")))
        if jars:
            self.add("ok", "plugin", f"Flink's GPU plugin is installed: {jars[0]}.", resource=name)
            return
        shipped = os.path.join(home, "opt", "external-resource-gpu")
        if os.path.isdir(shipped):
            fix = f"cp -r {shlex.quote(shipped)} {shlex.quote(os.path.join(home, 'plugins'))}/"
        else:
            fix = ("Download flink-external-resource-gpu-<your Flink version>.jar (Maven Central, "
                   f"org.apache.flink) into {os.path.join(home, 'plugins', 'external-resource-gpu')}/.")
        self.add("error", "plugin", f"Flink's GPU plugin is not installed: no "
                 f"flink-external-resource-gpu jar under {os.path.join(home, 'plugins')}, so a "
                 f"TaskManager cannot load {JAVA_GPU_FACTORY}.", fix, resource=name)

    def _script_key(self, name: str) -> str:
        return f"{param_prefix(name)}{GPUDriverOptions.DISCOVERY_SCRIPT_PATH.key}"

    def _script_fix(self, name, params, error) -> str:
        key = self._script_key(name)
        explicit = params.contains(GPUDriverOptions.DISCOVERY_SCRIPT_PATH)
        ours = _which_discovery()
        drop_in = (f" Or use flink-gpu's NVML drop-in: `{key}: {ours}`." if ours else "")
        if isinstance(error, FileNotFoundError):
            if not explicit or params.get(GPUDriverOptions.DISCOVERY_SCRIPT_PATH) == DEFAULT_DISCOVERY_SCRIPT:
                home = self.flink_home or "$FLINK_HOME"
                return (f"The stock script ships with Flink's GPU plugin: `cp -r {home}/opt/"
                        f"external-resource-gpu {home}/plugins/`." + drop_in)
            return (f"Correct {key} (a relative path is resolved against $FLINK_HOME"
                    f"{'=' + self.flink_home if self.flink_home else ''})." + drop_in)
        if "not executable" in str(error) and "directory" not in str(error):
            path = str(error).split("The discovery script ", 1)[-1].split(" is not executable")[0]
            return f"chmod +x {shlex.quote(path)}"
        return f"Set {key} to the path of an executable discovery script." + drop_in

    def check_script(self, name: str, params: Configuration) -> "str | None":
        from flink_gpu.gpu.script import check_script

        try:
            path = check_script(params.get(GPUDriverOptions.DISCOVERY_SCRIPT_PATH),
                                self._script_key(name))
        except (FileNotFoundError, FlinkException, IllegalConfigurationException) as error:
            self.add("error", "script", str(error), self._script_fix(name, params, error),
                     resource=name)
            return None
        self.add("ok", "script", f"The discovery script {path} exists and is executable.",
                 resource=name)
        return path

    def check_gpu_common(self, name, params, amount, mode, script, java: bool = False) -> None:
        args = params.get(GPUDriverOptions.DISCOVERY_SCRIPT_ARG)
        stock = mode == "nvml" or (script is not None and os.path.basename(script) in _STOCK_SCRIPTS)
        script_args = self.check_args(name, args, stock, script)
        coordination = script_args.coordination_mode if script_args is not None else None
        count = self.check_gpu_count(name, params, amount, coordination, mode)
        self.check_coordination(name, coordination, script_args, amount, count)
        if script is not None:
            self.run_script(name, params, script, args, script_args, java)

    def check_args(self, name, args, stock, script):
        from flink_gpu.gpu.nvml import parse_script_args

        key = f"{param_prefix(name)}{GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key}"
        if not stock and script is not None:
            self.add("note", "args", f"{os.path.basename(script)} is not the stock discovery "
                     f"script, so doctor cannot check its arguments "
                     f"({'unset' if args is None else repr(args)}).", resource=name)
            return None
        try:
            parsed = parse_script_args(args, key)
        except IllegalConfigurationException as error:
            self.add("error", "args", str(error), f"Write `--coordination-file /path/of/file` in "
                     f"{key}.", resource=name)
            return None
        import difflib

        for token in parsed.unknown:
            known = difflib.get_close_matches(token, _KNOWN_FLAGS, n=1, cutoff=0.6)
            if known:
                consequence = (", so coordination mode is OFF" if known[0] == _ENABLE_COORDINATION
                               and not parsed.coordination_mode else "")
                self.add("error", "args", f"{key} has {token!r}, which the discovery script does "
                         f"not know: it is silently ignored{consequence}. (Flink's documentation "
                         f"misspells the flag as --enable-coordination.)",
                         f"Write {known[0]!r} instead of {token!r} in {key}.", resource=name)
            else:
                self.add("warning", "args", f"{key} has {token!r}, which the discovery script "
                         "does not know; it is ignored.", f"Remove {token!r} from {key}; the "
                         f"script understands {_ENABLE_COORDINATION} and --coordination-file PATH.",
                         resource=name)
        return parsed

    def _nvml(self, library: "str | None"):
        if library not in self._nvml_counts:
            from flink_gpu._native import Nvml

            try:
                nvml = Nvml.open(library)
                self._nvml_counts[library] = (nvml, nvml.devices(), nvml.skipped())
            except NvmlError as error:
                self._nvml_counts[library] = error
        return self._nvml_counts[library]

    def check_gpu_count(self, name, params, amount, coordination, mode) -> "int | None":
        library = params.get(GPUDriverOptions.NVML_LIBRARY_PATH) if mode != "script" else None
        found = self._nvml(library or None)
        if isinstance(found, NvmlError):
            if mode != "nvml":  # the nvml backend already reported it
                self.add("note", "nvml", f"NVML is not usable here ({found}), so doctor cannot "
                         "count this host's GPUs.", resource=name)
            return None
        nvml, devices, skipped = found
        for device in skipped:
            self.add("warning", "nvml", device.reason, "Check the device with nvidia-smi; a "
                     "TaskManager skips it.", resource=name)
        count = len(devices)
        if count == 0:
            self.add("error", "gpu-count", f"NVML ({nvml.library_path}) reports no usable GPU "
                     "on this host.", "Run doctor on a GPU host, or check the driver with "
                     "nvidia-smi.", resource=name)
            return count
        if amount is not None and amount > count:
            self.add("error", "gpu-count", f"{amount_key(name)} is {amount}, but this host has "
                     f"{plural(count, 'GPU')}: discovery fails.", f"Lower the amount to at most "
                     f"{count}.", resource=name)
        else:
            self.add("ok", "gpu-count", f"This host has {plural(count, 'GPU')} (NVML "
                     f"{nvml.library_path}).", resource=name)
        return count

    def _taskmanagers_per_host(self):
        """(number, where it comes from) or (None, None) when it cannot be known."""
        if self.args.taskmanagers_per_host is not None:
            return self.args.taskmanagers_per_host, "--taskmanagers-per-host", None
        for file_name in ("workers", "slaves"):
            path = os.path.join(self.conf_dir, file_name)
            if os.path.isfile(path):
                hosts: "dict[str, int]" = {}
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        host = line.split("#", 1)[0].strip()
                        if host:
                            hosts[host] = hosts.get(host, 0) + 1
                if hosts:
                    host, most = max(hosts.items(), key=lambda item: item[1])
                    return most, path, host
        return None, None, None

    def check_coordination(self, name, coordination, script_args, amount, count) -> None:
        args_key = f"{param_prefix(name)}{GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key}"
        per_host, source, host = self._taskmanagers_per_host()
        if coordination is None:  # a custom script: whether it coordinates is its own business
            if per_host == 1:
                self.add("ok", "coordination", f"One TaskManager per host (from {source}): "
                         "coordination is not needed.", resource=name)
            elif per_host is not None:
                self.add("note", "coordination", f"{per_host} TaskManagers share "
                         f"{'host ' + host if host else 'a host'} (from {source}); doctor cannot "
                         "tell whether the custom discovery script gives them different GPUs.",
                         resource=name)
            return
        if not coordination:
            fix = (f"Add {_ENABLE_COORDINATION} to {args_key} (every TaskManager of a host then "
                   "shares /var/tmp/flink-gpu-coordination and gets different GPUs).")
            if per_host is not None and per_host > 1:
                where = f"host {host}" if host else "a host"
                self.add("error", "coordination", f"{per_host} TaskManagers share {where} "
                         f"(from {source}), but coordination is off: each one takes the first "
                         f"GPU(s) of the host, so they all get the same ones.", fix, resource=name)
            elif per_host == 1:
                self.add("ok", "coordination", f"One TaskManager per host (from {source}): "
                         "coordination is not needed.", resource=name)
            elif self._deployment_isolates(name):
                self.add("note", "coordination", "Coordination is off; on Kubernetes/YARN each "
                         "TaskManager container is given its own GPUs, so it is not needed there.",
                         resource=name)
            else:
                self.add("note", "coordination", "Coordination is off, and doctor cannot tell how "
                         "many TaskManagers share a host (no conf/workers file). If several do, "
                         "they all get the same first GPU(s).", fix + " Or tell doctor with "
                         "--taskmanagers-per-host N.", resource=name)
            return
        path = script_args.coordination_file
        self.add("ok", "coordination", f"Coordination mode is on (file {path}).", resource=name)
        if per_host is not None and amount is not None and count is not None \
                and per_host * amount > count:
            self.add("error", "gpu-count", f"{per_host} TaskManagers per host (from {source}) "
                     f"× {amount} GPU(s) each > the host's {count} GPUs: the last TaskManagers "
                     "get none.", f"Lower {amount_key(name)} or the number of TaskManagers per "
                     "host.", resource=name)
        self.check_coordination_file(name, path)

    def _deployment_isolates(self, name: str) -> bool:
        return any((self.config.get_string(system_config_key(name, suffix)) or "").strip()
                   for suffix in (KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX))

    def check_coordination_file(self, name: str, path: str) -> None:
        from flink_gpu import coordination

        flag = "" if path == coordination.DEFAULT_PATH else f" --file {shlex.quote(path)}"
        if not os.path.lexists(path):
            directory = os.path.dirname(os.path.abspath(path)) or "/"
            if not os.access(directory, os.W_OK | os.X_OK):
                self.add("error", "coordination-file", f"The coordination file {path} does not "
                         f"exist and {directory} is not writable for this user, so it cannot be "
                         "created.", f"Create it writable for the TaskManagers' user (touch "
                         f"{shlex.quote(path)}; chmod 666 {shlex.quote(path)}), or choose another "
                         "--coordination-file.", resource=name)
            return
        try:
            snapshot = coordination.snapshot(path, timeout=2.0)
        except (OSError, TimeoutError) as error:
            self.add("error", "coordination-file", f"The coordination file cannot be used: {error}",
                     "Make it a regular file that the TaskManagers' user can read and write.",
                     resource=name)
            return
        if not os.access(path, os.R_OK | os.W_OK):
            self.add("error", "coordination-file", f"The coordination file {path} is not readable "
                     "and writable for this user.", f"chmod 666 {shlex.quote(path)} (or run the "
                     "TaskManagers as its owner).", resource=name)
        stale = snapshot.stale
        if stale:
            self.add("warning", "coordination-file", f"{plural(len(stale), 'entry', 'entries')} of "
                     f"{path} belong to dead processes (GPU {', '.join(e.index for e in stale)}); "
                     "they are reclaimed when GPUs run short.",
                     f"flink-gpu coordination clean{flag}", resource=name)
        for line in snapshot.unparsable:
            self.add("warning", "coordination-file", f"Line {line.line_number} of {path} cannot be "
                     f"parsed ({line.text!r}); the GPU it names is never reclaimed.",
                     f"Delete or correct that line of {path}.", resource=name)

    def run_script(self, name, params, script, args, script_args, java: bool = False) -> None:
        import tempfile

        from flink_gpu._native import parse_gpu_indices, split_output_lines
        from flink_gpu.gpu.script import exec_tokens, run_script

        try:  # also for the Java plugin, where it only shortens doctor's own run
            timeout = params.get(GPUDriverOptions.DISCOVERY_SCRIPT_TIMEOUT)
        except IllegalConfigurationException:
            if not java:
                raise
            # Flink's Java plugin ignores the option (check_params notes that) and waits a fixed
            # 10 s: a value the TaskManager never reads must not abort doctor
            timeout = 10.0
        with tempfile.TemporaryDirectory(prefix="flink-gpu-doctor-") as scratch:
            tokens = exec_tokens(args)
            if script_args is not None and script_args.coordination_mode:
                # claim nothing in the real file: the run's GPUs would stay listed under this
                # short-lived process until someone reclaims them
                tokens = _with_coordination_file(tokens, os.path.join(scratch, "coordination"))
            argv = [script, "1", *tokens]
            shown = " ".join(shlex.quote(a) for a in argv)
            try:
                result = run_script(argv, timeout if timeout and timeout > 0 else 10.0)
            except TimeoutError as error:
                self.add("error", "script-run", f"`{shown}`: {error}", "Run it by hand to see "
                         "where it hangs (a hung nvidia-smi is the usual cause).", resource=name)
                return
            except FlinkException as error:
                self.add("error", "script-run", str(error), "Check the script's interpreter "
                         "line (#!) and permissions.", resource=name)
                return
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        if result.returncode != 0:
            status = (f"exit status {result.returncode}" if result.returncode >= 0
                      else f"signal {-result.returncode}")
            detail = _quote_output(stdout, stderr)
            if "Could not get enough GPU resources" in stdout:
                fix = ("No GPU is free: see `flink-gpu list`; entries of dead TaskManagers are "
                       "removed by `flink-gpu coordination clean`.")
            elif "nvidia-smi" in stdout + stderr:
                ours = _which_discovery()
                fix = ("Install the NVIDIA driver (the stock script runs nvidia-smi)"
                       + (f", or use the NVML drop-in: `{self._script_key(name)}: {ours}`." if ours else "."))
            else:
                fix = f"Run it by hand: {shown}"
            self.add("error", "script-run", f"The discovery script failed with {status} when run "
                     f"as `{shown}`{detail}: a TaskManager gets no GPU.", fix, resource=name)
            return
        lines = split_output_lines(stdout)
        indices = parse_gpu_indices(lines[0]) if lines else []
        if not indices:
            self.add("error", "script-run", f"`{shown}` exited 0 but printed no GPU index"
                     f"{_quote_output(stdout, stderr)}: a TaskManager gets an empty set.",
                     "Make the script print the indices on its first line, e.g. `0,1`.",
                     resource=name)
            return
        if len(lines) > 1:
            self.add("warning", "script-run", f"`{shown}` printed {len(lines)} lines; Flink reads "
                     "only the first.", "Print the indices on one line; send the rest to stderr.",
                     resource=name)
        replaced = (" (with a temporary coordination file: nothing was claimed)"
                    if script_args is not None and script_args.coordination_mode else "")
        self.add("ok", "script-run", f"`{shown}` gave GPU {', '.join(indices)}{replaced}.",
                 resource=name)

    # -- across resources -----------------------------------------------------------------

    def check_slots(self) -> None:
        try:
            slots = self.config.get(ConfigOption("taskmanager.numberOfTaskSlots", int))
        except IllegalConfigurationException as error:
            self.add("error", "task-slots", str(error), "Set taskmanager.numberOfTaskSlots to a "
                     "whole number.")
            return
        if slots is not None and slots > 1:
            self.add("note", "task-slots", f"taskmanager.numberOfTaskSlots is {slots}: the slots "
                     "of a TaskManager share its GPUs (every slot sees the same GPU infos); give "
                     "each slot its own GPU in your operator, e.g. by subtask index.")

    # -- output ---------------------------------------------------------------------------

    def summary(self) -> dict:
        count = {level: sum(1 for f in self.findings if f.level == level)
                 for level in ("error", "warning", "note")}
        return {"errors": count["error"], "warnings": count["warning"], "notes": count["note"]}

    def print(self) -> None:
        print(f"Configuration: {self.file}")
        if self.flink_home:
            print(f"FLINK_HOME: {self.flink_home}"
                  + (f" ({self.flink_home_source})" if self.flink_home_source else ""))
        print()
        for finding in self.findings:
            prefix = _LEVELS[finding.level]
            who = f"{finding.resource}: " if finding.resource else ""
            print(f"{prefix} {who}{finding.message}")
            if finding.fix:
                lines = finding.fix.split("\n")
                print(f"       fix: {lines[0]}")
                for line in lines[1:]:
                    print(f"            {line}")
        summary = self.summary()
        print()
        if summary["errors"]:
            print(f"{plural(summary['errors'], 'check')} failed, "
                  f"{plural(summary['warnings'], 'warning')}.")
        else:
            print(f"No problem found ({plural(summary['warnings'], 'warning')}, "
                  f"{plural(summary['notes'], 'note')}).")


def _listed(names) -> str:
    return f"listed: {', '.join(names)}" if names else "it lists nothing"


def _configured_names(config: Configuration) -> "set[str]":
    names = set()
    for key in config.keys():
        if not key.startswith("external-resource."):
            continue
        rest = key[len("external-resource."):]
        if ".param." in rest:
            names.add(rest.split(".param.", 1)[0])
            continue
        for suffix in _RESOURCE_SUFFIXES:
            if rest.endswith(suffix) and len(rest) > len(suffix):
                names.add(rest[:-len(suffix)])
                break
    return names


def _factory_fix(key: str, value: str) -> str:
    import difflib

    from flink_gpu.framework import ENTRY_POINT_GROUP

    known = [JAVA_GPU_FACTORY, "flink_gpu.GPUDriverFactory", "flink_gpu.gpu.GPUDriverFactory"]
    match = difflib.get_close_matches(value.strip(), known, n=1, cutoff=0.8)
    if match:
        return f"Did you mean `{key}: {match[0]}`?"
    return (f"For GPUs use `{key}: {JAVA_GPU_FACTORY}`; for another driver install the package "
            f"that provides it (an import path, or an entry point in group {ENTRY_POINT_GROUP}).")


def _with_coordination_file(tokens: "list[str]", path: str) -> "list[str]":
    out = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token == "--coordination-file":
            skip = True
            continue
        out.append(token)
    return [*out, "--coordination-file", path]


def _quote_output(stdout: str, stderr: str) -> str:
    parts = []
    for label, text in (("stdout", stdout), ("stderr", stderr)):
        text = text.strip()
        if text:
            if len(text) > 300:
                text = text[:300] + "..."
            parts.append(f"{label}: {text!r}")
    return f" ({'; '.join(parts)})" if parts else ""


def _which_discovery() -> "str | None":
    """The flink-gpu-discovery executable installed with this package, if any."""
    import shutil
    import sys
    import sysconfig

    import flink_gpu

    candidates = [os.path.join(sysconfig.get_path("scripts"), "flink-gpu-discovery"),
                  os.path.join(os.path.dirname(sys.executable), "flink-gpu-discovery"),
                  os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__))),
                               "bin", "flink-gpu-discovery")]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("flink-gpu-discovery")


def _configuration_file(conf: "str | None"):
    """The file doctor reads and its directory; UsageError when there is none."""
    if conf is not None:
        source, path = "CONF_FILE_OR_DIR", conf
    elif os.environ.get("FLINK_CONF_DIR"):
        source, path = "$FLINK_CONF_DIR", os.environ["FLINK_CONF_DIR"]
    elif os.environ.get("FLINK_HOME"):
        source, path = "$FLINK_HOME/conf", os.path.join(os.environ["FLINK_HOME"], "conf")
    else:
        raise UsageError("No configuration to check: give CONF_FILE_OR_DIR, or set FLINK_CONF_DIR "
                         "or FLINK_HOME.")
    path = os.path.abspath(path)
    if os.path.isdir(path):
        for file_name in ("config.yaml", "flink-conf.yaml"):  # Flink 2.x's first, as Flink
            candidate = os.path.join(path, file_name)
            if os.path.isfile(candidate):
                return candidate, path
        raise UsageError(f"{source}: the directory {path} has no config.yaml or flink-conf.yaml.")
    if not os.path.exists(path):
        raise UsageError(f"{source}: {path} does not exist.")
    return path, os.path.dirname(path)


def _flink_home(conf_dir: str):
    """$FLINK_HOME, else the installation the conf directory belongs to, else None.

    A derived home is put into this process's environment, as Flink's bin/ scripts export it, so
    that a relative discovery-script.path resolves as a TaskManager resolves it.
    """
    home = os.environ.get("FLINK_HOME")
    if home:
        return os.path.abspath(home), "$FLINK_HOME"
    parent = os.path.dirname(conf_dir)
    if os.path.basename(conf_dir) == "conf" and any(
            os.path.isdir(os.path.join(parent, d)) for d in ("lib", "plugins", "opt")):
        os.environ["FLINK_HOME"] = parent
        return parent, "the installation of the conf directory"
    return None, None


def run(args) -> int:
    doctor = Doctor(args)
    doctor.check()
    summary = doctor.summary()
    ok = summary["errors"] == 0
    if args.json:
        emit_json(document("doctor", ok=ok, configuration=doctor.file, flink_home=doctor.flink_home,
                           findings=[f._asdict() for f in doctor.findings], summary=summary))
    else:
        doctor.print()
    return 0 if ok else 1
