"""Shared fixtures: the simulator, the native discovery executable, child Python processes."""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from flink_gpu import simulator

REPO = Path(__file__).resolve().parent.parent


def find_discovery_executable():
    """flink-gpu-discovery of the flink_gpu under test: its install's scripts dir, then PATH."""
    import flink_gpu

    package_dir = Path(flink_gpu.__file__).resolve().parent
    candidates = [
        Path(sysconfig.get_path("scripts")) / "flink-gpu-discovery",
        Path(sys.executable).parent / "flink-gpu-discovery",
        package_dir.parent / "bin" / "flink-gpu-discovery",  # tools/dev_build.sh installs into src/bin
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("flink-gpu-discovery")
    if found is None:
        raise RuntimeError("flink-gpu-discovery is not installed next to the flink_gpu under test")
    return found


@pytest.fixture(scope="session")
def discovery_exe():
    return find_discovery_executable()


def run_python(code, env=None, timeout=60, check=True):
    """Runs `code` in a fresh interpreter (NVML initialises once per process)."""
    child_env = dict(os.environ if env is None else env)
    import flink_gpu

    # the child imports the same flink_gpu as the test (installed or the dev tree)
    package_root = str(Path(flink_gpu.__file__).resolve().parent.parent)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=child_env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def simulated_env(**kwargs):
    """os.environ pointed at the simulator (see flink_gpu.simulator.environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env.update(simulator.environment(**kwargs))
    return env
