"""The environment a Flink TaskManager needs for flink-gpu (docs/flink-cluster.md).

A standalone TaskManager inherits the environment of the shell that runs ``start-cluster.sh`` (or
``taskmanager.sh``), and its discovery script and Python workers inherit the TaskManager's. So what
they must see is set there, before the TaskManager starts:

* simulated GPUs (a host without a GPU): ``FLINK_GPU_NVML_LIBRARY`` and ``FLINK_GPU_SIM_*``, read
  by ``flink-gpu-discovery`` and by the Python workers' NVML (``nvml.library-path`` is a driver
  option of flink_gpu's own factory: Flink's Java plugin never reads it);
* ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: thread mode's CUDA ordinals follow from NVML's bus ids
  (docs/design.md §9.3);
* ``PYTHONPATH`` naming this interpreter's site-packages: thread mode runs Python inside the JVM
  (pemja), which finds ``pemja``, ``pyflink`` and ``flink_gpu`` of a virtualenv only through it.

``flink-gpu [--simulate N] taskmanager-env`` prints these as ``export`` lines for ``eval``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Mapping, Optional

if TYPE_CHECKING:
    from flink_gpu.simulator import SpecLike

__all__ = ["SIMULATOR_KEYS", "discovery_executable", "shell_exports", "taskmanager_environment"]

#: The variables that select the simulator; a TaskManager's must match what doctor simulates.
SIMULATOR_KEYS = ("FLINK_GPU_NVML_LIBRARY", "FLINK_GPU_SIM_DEVICES", "FLINK_GPU_SIM_SPEC", "FLINK_GPU_SIM_INIT_ERROR")


def _site_packages() -> "list[str]":
    """This interpreter's site-packages (purelib, platlib) and where flink_gpu itself is imported from.
    A source checkout on PYTHONPATH comes first, so that it wins over a copy installed in the venv (else
    the workers would run other code than this shell); an installed flink_gpu's directory (the venv's, or a
    system site-packages a venv sees) comes after the venv's own, whose pyflink and pemja it must not hide."""
    import site
    import sysconfig

    import flink_gpu

    root = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
    venv = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    installed = root in venv or root in site.getsitepackages() or root == site.getusersitepackages()
    paths = [*venv, root] if installed else [root, *venv]
    unique = []
    for path in paths:
        if path and path not in unique:
            unique.append(path)
    return unique


def taskmanager_environment(
    devices: Optional[int] = None, spec: Optional[SpecLike] = None, base: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """The variables to add to a TaskManager's environment.

    ``devices`` or ``spec`` (as :func:`flink_gpu.simulator.environment` takes them): simulated GPUs;
    neither: the host's driver. A simulator variable of ``base`` this choice does not set is cleared
    to "" (``unset`` by :func:`shell_exports`), so that an ``eval`` in a shell that had it leaves no
    mix of two simulations, or of the simulator and the real NVML. ``base`` (default
    ``os.environ``): the environment the values extend (its ``PYTHONPATH``).
    """
    base = os.environ if base is None else base
    env: Dict[str, str] = {}
    if devices is not None or spec is not None:
        from collections.abc import Mapping

        from flink_gpu import simulator

        if spec is not None and not isinstance(spec, Mapping):
            spec = os.path.abspath(os.fspath(spec))  # the TaskManager does not start in this directory

        env.update(simulator.environment(devices=devices, spec=spec))
        # the simulator's directory in front of the base's path (not of this process's, which may have it)
        library_dir = os.path.dirname(env["FLINK_GPU_NVML_LIBRARY"])
        rest = [p for p in base.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != library_dir]
        env["LD_LIBRARY_PATH"] = os.pathsep.join([library_dir, *rest])
    # what the base has and this choice does not set is cleared (a count beside a spec, a simulator left on)
    env.update({key: "" for key in SIMULATOR_KEYS if base.get(key) and key not in env})
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    paths = _site_packages()
    # absolute: the TaskManager and its workers do not run in this directory
    paths += [
        os.path.abspath(p)
        for p in base.get("PYTHONPATH", "").split(os.pathsep)
        if p and os.path.abspath(p) not in paths
    ]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def shell_exports(env: Dict[str, str]) -> str:
    """``export KEY=value`` lines (POSIX shell quoting) for ``eval "$(...)"``; an empty value unsets."""
    import shlex

    lines = []
    for key, value in env.items():
        lines.append(f"export {key}={shlex.quote(value)}" if value else f"unset {key}")
    return "\n".join(lines) + "\n"


def discovery_executable() -> "str | None":
    """The flink-gpu-discovery installed with this package (what ``discovery-script.path`` names), if any."""
    import shutil
    import sys
    import sysconfig

    import flink_gpu

    candidates = [
        os.path.join(sysconfig.get_path("scripts"), "flink-gpu-discovery"),
        os.path.join(os.path.dirname(sys.executable), "flink-gpu-discovery"),
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__))), "bin", "flink-gpu-discovery"
        ),
    ]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("flink-gpu-discovery")
