"""The TaskManager side: what environment Flink's Java plugin runs the discovery script with.

doctor runs in the user's shell, a TaskManager in the environment of the shell that started it. So
``--simulate`` only simulates GPUs for doctor itself: unless the shell that runs ``start-cluster.sh``
has the same simulator variables, the TaskManager's script loads the host's libnvidia-ml and finds
no GPU. Thread mode and CUDA need more of that environment (flink_gpu.deploy.taskmanager_env).
"""

from __future__ import annotations

import glob
import os
import shlex
import sys
from typing import Mapping

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.cli.doctor_command.gpu_count import open_nvml
from flink_gpu.cli.taskmanager_env_command import eval_command, simulate_option
from flink_gpu.deploy.taskmanager_env import SIMULATOR_KEYS, taskmanager_environment
from flink_gpu.errors import NvmlError


def check_taskmanager_environment(checkup: Checkup) -> None:
    args = checkup.args
    shell = getattr(args, "environment_before_simulate", None)
    shell = dict(os.environ) if shell is None else shell
    simulated = args.simulate is not None or args.simulate_spec is not None
    if simulated and checkup.nvml_resources:
        # what `taskmanager-env` gives for the same option (a spec by its path, not doctor's copy)
        expected = taskmanager_environment(devices=args.simulate, spec=args.simulate_spec, base=shell)
        differ = [key for key in SIMULATOR_KEYS if not _same(shell.get(key, ""), expected.get(key, ""))]
        if differ:
            checkup.add(
                "error",
                "taskmanager-env",
                f"{simulate_option(args)} simulates GPUs for doctor only: a TaskManager started "
                f"from this shell has {_describe(shell, differ)}, so the NVML its discovery of "
                f"{', '.join(repr(n) for n in checkup.nvml_resources)} loads is not this simulator "
                "(without a driver: no GPU).",
                f"In the shell that runs start-cluster.sh: {eval_command(args)}; then "
                "start the cluster and run doctor there without --simulate.",
            )
            return
    _check_nvml_library(checkup, shell)
    _check_thread_mode(checkup, shell)
    if shell.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        checkup.add(
            "note",
            "taskmanager-env",
            "CUDA_DEVICE_ORDER is not PCI_BUS_ID in this shell: in "
            "thread mode a binding's CUDA ordinals (binding.devices) are exact only with it.",
            f"Before start-cluster.sh: {eval_command(args)} (or export CUDA_DEVICE_ORDER=PCI_BUS_ID).",
        )


def _check_nvml_library(checkup: Checkup, shell: Mapping[str, str]) -> None:
    """The NVML a TaskManager started from this shell loads for its discovery, where it loads: one that does not
    is the failure of that discovery's check (its run, or its driver), not another finding."""
    if not checkup.nvml_resources:
        return  # no discovery of this configuration loads it (a stock or custom script, nvml.library-path)
    library = shell.get("FLINK_GPU_NVML_LIBRARY")
    # None: as this process resolves it, which is the shell's (doctor runs there; --simulate's was compared above)
    if isinstance(open_nvml(checkup, library or None), NvmlError):
        return
    if library:
        what = f"FLINK_GPU_NVML_LIBRARY={library}"
        if shell.get("FLINK_GPU_SIM_DEVICES") or shell.get("FLINK_GPU_SIM_SPEC"):
            sim = shell.get("FLINK_GPU_SIM_DEVICES") or f"the spec {shell.get('FLINK_GPU_SIM_SPEC')}"
            what += f" (the simulator: {sim}{' GPUs' if shell.get('FLINK_GPU_SIM_DEVICES') else ''})"
    else:
        what = "the host's libnvidia-ml.so.1 (FLINK_GPU_NVML_LIBRARY is not set)"
    checkup.add(
        "ok", "taskmanager-env", f"A TaskManager started from this shell runs the discovery script with {what}."
    )


def _same(value: str, expected: str) -> bool:
    if value == expected:
        return True
    return bool(value and expected) and os.path.realpath(value) == os.path.realpath(expected)


def _describe(shell: Mapping[str, str], keys: "list[str]") -> str:
    parts = [f"{key}={shell[key]}" if shell.get(key) else f"no {key}" for key in keys]
    return ", ".join(parts)


def _check_thread_mode(checkup: Checkup, shell: Mapping[str, str]) -> None:
    """Thread mode (python.execution-mode: thread) runs Python in the JVM: it needs pemja & co. on
    PYTHONPATH, and flink-python in lib/ for a second job."""
    if sys.prefix != sys.base_prefix:  # a virtualenv: the JVM's embedded Python does not know it
        import sysconfig

        site = sysconfig.get_path("purelib")
        if site not in shell.get("PYTHONPATH", "").split(os.pathsep):
            checkup.add(
                "note",
                "taskmanager-env",
                f"PYTHONPATH of this shell does not name {site}: a "
                'thread-mode job (python.execution-mode: thread) fails with "No module named '
                "'pemja'\".",
                f"Before start-cluster.sh: {eval_command(checkup.args)}.",
            )
    home = checkup.flink_home
    if home is None:
        return
    lib = shell.get("FLINK_LIB_DIR") or os.path.join(home, "lib")
    if not glob.glob(os.path.join(lib, "flink-python*.jar")):
        jars = sorted(glob.glob(os.path.join(home, "opt", "flink-python*.jar")))
        source = shlex.quote(jars[0]) if jars else shlex.quote(os.path.join(home, "opt")) + "/flink-python-*.jar"
        checkup.add(
            "note",
            "taskmanager-env",
            f"{lib} has no flink-python jar: a TaskManager on Java 17 "
            "runs one thread-mode job only (the second fails with NoSuchFieldException: "
            "loadedLibraryNames).",
            f"cp {source} {shlex.quote(lib)}/",
        )
