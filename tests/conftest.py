"""Shared fixtures: the simulator, the native discovery executable, child Python processes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flink_gpu import simulator
from support.interop import find_discovery_executable, stock_script_path

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # tools/check_flink_versions.sh's environments have pytest alone
    pass
else:
    # How fast this machine draws and runs an example says nothing of the code: no deadline, no "too slow".
    settings.register_profile("load-independent", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("load-independent")


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
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=child_env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def simulated_env(**kwargs):
    """os.environ pointed at the simulator (see flink_gpu.simulator.environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env.update(simulator.environment(**kwargs))
    return env


@pytest.fixture(scope="session")
def stock_script():
    """Flink 2.3.0's nvidia-gpu-discovery.sh (gpu-discovery-common.sh beside it), never copied here."""
    try:
        return stock_script_path()
    except RuntimeError as error:
        pytest.skip(str(error))


# --- processes that own GPUs in coordination tests ---------------------------------------------


def proc_start_time(pid):
    """Field 22 of /proc/<pid>/stat, read independently of the code under test."""
    data = Path(f"/proc/{pid}/stat").read_text()
    return int(data[data.rindex(")") + 2 :].split()[19])


def dead_pid():
    """A pid that just exited (and was reaped): an owner that is gone."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def owners():
    """Spawns live processes to own GPUs; kills and reaps what is left at the end."""
    procs = []

    def spawn():
        proc = subprocess.Popen(["sleep", "600"])
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def child_env(**extra):
    """os.environ without simulator, Flink or NVML settings, importing the flink_gpu under test."""
    import flink_gpu

    package_root = str(Path(flink_gpu.__file__).resolve().parent.parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FLINK_GPU_") and k not in ("FLINK_CONF_DIR", "FLINK_HOME")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


@pytest.fixture
def binders(tmp_path):
    """``bind(path, taskmanager, gpus, count=1, share=1, slot=None)``: a live process that binds (for
    ``slot``, from a thread of its own) and holds until the test ends: (process, indices, thread id)."""
    from support.cli import BINDER, binder_cmdline  # support.cli imports this module

    script = tmp_path / "binder.py"
    script.write_text(BINDER)
    processes = []

    def bind(path, taskmanager, gpus, count=1, share=1, slot=None):
        process = subprocess.Popen(
            binder_cmdline(script, path, taskmanager, gpus, count, share, slot),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        processes.append(process)
        indices, thread = process.stdout.readline().split()
        return process, indices.split(","), int(thread)

    bind.script = script
    yield bind
    for process in processes:
        process.kill()
        process.wait(10)


@pytest.fixture
def no_leaks():
    """The test leaves the descriptors and children as it found them (support/faults.py's nothing_leaks)."""
    from support.faults import nothing_leaks  # here: support.faults imports this module

    with nothing_leaks():
        yield
