"""A process pointed at the bundled NVML simulator, pynvml included (the benchmarks' set-up)."""

import ctypes
import os

from flink_gpu import simulator


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
