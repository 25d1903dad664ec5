"""``flink-gpu``: the human-facing command line (docs/design.md §6.2).

The commands and exit codes are documented in docs/cli.md, the ``--json`` schema in json_schema.md
beside this file (shipped in the package: ``flink-gpu schema`` prints it); keep them in step with what
the subcommands print.

This module imports only argparse; each subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from typing import Callable, NoReturn

__all__ = ["main"]

_EPILOG = (
    "Exit codes: 0 ok, 1 a check failed or the operation could not be done, 2 usage error. "
    "--simulate N (before or after the subcommand) runs this command against the bundled NVML "
    'simulator; a TaskManager gets it with eval "$(flink-gpu --simulate N taskmanager-env)" '
    "before start-cluster.sh."
)


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """--json/--simulate/--simulate-spec/-v, on the main parser and on each subcommand.

    On subcommands the defaults are suppressed, so that a value given before the subcommand name is
    not overwritten by the subcommand's default.
    """
    default = (lambda value: argparse.SUPPRESS) if suppress else (lambda value: value)
    group = parser.add_argument_group("common options")
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print one JSON document (its schema: `flink-gpu schema`)",
    )
    sim = group.add_mutually_exclusive_group()
    sim.add_argument(
        "--simulate",
        type=_count,
        metavar="N",
        default=default(None),
        help="use the bundled NVML simulator with N GPUs instead of the driver",
    )
    sim.add_argument(
        "--simulate-spec",
        metavar="FILE",
        default=default(None),
        help="use the NVML simulator configured by a JSON spec file",
    )
    group.add_argument(
        "-v", "--verbose", action="store_true", default=default(False), help="log the library's INFO lines to stderr"
    )


def _count(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _pid(text: str) -> int:
    from flink_gpu.coordination import MAX_PID  # the core's bound (csrc/base/process_id.hpp)

    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a process id, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a process id is positive, got {value}")
    if value > MAX_PID:
        raise argparse.ArgumentTypeError(f"a process id is at most {MAX_PID}, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _file_path(text: str) -> str:
    if not text:  # os.path.abspath("") would be the current directory
        raise argparse.ArgumentTypeError("expected the path of the coordination file, got ''")
    return text


def _file_option(parser: argparse.ArgumentParser) -> None:
    """Which coordination file: the same flags for every command that uses one (cli/coordination_file.py)."""
    parser.add_argument(
        "--file",
        type=_file_path,
        metavar="PATH",
        default=None,
        help="the coordination file (default: that of --conf or $FLINK_CONF_DIR, else "
        "/var/tmp/flink-gpu-coordination, the stock nvidia-gpu-discovery.sh's)",
    )
    parser.add_argument(
        "--conf",
        metavar="CONF_FILE_OR_DIR",
        default=None,
        help="the Flink configuration whose coordination file to use (default: $FLINK_CONF_DIR when set)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        default=5.0,
        help="how long to wait for the file's lock (default: 5)",
    )


class _UsageExit(Exception):
    """argparse's usage error, raised instead of exiting so that --json can still answer."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own text and usage line, without its sys.exit
        self.print_usage(sys.stderr)
        raise _UsageExit(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="flink-gpu",
        formatter_class=_Formatter,
        epilog=_EPILOG,
        description="GPUs for Apache Flink workers: list them with their holders, coordinate "
        "several workers on one host, check a Flink configuration.",
    )
    from flink_gpu import __version__

    parser.add_argument("--version", action="version", version=f"flink-gpu {__version__}")
    _common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(  # a command's parser, with the options every command has
        name: str,
        help_text: str,
        description: "str | None" = None,
        parent: "argparse._SubParsersAction[_Parser]" = commands,
    ) -> _Parser:
        sub = parent.add_parser(
            name, help=help_text, description=description or help_text, formatter_class=_Formatter, epilog=_EPILOG
        )
        _common(sub, suppress=True)
        return sub

    for declare in (
        _list_arguments,
        _coordination_arguments,
        _claim_release_arguments,
        _configuration_commands,
        _other_commands,
    ):
        declare(add)
    return parser


def _list_arguments(add: Callable[..., _Parser]) -> None:
    """`list`."""
    sub = add(
        "list",
        "list the GPUs of this host with their holders, slots, health and readings",
        "List the GPUs NVML reports (index, UUID, name, memory, PCI bus id), the process "
        "holding each according to the coordination file (that of the Flink configuration "
        "in --conf or $FLINK_CONF_DIR, unless --file names one), each GPU's health, "
        "utilization, memory, temperature and power, the TaskManagers' slots bound to them, "
        "the devices NVML skipped, and with --topology how the GPUs are joined (NVLink, PCIe, NUMA).",
    )
    _file_option(sub)
    sub.add_argument(
        "--watch",
        type=_seconds,
        nargs="?",
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until Ctrl-C",
    )
    sub.add_argument(
        "--topology",
        action="store_true",
        help="also print how the GPUs are joined, as `nvidia-smi topo -m` does (--json always carries it)",
    )


