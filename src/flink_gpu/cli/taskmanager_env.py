"""``flink-gpu taskmanager-env``: the environment to start a TaskManager with, as ``export`` lines.

``eval "$(flink-gpu --simulate 4 taskmanager-env)"`` before ``start-cluster.sh`` is the one switch
that gives a TaskManager (its discovery script and its Python workers) simulated GPUs.
"""

from __future__ import annotations

import sys

from flink_gpu.cli._output import document, emit_json
from flink_gpu.taskmanager_env import shell_exports, taskmanager_environment


def run(args) -> int:
    env = taskmanager_environment(devices=args.simulate, spec=args.simulate_spec,
                                  base=args.environment_before_simulate)
    if args.json:
        emit_json(document("taskmanager-env", environment=env))
        return 0
    simulated = args.simulate is not None or args.simulate_spec is not None
    sys.stdout.write("# for the shell that starts the TaskManagers: eval \"$(flink-gpu "
                     + ("--simulate ... " if simulated else "") + "taskmanager-env)\"\n")
    sys.stdout.write(shell_exports(env))
    return 0
