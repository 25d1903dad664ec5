"""``flink-gpu doctor``: why a Flink configuration gives a TaskManager no GPU, each with its fix.

The checks follow the path a TaskManager takes (docs/design.md §2, §3): the resource list, each
resource's amount and factory, then for the GPU plugin its discovery script (present, executable,
and run once), its arguments, coordination between the TaskManagers of a host and the host's GPUs;
before them, whether the ports the cluster binds are free (a cluster left running holds them).
Each concept is a module of this package; :func:`run` is the whole order of the checks.
"""

from __future__ import annotations

from flink_gpu.cli._output import document, emit_json
from flink_gpu.cli.doctor_command import configuration, factory, gpu_plugin, ports, resources, taskmanagers
from flink_gpu.cli.doctor_command.findings import Checkup, print_report
from flink_gpu.cli.doctor_command.taskmanager_env import check_taskmanager_environment
from flink_gpu.flink.framework import JAVA_FACTORY_ALIASES, param_prefix

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:
    import argparse


def _check_resource(checkup: Checkup, name: str) -> bool:
    """Checks resource ``name``; True when it is a GPU resource."""
    from flink_gpu.gpu.driver import GPUDriverFactory

    amount = resources.check_amount(checkup, name)
    resources.check_resource_keys(checkup, name)
    checked = factory.check_factory(checkup, name)
    if checked is None:
        return False
    loaded, factory_name = checked
    params = checkup.config.prefixed(param_prefix(name))
    if factory_name in JAVA_FACTORY_ALIASES:
        gpu_plugin.check_params(checkup, name, params, java=True)
        gpu_plugin.check_java_gpu(checkup, name, params, amount)
    elif isinstance(loaded, GPUDriverFactory):
        gpu_plugin.check_params(checkup, name, params, java=False)
        gpu_plugin.check_python_gpu(checkup, name, loaded, params, amount)
    else:
        factory.check_other_driver(checkup, name, loaded, factory_name, params)
        return False
    return True


def check(checkup: Checkup) -> None:
    loaded = configuration.load(checkup)
    if loaded is None:
        return
    checkup.config = loaded
    ports.check_ports(checkup)
    names = resources.check_resource_list(checkup)
    gpu_resources = [name for name in names if _check_resource(checkup, name)]
    if gpu_resources:
        taskmanagers.check_slots(checkup)
        check_taskmanager_environment(checkup)


def run(args: argparse.Namespace) -> int:
    file, conf_dir = configuration.configuration_file(args.conf)
    home, home_source = configuration.flink_home(conf_dir)
    checkup = Checkup(args, file, conf_dir, home, home_source)
    check(checkup)
    summary = checkup.summary()
    ok = summary["errors"] == 0
    if args.json:
        emit_json(
            document(
                "doctor",
                ok=ok,
                configuration=checkup.file,
                flink_home=checkup.flink_home,
                findings=[f._asdict() for f in checkup.findings],
                summary=summary,
            )
        )
    else:
        print_report(checkup)
    return 0 if ok else 1
