"""Which coordination file a command uses (``list``, ``coordination show|clean``, ``claim``, ``release``):
``--file``; else that of the Flink configuration in ``--conf`` or ``$FLINK_CONF_DIR`` (its GPU resource's
``discovery-script.args``); else the stock default. One resolver, so that in a cluster's shell every
command reads and writes the file its TaskManagers claim in."""

from __future__ import annotations

import os
from dataclasses import dataclass

from flink_gpu.cli import UsageError

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace
    from typing import Any

    from flink_gpu.flink.configuration import Configuration

#: After "the stock default file records nothing": where a cluster's own file is found.
_CLUSTERS_OWN = (
    "\n  If the cluster uses its own --coordination-file, read that one: --conf <its Flink conf dir>,"
    "\n  FLINK_CONF_DIR=<its Flink conf dir>, or --file <its coordination file>."
)


@dataclass(frozen=True)
class CoordinationFile:
    """The file a command uses, and where that came from."""

    path: str  #: absolute
    #: ``"--conf <conf>"`` or ``"$FLINK_CONF_DIR <dir>"`` when it is that Flink configuration's; None otherwise
    source: "str | None"
    #: why ``$FLINK_CONF_DIR`` gave no file, so that the stock default is used; None otherwise
    note: "str | None"
    #: what a command suggested to the user repeats to use the same file: " --file <path>", " --conf <conf>" or ""
    flags: str
    #: the stock default, which nothing named (a cluster may use its own file)
    default: bool

    def named(self) -> str:
        """The file as a sentence names it: its path, and the Flink configuration it is of."""
        return self.path if self.source is None else f"{self.path} (of the Flink configuration in {self.source})"

    def json_fields(self) -> "dict[str, Any]":
        """The file in a ``--json`` document: ``path``, ``from`` (the source) and ``note``."""
        return {"path": self.path, "from": self.source, "note": self.note}

    def records_nothing(self, exists: bool, outcome: str = "no GPU is claimed through it") -> str:
        """That the file does not exist (or holds no claim) and what follows, and for the stock default how to
        read a cluster's own file."""
        what = "does not exist" if not exists else "holds no claim"
        return f"Coordination file {self.named()} {what}: {outcome}." + (_CLUSTERS_OWN if self.default else "")


def print_note(file: CoordinationFile) -> None:
    """Why ``$FLINK_CONF_DIR`` gave no file, where a command says what it did with the default instead."""
    if file.note is not None:
        print(f"Note: {file.note}")


def resolve(args: "Namespace", writes: bool = False) -> CoordinationFile:
    """The file of ``args.file`` / ``args.conf`` / ``$FLINK_CONF_DIR`` / the default, in that order.
    UsageError when ``--conf`` cannot be read or names no coordinated GPU resource; the same for
    ``$FLINK_CONF_DIR`` (set for any cluster, not only a GPU one) gives the default with a note saying why,
    except that a command that ``writes`` (claim, release, clean) refuses a ``$FLINK_CONF_DIR`` it cannot
    read: the cluster's file may be another, and a claim there would never be released here."""
    import shlex

    from flink_gpu.coordination import DEFAULT_PATH

    if args.file is not None:
        return CoordinationFile(os.path.abspath(args.file), None, None, f" --file {shlex.quote(args.file)}", False)
    if args.conf is not None:
        path = _coordination_file_of(_read_configuration(args.conf, "--conf"), args.conf, "--conf")
        return CoordinationFile(path, f"--conf {args.conf}", None, f" --conf {shlex.quote(args.conf)}", False)
    conf = os.environ.get("FLINK_CONF_DIR")
    if not conf:
        return CoordinationFile(DEFAULT_PATH, None, None, "", True)
    try:
        config = _read_configuration(conf, "$FLINK_CONF_DIR")
    except UsageError as unreadable:
        if writes:
            raise
        why = unreadable
    else:
        try:  # the next command run from this shell reads the same $FLINK_CONF_DIR: no flag to repeat
            path = _coordination_file_of(config, conf, "$FLINK_CONF_DIR")
            return CoordinationFile(path, f"$FLINK_CONF_DIR {conf}", None, "", False)
        except UsageError as no_file:
            why = no_file
    # what a command suggests names the file: the shell's $FLINK_CONF_DIR may give another one later
    return CoordinationFile(
        DEFAULT_PATH, None, f"{why} Using the stock default file.", f" --file {shlex.quote(DEFAULT_PATH)}", True
    )


def _read_configuration(conf: str, source: str) -> "tuple[Configuration, Any]":
    """The Flink configuration in ``conf`` and its external resources' names; UsageError when it cannot be read."""
    from flink_gpu.errors import IllegalConfigurationException
    from flink_gpu.flink.configuration import Configuration
    from flink_gpu.flink.framework import external_resource_names

    try:
        config = Configuration.from_yaml(conf)
        return config, external_resource_names(config)
    except (OSError, IllegalConfigurationException) as error:
        from flink_gpu.cli._output import error_message

        raise UsageError(
            f"{source}: cannot read the Flink configuration {conf}: {error_message(error)} "
            "(give the coordination file with --file instead)."
        ) from None


def _coordination_file_of(read: "tuple[Configuration, Any]", conf: str, source: str) -> str:
    """The coordination file of the configuration's first coordinated GPU resource; UsageError when none is."""
    from flink_gpu.flink.framework import param_prefix
    from flink_gpu.gpu.options import GPUDriverOptions
    from flink_gpu.gpu.settings import GPUDriverSettings

    config, names = read
    tried = []
    for name in sorted(names):
        settings = GPUDriverSettings.from_config_lenient(config.prefixed(param_prefix(name)), name)
        if settings.script_args.coordination_mode:
            return os.path.abspath(settings.script_args.coordination_file)
        tried.append(f"{param_prefix(name)}{GPUDriverOptions.DISCOVERY_SCRIPT_ARG.key}")
    why = (
        f"{', '.join(tried)} {'has' if len(tried) == 1 else 'have'} no --enable-coordination-mode"
        if tried
        else "it enables no external resource ('external-resources')"
    )
    raise UsageError(
        f"{source}: the Flink configuration {conf} gives no coordination file: {why}. "
        "Its TaskManagers record no GPU holders; give a file with --file."
    )
