"""``flink-gpu taskmanager-env``: the environment to start a TaskManager with, as ``export`` lines.

``eval "$(flink-gpu --simulate 4 taskmanager-env)"`` before ``start-cluster.sh`` is the one switch
that gives a TaskManager (its discovery script and its Python workers) simulated GPUs.
"""

from __future__ import annotations

import os
import shlex
import sys

from flink_gpu.cli._output import document, emit_json
from flink_gpu.deploy.taskmanager_env import discovery_executable, shell_exports, taskmanager_environment

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    from argparse import Namespace


def simulate_option(args: Namespace) -> str:
    """The simulator option of this command line, as it would be typed again ("" for none)."""
    if args.simulate_spec is not None:
        return f"--simulate-spec {shlex.quote(os.path.abspath(args.simulate_spec))}"
    if args.simulate is not None:
        return f"--simulate {args.simulate}"
    return ""


def eval_command(args: Namespace) -> str:
    """The command that gives a shell the TaskManager environment for this command line's simulator."""
    option = simulate_option(args)
    return f'eval "$(flink-gpu {option + " " if option else ""}taskmanager-env)"'


def run(args: Namespace) -> int:
    env = taskmanager_environment(devices=args.simulate, spec=args.simulate_spec, base=args.environment_before_simulate)
    if args.json:
        emit_json(document("taskmanager-env", environment=env))
        return 0
    sys.stdout.write(f"# for the shell that starts the TaskManagers: {eval_command(args)}\n")
    sys.stdout.write(shell_exports(env))
    discovery = discovery_executable()
    if discovery is not None:  # what config.yaml names for the TaskManager to run (docs/flink-cluster.md)
        sys.stdout.write(f"# config.yaml: external-resource.gpu.param.discovery-script.path: {discovery}\n")
    return 0