def _coordination_arguments(add: Callable[..., _Parser]) -> None:
    """`coordination show|clean`."""
    coordination = add(
        "coordination",
        "show or clean the coordination file",
        "Show or clean the coordination file: that of the Flink configuration in --conf or "
        "$FLINK_CONF_DIR, unless --file names one; else the stock default.",
    )
    actions = coordination.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    sub = add("show", "show the file's entries: live, stale (owner dead) and unparsable", parent=actions)
    _file_option(sub)
    sub = add("clean", "remove the entries of dead owners (unparsable lines are kept)", parent=actions)
    _file_option(sub)
    sub.add_argument(
        "--foreign-namespaces",
        action="store_true",
        help="also remove the entries of other PID namespaces whose liveness is unknown "
        "(their owners may still run: only for GPUs you know to be free)",
    )


def _claim_release_arguments(add: Callable[..., _Parser]) -> None:
    """`claim` and `release`."""
    sub = add(
        "claim",
        "claim N GPUs of this host for a process",
        "Claim N GPUs in the coordination file (that of the Flink configuration in --conf or "
        "$FLINK_CONF_DIR, unless --file names one) for a process, as a coordinated Flink "
        "TaskManager in NVML mode would: never an unhealthy GPU, healthy idle ones first, busy "
        "and degraded ones last (each left out or busy one is WARNed), free GPUs before those "
        "of dead owners. The owner defaults "
        "to the parent of this command (normally your shell), because this command exits "
        "at once and GPUs owned by it would be reclaimable right away. The GPUs stay "
        "claimed until `flink-gpu release` or until the owner exits.",
    )
    sub.add_argument("amount", type=_count, metavar="N", help="how many GPUs")
    sub.add_argument(
        "--owner",
        type=_pid,
        metavar="PID",
        default=None,
        help="the owning process (default: the parent of this command, e.g. your shell)",
    )
    sub.add_argument(
        "--topology",
        choices=("prefer", "ignore"),
        default="prefer",
        help="of two or more, the best joined set (NVLink, then PCIe; the default) or index order (ignore)",
    )
    _file_option(sub)

    sub = add(
        "release",
        "release the GPUs a process holds",
        "Release the GPUs a process holds in the coordination file (that of the Flink configuration "
        "in --conf or $FLINK_CONF_DIR, unless --file names one). The owner defaults to "
        "the parent of this command (normally your shell), as for `flink-gpu claim`.",
    )
    sub.add_argument(
        "--owner",
        type=_pid,
        metavar="PID",
        default=None,
        help="the owning process (default: the parent of this command, e.g. your shell)",
    )
    sub.add_argument(
        "--gpu",
        dest="gpus",
        action="append",
        metavar="INDEX",
        default=None,
        help="release only this GPU (repeatable; default: all of the owner's)",
    )
    _file_option(sub)


def _configuration_commands(add: Callable[..., _Parser]) -> None:
    """`doctor` and `resources`, the commands that read a Flink configuration."""
    sub = add(
        "doctor",
        "check a Flink configuration for the reasons a TaskManager sees no GPU",
        "Check a Flink configuration (config.yaml, flink-conf.yaml or a conf directory; "
        "default $FLINK_CONF_DIR, else $FLINK_HOME/conf) for the common reasons a "
        "TaskManager gets no GPU, each printed with its fix. The discovery script is run "
        "once with amount 1 (its coordination file replaced by a temporary one, so nothing "
        "is claimed). Exit 1 when a check fails.",
    )
    sub.add_argument(
        "conf", nargs="?", metavar="CONF_FILE_OR_DIR", default=None, help="the configuration file or conf directory"
    )
    sub.add_argument(
        "--taskmanagers-per-host",
        type=_positive,
        metavar="N",
        default=None,
        help="how many TaskManagers share one host (default: from conf/workers when it exists, else unknown)",
    )

    sub = add(
        "resources",
        "print the Kubernetes or YARN resources of a configuration",
        "Print what a deployment requests for the external resources of a Flink "
        "configuration: the TaskManager container's Kubernetes requests/limits (merged into "
        "a pod template with --pod-template) and the YARN container resources.",
    )
    sub.add_argument("conf", metavar="CONF_FILE_OR_DIR", help="the configuration file or conf directory")
    which = sub.add_mutually_exclusive_group()
    which.add_argument("--kubernetes", action="store_true", help="only Kubernetes")
    which.add_argument("--yarn", action="store_true", help="only YARN")
    sub.add_argument(
        "--pod-template",
        metavar="FILE",
        default=None,
        help="print this pod template with the resources merged into flink-main-container",
    )
    sub.add_argument(
        "--yarn-max",
        dest="yarn_max",
        action="append",
        metavar="TYPE=N",
        default=None,
        help="the YARN cluster's maximum for a resource type, checked as Flink does (repeatable), e.g. yarn.io/gpu=4",
    )


