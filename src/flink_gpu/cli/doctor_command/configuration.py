"""Which configuration doctor checks, the Flink installation it belongs to, and reading it."""

from __future__ import annotations

import os

from flink_gpu.cli import UsageError
from flink_gpu.cli._output import error_message
from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.config_files import find_configuration_file, load_configuration_file
from flink_gpu.flink.configuration import Configuration


def configuration_file(conf: "str | None") -> "tuple[str, str]":
    """The file doctor reads and its directory; UsageError when there is none."""
    if conf is not None:
        source, path = "CONF_FILE_OR_DIR", conf
    elif os.environ.get("FLINK_CONF_DIR"):
        source, path = "$FLINK_CONF_DIR", os.environ["FLINK_CONF_DIR"]
    elif os.environ.get("FLINK_HOME"):
        source, path = "$FLINK_HOME/conf", os.path.join(os.environ["FLINK_HOME"], "conf")
    else:
        raise UsageError("No configuration to check: give CONF_FILE_OR_DIR, or set FLINK_CONF_DIR or FLINK_HOME.")
    path = os.path.abspath(path)
    try:
        file = find_configuration_file(path)
    except FileNotFoundError as error:
        if os.path.isdir(path):
            raise UsageError(f"{source}: the directory {path} has no config.yaml or flink-conf.yaml.") from None
        raise UsageError(f"{source}: {error}") from None
    return file, path if file != path else os.path.dirname(path)


def flink_home(conf_dir: str) -> "tuple[str, str] | tuple[None, None]":
    """$FLINK_HOME, else the installation the conf directory belongs to, else None.

    A derived home is put into this process's environment, as Flink's bin/ scripts export it, so
    that a relative discovery-script.path resolves as a TaskManager resolves it.
    """
    home = os.environ.get("FLINK_HOME")
    if home:
        return os.path.abspath(home), "$FLINK_HOME"
    parent = os.path.dirname(conf_dir)
    if os.path.basename(conf_dir) == "conf" and any(
        os.path.isdir(os.path.join(parent, d)) for d in ("lib", "plugins", "opt")
    ):
        os.environ["FLINK_HOME"] = parent
        return parent, "the installation of the conf directory"
    return None, None


def load(checkup: Checkup) -> "Configuration | None":
    """The configuration, with a finding for each line Flink skips and each key set more than once;
    None when it cannot be read."""
    try:
        loaded = load_configuration_file(checkup.file)
    except (IllegalConfigurationException, OSError) as error:
        checkup.add(
            "error",
            "configuration",
            f"The configuration cannot be read: {error_message(error)}",
            "Fix the file so that Flink can read it (a Flink TaskManager would not start).",
        )
        return None
    for line in loaded.skipped:
        checkup.add(
            "warning",
            "configuration",
            f"{line.message}; Flink skips that line too.",
            "Write each setting as `key: value` (a space after the colon, a non-empty value).",
        )
    for repeated in loaded.repeated:
        checkup.add(
            "warning",
            "configuration",
            repeated.message,
            f"Keep one line for {repeated.key} (a copy of Flink's own config.yaml already sets some "
            "keys: change the value there instead of adding a line).",
        )
    return Configuration(loaded.data)
