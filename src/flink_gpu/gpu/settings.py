"""The GPU driver's settings, read from its ``param.`` keys and validated once (docs/design.md §3.1).

:class:`GPUDriverSettings` is what ``GPUDriver`` chooses its backend by and what it hands the
backends; ``flink-gpu doctor`` and :mod:`flink_gpu.pyflink` read a resource's settings through it
too, so that each option has one reading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.configuration import ConfigOption, Configuration
from flink_gpu.flink.framework import param_prefix
from flink_gpu.flink.script_protocol import ScriptArgs, parse_script_args, warn_ignored
from flink_gpu.gpu.options import DISCOVERY_MODES, GPUDriverOptions
from flink_gpu.nvml import DEFAULT_METRICS_INTERVAL, DEFAULT_NVML_TIMEOUT, HEALTH_CHECKS, read_settings

_log = logging.getLogger("flink_gpu.gpu.settings")


@dataclass(frozen=True)
class GPUDriverSettings:
    """The options of one GPU resource, read and validated."""

    mode: str  # "auto", "nvml" or "script"
    script_path: str  # discovery-script.path as configured, else Flink's default
    script_path_set: bool  # discovery-script.path is configured (selects the script in auto mode)
    script_args_text: "str | None"  # discovery-script.args as configured (None: unset)
    script_args: ScriptArgs  # script_args_text read with the stock script's grammar
    timeout: float  # discovery-script.timeout, seconds, positive
    library_path: "str | None"  # nvml.library-path; None when unset or blank
    resource_name: "str | None" = None  # the resource whose params these are, when known
    # The NVML backend's settings, read by the core (flink_gpu.nvml.read_settings): a parameter, else its
    # flag in the args (--busy-gpus, --topology, --nvml-timeout), else the default.
    busy_gpus: str = "avoid"  # "avoid", "exclude" or "ignore"
    topology: str = "prefer"  # "prefer" or "ignore"
    health_checks: "tuple[str, ...]" = HEALTH_CHECKS  # health-checks: the enforced checks, in HEALTH_CHECKS order
    metrics_interval: float = DEFAULT_METRICS_INTERVAL  # metrics.interval, seconds, at least MIN_METRICS_INTERVAL
    nvml_timeout: float = DEFAULT_NVML_TIMEOUT  # seconds, positive: NVML init, enumeration, reads
    flag_error: "str | None" = (
        None  # the first --busy-gpus, --topology or --nvml-timeout in the args with a wrong value
    )
    overrides: "tuple[str, ...]" = ()  # a WARN per parameter that overrides its flag with another value
    # The wrong values of what a binding reads (the parameters topology, nvml-timeout, health-checks and
    # metrics.interval; the first of --topology, --nvml-timeout in the args), as the core words them: a lenient
    # read keeps them, for bind_gpus reads these of the TaskManager's configuration even where Flink's Java
    # plugin reads none of them. busy-gpus is not among them: a binding reads no busy policy.
    binding_parameter_errors: "tuple[str, ...]" = ()
    binding_flag_error: "str | None" = None

    @classmethod
    def from_config(
        cls, params: "Configuration | Mapping[str, object] | None", resource_name: "str | None" = None
    ) -> GPUDriverSettings:
        """The settings in ``params`` (the driver-relative keys, ``external-resource.<name>.param.``
        stripped). Raises ``IllegalConfigurationException`` for a bad mode, timeout, nvml-timeout, busy-gpus,
        topology, health-checks or metrics.interval, naming the full key when ``resource_name`` is given; the NVML
        backend's settings are read from their raw text by the core's one parser, which flink-gpu-discovery
        reads its flags with (flink_gpu.nvml.read_settings). Nothing is logged: :meth:`warn_ignored_args`
        WARNs about the arguments when a backend reads them."""
        return cls._read(params, resource_name)

    @classmethod
    def _read(
        cls, params: "Configuration | Mapping[str, object] | None", resource_name: "str | None", lenient: bool = False
    ) -> GPUDriverSettings:
        config = Configuration.coerce(params)

        def read(reader: "Callable[[Configuration], Any]") -> Any:
            try:
                return reader(config)
            except IllegalConfigurationException:
                if not lenient:
                    raise
                return reader(_NOTHING_SET)  # the option's default

        options = GPUDriverOptions
        mode = read(lambda c: _choice(c, options.DISCOVERY_MODE, DISCOVERY_MODES, resource_name))
        timeout = read(lambda c: _positive_duration(c, options.DISCOVERY_SCRIPT_TIMEOUT, resource_name))
        args = config.get(options.DISCOVERY_SCRIPT_ARG)
        script_args = parse_script_args(args, warn=False)
        key_prefix = "" if resource_name is None else param_prefix(resource_name)
        nvml_texts = (
            config.get_string(options.NVML_TIMEOUT),
            config.get_string(options.HEALTH_CHECKS),
            config.get_string(options.METRICS_INTERVAL),
        )
        topology_text = config.get_string(options.TOPOLOGY)
        nvml = read_settings(
            key_prefix,
            config.get_string(options.BUSY_GPUS),
            *nvml_texts,
            script_args.busy_gpus,
            script_args.nvml_timeout,
            topology=topology_text,
            topology_flag=script_args.topology,
        )
        if nvml.parameter_errors and not lenient:
            raise IllegalConfigurationException(nvml.parameter_errors[0])
        binding = nvml
        if nvml.parameter_errors or nvml.flag_error:
            # which of them a binding reads: the same reader, without busy-gpus
            binding = read_settings(
                key_prefix,
                None,
                *nvml_texts,
                None,
                script_args.nvml_timeout,
                topology=topology_text,
                topology_flag=script_args.topology,
            )
        library_path = config.get(options.NVML_LIBRARY_PATH)
        if library_path is not None and not library_path.strip():
            library_path = None
        path_option = options.DISCOVERY_SCRIPT_PATH
        return cls(
            mode=mode,
            script_path=config.get(path_option),
            script_path_set=config.contains(path_option),
            script_args_text=args,
            script_args=script_args,
            timeout=timeout,
            library_path=library_path,
            resource_name=resource_name,
            busy_gpus=nvml.busy_gpus,
            topology=nvml.topology,
            health_checks=nvml.health_checks,
            metrics_interval=nvml.metrics_interval,
            nvml_timeout=nvml.nvml_timeout,
            flag_error=nvml.flag_error,
            overrides=nvml.warnings,
            binding_parameter_errors=binding.parameter_errors,
            binding_flag_error=binding.flag_error,
        )

    @classmethod
    def from_config_lenient(
        cls, params: "Configuration | Mapping[str, object] | None", resource_name: "str | None" = None
    ) -> GPUDriverSettings:
        """As :meth:`from_config`, but an invalid option of ours (``discovery-mode``,
        ``discovery-script.timeout``, ``busy-gpus``, ``topology``, ``health-checks``, ``metrics.interval``,
        ``nvml-timeout``) takes its default instead of failing, each read on its own; valid ones are kept.

        That is what Flink's Java GPU plugin, which reads only ``discovery-script.path`` and
        ``.args``, makes of such a configuration, so readers of one (doctor, the PyFlink bridge)
        see what its TaskManager does; doctor also uses it to go on checking after it reported
        the invalid option."""
        return cls._read(params, resource_name, lenient=True)

    @property
    def binding_errors(self) -> "tuple[str, ...]":
        """Every wrong value a binding reads: :attr:`binding_parameter_errors`, then the flag's."""
        flag = (self.binding_flag_error,) if self.binding_flag_error else ()
        return self.binding_parameter_errors + flag

    def key(self, option: ConfigOption[Any]) -> str:
        """The key of ``option`` as the user wrote it: full when the resource is known."""
        return _key(option, self.resource_name)

    def _checked_flags(self) -> None:
        """The NVML backends read ``--busy-gpus``, ``--topology`` and ``--nvml-timeout`` in ``discovery-script.args`` as
        flink-gpu-discovery does: a wrong value is an ``IllegalConfigurationException`` naming the args key,
        set parameters or not (the stock script ignores the flags; only our backends read them)."""
        if self.flag_error is not None:
            raise IllegalConfigurationException(self.flag_error)

    def busy_policy(self, warn: bool = True) -> str:
        """The ``busy-gpus`` policy of the NVML backend (docs/design.md §9.1): the parameter when
        it is set, else ``--busy-gpus`` in ``discovery-script.args``, else ``avoid``.

        Unless ``warn`` is false, each parameter that overrides its flag with another value is a WARN. A
        wrong flag value raises ``IllegalConfigurationException`` (:meth:`_checked_flags`).
        """
        self._checked_flags()
        if warn:
            for override in self.overrides:
                _log.warning("%s", override)
        return self.busy_gpus

    def topology_policy(self) -> str:
        """The ``topology`` policy of the NVML backend: the parameter when it is set, else ``--topology`` in
        ``discovery-script.args``, else ``prefer``. A wrong flag value raises
        ``IllegalConfigurationException`` (:meth:`_checked_flags`); overrides are WARNed by
        :meth:`busy_policy`."""
        self._checked_flags()
        return self.topology

    def nvml_timeout_seconds(self) -> float:
        """The deadline of the NVML backend's nvmlInit, enumeration and state reads (docs/design.md
        §9.5): the ``nvml-timeout`` parameter when it is set, else ``--nvml-timeout`` in
        ``discovery-script.args`` (what flink-gpu-discovery reads there), else 5 s. A wrong flag value
        raises ``IllegalConfigurationException`` (:meth:`_checked_flags`)."""
        self._checked_flags()
        return self.nvml_timeout

    def warn_ignored_args(self) -> None:
        """WARN about what the stock script's grammar ignores in ``discovery-script.args``."""
        warn_ignored(self.script_args, self.key(GPUDriverOptions.DISCOVERY_SCRIPT_ARG), self.script_args_text)


_NOTHING_SET = Configuration()  # what an option reads as when it is not set: its default


def _choice(
    config: Configuration,
    option: ConfigOption[str],
    allowed: "tuple[str, ...]",
    resource_name: "str | None",
) -> str:
    """``option``'s value, case and surrounding blanks ignored, one of ``allowed``."""
    value: str = config.get(option)  # it has a default
    choice = value.strip().lower()
    if choice not in allowed:
        raise IllegalConfigurationException(
            f"Invalid value '{value}' for key '{_key(option, resource_name)}': expected one of {', '.join(allowed)}."
        )
    return choice


def _positive_duration(config: Configuration, option: ConfigOption[float], resource_name: "str | None") -> float:
    """``option``'s duration in seconds; not positive is an error naming the full key."""
    value: float = config.get(option)  # it has a default
    if not value > 0:
        raise IllegalConfigurationException(
            f"Invalid value for key '{_key(option, resource_name)}': the timeout must be positive, got {value} s."
        )
    return value


def _key(option: ConfigOption[Any], resource_name: "str | None") -> str:
    return option.key if resource_name is None else param_prefix(resource_name) + option.key
