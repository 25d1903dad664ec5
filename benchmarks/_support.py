"""Helpers shared by the benchmarks (conftest.py) and tools/bench_figures.py."""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

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


STOCK_VERSION = "2.3.0"
STOCK_DIR_IN_WHEEL = "pyflink/plugins/external-resource-gpu/"
STOCK_FILES = ("nvidia-gpu-discovery.sh", "gpu-discovery-common.sh")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flink-gpu-tests"


def stock_script_path() -> Path:
    """Flink 2.3.0's nvidia-gpu-discovery.sh (with gpu-discovery-common.sh next to it), cached.

    Shares its cache directory with the test suite's copy. Raises RuntimeError when it can
    neither be found in the cache nor downloaded.
    """
    target = CACHE / f"flink-{STOCK_VERSION}-external-resource-gpu"
    script = target / STOCK_FILES[0]
    if script.exists():
        return script
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download when several sessions start at once
        if script.exists():
            return script
        wheels = sorted(CACHE.glob(f"apache_flink_libraries-{STOCK_VERSION}-*.whl"))
        download = CACHE / f"download-{os.getpid()}"
        if not wheels:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 f"apache-flink-libraries=={STOCK_VERSION}", "-d", str(download)],
                capture_output=True, text=True, timeout=1200)
            wheels = sorted(download.glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                shutil.rmtree(download, ignore_errors=True)
                raise RuntimeError(
                    f"cannot download apache-flink-libraries {STOCK_VERSION} for the stock script "
                    f"(pip exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
        staging = CACHE / f"staging-{os.getpid()}"
        staging.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in STOCK_FILES:
                (staging / name).write_bytes(wheel.read(STOCK_DIR_IN_WHEEL + name))
        os.replace(staging, target)
        shutil.rmtree(download, ignore_errors=True)
    return script


def fake_nvidia_smi(bin_dir: Path, count: int) -> Path:
    """A directory with an ``nvidia-smi`` that answers the stock script's query for ``count`` GPUs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'if [ "$*" != "--query-gpu=index --format=csv,noheader" ]; then\n'
        '    echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2\n'
        "fi\n"
        f"printf '%s\\n' {' '.join(map(str, range(count)))}\n")
    smi.chmod(0o755)
    return bin_dir


def find_discovery_executable() -> str:
    """flink-gpu-discovery of the flink_gpu under test: next to this interpreter, src/bin, PATH."""
    import sysconfig

    import flink_gpu

    package_dir = Path(flink_gpu.__file__).resolve().parent
    for candidate in (Path(sysconfig.get_path("scripts")) / "flink-gpu-discovery",
                      Path(sys.executable).parent / "flink-gpu-discovery",
                      package_dir.parent / "bin" / "flink-gpu-discovery"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("flink-gpu-discovery")
    if found is None:
        raise RuntimeError("flink-gpu-discovery is not installed next to the flink_gpu under test "
                           "(in a source checkout, build it with tools/dev_build.sh)")
    return found


def executable_stock_script(directory: Path) -> Path:
    """The stock scripts copied into ``directory`` with the executable bit, so that they run as
    Flink runs them (directly, through their ``#!/usr/bin/env bash``)."""
    source = stock_script_path()
    directory.mkdir(parents=True, exist_ok=True)
    for name in STOCK_FILES:
        shutil.copy(source.parent / name, directory / name)
        (directory / name).chmod(0o755)
    return directory / source.name
