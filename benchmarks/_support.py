"""Helpers shared by the benchmarks (conftest.py) and tools/bench_figures.py."""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from pathlib import Path

from flink_gpu import simulator

# Flink's stock script, the fake nvidia-smi and our executable are found as the tests find them.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from interop import STOCK_FILES, fake_nvidia_smi, find_discovery_executable, stock_script_path  # noqa: E402,F401


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


def executable_stock_script(directory: Path) -> Path:
    """The stock scripts copied into ``directory`` with the executable bit, so that they run as
    Flink runs them (directly, through their ``#!/usr/bin/env bash``)."""
    source = stock_script_path()
    directory.mkdir(parents=True, exist_ok=True)
    for name in STOCK_FILES:
        shutil.copy(source.parent / name, directory / name)
        (directory / name).chmod(0o755)
    return directory / source.name
