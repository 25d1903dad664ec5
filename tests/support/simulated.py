"""A process pointed at the bundled NVML simulator, pynvml included (the benchmarks' set-up)."""

import ctypes
import os

from flink_gpu import simulator

#: Why a test that lists a process of its own on a simulated GPU cannot run outside the initial pid namespace.
NOT_HOST_PIDS = (
    "the simulator lists host pids, as NVML does, and this test runs in a container: one of its own pids there is "
    "another process to NVML, never its own (docs/design.md §9.1)"
)


def pids_are_hosts() -> bool:
    """Whether this process's pids are host pids, the ones NVML (and the simulator, as a driver) lists: it runs
    in the initial pid namespace (PROC_PID_INIT_INO)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == 0xEFFFFFFC
    except OSError:
        return False


def use_simulator(devices: int) -> None:
    """Points this process, and the processes it starts, at the simulator with ``devices`` GPUs.

    Must run before anything in this process loads NVML. Besides the environment, the simulated
    ``libnvidia-ml.so.1`` is loaded now: the dynamic loader reads ``LD_LIBRARY_PATH`` only when a
    process starts, so pynvml's later ``CDLL("libnvidia-ml.so.1")`` finds it by its soname.
    """
    for key in ("FLINK_GPU_SIM_SPEC", "FLINK_GPU_SIM_INIT_ERROR"):
        os.environ.pop(key, None)
    os.environ.update(simulator.environment(devices=devices))
    ctypes.CDLL(simulator.library_path(), mode=ctypes.RTLD_GLOBAL)


def wait_until_inside_a_hang(proc) -> bool:
    """Waits until a thread of the process ``proc`` (a ``Popen``) is inside a simulated call that a spec's
    ``hang`` rule blocks: such a call polls its file in ``nanosleep``, and nothing else there sleeps so
    (a spec without ``latency_ms``). False when the process ended first."""
    tasks = f"/proc/{proc.pid}/task"
    while proc.poll() is None:
        for tid in os.listdir(tasks) if os.path.isdir(tasks) else ():
            try:
                with open(f"{tasks}/{tid}/wchan") as wchan:
                    if "nanosleep" in wchan.read():
                        return True
            except OSError:
                continue
    return False