def _other_commands(add: Callable[..., _Parser]) -> None:
    """`demo`, `schema` and `taskmanager-env`."""
    sub = add(
        "demo",
        "see several workers share a (simulated) 4-GPU host",
        "Start three worker processes that claim 2 + 1 + 1 GPUs of a simulated 4-GPU host "
        "through a temporary coordination file, kill one with SIGKILL, and start a fourth "
        "that reclaims the dead worker's GPUs. Everything is cleaned up at the end.",
    )
    sub.add_argument(
        "--real",
        action="store_true",
        help="use this host's NVIDIA driver instead of the simulator (needs 3 GPUs or more)",
    )

    add("schema", "print the schema of the --json documents (shipped with the package)")

    add(
        "taskmanager-env",
        "print the environment a TaskManager needs, to eval before start-cluster.sh",
        "Print `export` lines for the shell that runs start-cluster.sh or taskmanager.sh: with "
        "--simulate N (or --simulate-spec FILE) the simulator's variables, which give the "
        "TaskManager's discovery script and Python workers N simulated GPUs; "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID; PYTHONPATH naming this Python's site-packages (thread mode "
        'runs Python inside the JVM). Use: eval "$(flink-gpu --simulate 4 taskmanager-env)".',
    )


def _use_simulator(args: argparse.Namespace) -> None:
    """Point NVML at the simulator before its first use in this process (see module docstring)."""
    # what a TaskManager started from this shell sees (doctor compares it with the simulation)
    args.environment_before_simulate = dict(os.environ)
    if args.simulate is None and args.simulate_spec is None:
        return
    from flink_gpu import simulator

    if args.simulate_spec is not None:
        from flink_gpu.cli._output import error_message

        try:
            env = simulator.environment(spec=simulator.read_spec(args.simulate_spec))
        except (OSError, ValueError) as error:  # the messages name the file (and the key)
            raise UsageError(f"--simulate-spec: {error_message(error)}") from None
    else:
        try:
            env = simulator.environment(devices=args.simulate)
        except ValueError as error:  # more GPUs than the simulator makes
            raise UsageError(f"--simulate: {error}") from None
    for key in [k for k in os.environ if k.startswith("FLINK_GPU_SIM_")]:
        del os.environ[key]
    os.environ.update(env)


class UsageError(Exception):
    """A bad command line: exit status 2."""


def _configure_logging(verbose: bool, command: str) -> "Callable[[], None]":
    """Send the library's log lines to stderr; returns the function that undoes it, so that
    ``main()`` called in a process (tests, a notebook, a tool embedding it) leaves the
    ``flink_gpu`` logger as it found it instead of adding one more handler per call."""
    import logging

    logger = logging.getLogger("flink_gpu")
    saved = logger.level, logger.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("flink-gpu: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    # doctor and coordination show/clean report every problem themselves (doctor with its fix);
    # the library's WARN lines would say the same things twice
    quiet = logging.ERROR if command in ("doctor", "coordination") else logging.WARNING
    logger.setLevel(logging.INFO if verbose else quiet)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]

    return restore


def _run(args: argparse.Namespace) -> int:
    command = args.command
    if command == "list":
        from flink_gpu.cli import list_command

        return list_command.run(args)
    if command in ("claim", "release", "coordination"):
        from flink_gpu.cli import coordination_command

        return coordination_command.run(args)
    if command == "doctor":
        from flink_gpu.cli import doctor_command

        return doctor_command.run(args)
    if command == "resources":
        from flink_gpu.cli import resources_command

        return resources_command.run(args)
    if command == "schema":
        from importlib.resources import files

        sys.stdout.write(files("flink_gpu.cli").joinpath("json_schema.md").read_text(encoding="utf-8"))
        return 0
    if command == "taskmanager-env":
        from flink_gpu.cli import taskmanager_env_command

        return taskmanager_env_command.run(args)
    from flink_gpu.cli import demo_command

    return demo_command.run(args)


def _command_name(args: argparse.Namespace) -> str:
    if args.command == "coordination":
        return f"coordination {args.action}"
    return str(args.command)


def main(argv: "list[str] | None" = None) -> int:
    """The ``flink-gpu`` console entry point; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version
        return exit_.code if isinstance(exit_.code, int) else 2
    except _UsageExit as error:
        print(error, file=sys.stderr)
        if "--json" in (sys.argv[1:] if argv is None else argv):
            from flink_gpu.cli import _output

            _output.emit_json(_output.document(None, ok=False, error={"type": "UsageError", "message": str(error)}))
        return 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from flink_gpu.cli import _output

    name = _command_name(args)
    restore_logging = None
    try:
        _use_simulator(args)
        restore_logging = _configure_logging(args.verbose, args.command)
        return _run(args)
    except UsageError as error:
        return _output.fail(args, name, error, 2)
    except KeyboardInterrupt:
        print("flink-gpu: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: nothing more to say, and no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except _output.known_errors() as error:
        return _output.fail(args, name, error, 1)
    finally:
        if restore_logging is not None:
            restore_logging()
