"""Benchmark session set-up: everything runs against the bundled NVML simulator with 4 GPUs.

NVML is loaded and initialised once per process, so the simulator is chosen here, at import, before
any benchmark touches NVML:

* ``os.environ`` gets :func:`flink_gpu.simulator.environment` (``FLINK_GPU_NVML_LIBRARY`` for
  flink-gpu, ``FLINK_GPU_SIM_DEVICES`` for the simulator, ``LD_LIBRARY_PATH`` for child processes);
* the simulated ``libnvidia-ml.so.1`` is loaded now with ctypes, because the dynamic loader reads
  ``LD_LIBRARY_PATH`` only when a process starts: pynvml's ``CDLL("libnvidia-ml.so.1")`` later in
  this process then finds the already loaded library by its soname (as it would find the driver's).

Flink's stock ``nvidia-gpu-discovery.sh`` comes from the ``apache-flink-libraries`` wheel (the
``apache-flink`` wheel itself ships no plugins), downloaded once with pip and cached under
``~/.cache/flink-gpu-tests``; only the two scripts are kept. It finds a fake ``nvidia-smi`` on
``PATH`` that answers its one query with the simulated indices, as the real one would.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.interop import fake_nvidia_smi, find_discovery_executable, stock_script_path
from support.simulated import use_simulator

DEVICES = 4
use_simulator(DEVICES)


@pytest.fixture(scope="session")
def stock_script() -> Path:
    try:
        return stock_script_path()
    except RuntimeError as e:  # offline and not cached: as the test suite does, say why and skip
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def discovery_exe() -> str:
    return find_discovery_executable()


@pytest.fixture(scope="session")
def smi_env(tmp_path_factory) -> dict[str, str]:
    """os.environ with the fake nvidia-smi first on PATH."""
    bin_dir = fake_nvidia_smi(tmp_path_factory.mktemp("smi"), DEVICES)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture(scope="session")
def floor_library(tmp_path_factory) -> Path:
    """floor/coordination_floor.c compiled for this session (syscall_floor.py)."""
    import syscall_floor

    return syscall_floor.build(tmp_path_factory.mktemp("floor"))


@pytest.fixture
def coordination_file(tmp_path) -> Path:
    """An empty coordination file of this benchmark's own."""
    path = tmp_path / "flink-gpu-coordination"
    path.touch()
    return path
