"""What the tests and benchmarks run beside flink-gpu: our native executable, Flink's stock
discovery script, and a fake nvidia-smi for it. No pytest here: benchmarks/bench_figures.py uses it too."""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path


def find_discovery_executable():
    """flink-gpu-discovery of the flink_gpu under test: its build tree or install, then PATH."""
    import flink_gpu

    package_dir = Path(flink_gpu.__file__).resolve().parent
    candidates = [
        # a build tree first: tools/dev_build.sh and the sanitizer run install beside the package
        package_dir.parent / "bin" / "flink-gpu-discovery",
        Path(sysconfig.get_path("scripts")) / "flink-gpu-discovery",
        Path(sys.executable).parent / "flink-gpu-discovery",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("flink-gpu-discovery")
    if found is None:
        raise RuntimeError("flink-gpu-discovery is not installed next to the flink_gpu under test")
    return found


# --- Flink's stock discovery script ------------------------------------------------------------

STOCK_VERSION = "2.3.0"
STOCK_DIR_IN_WHEEL = "pyflink/plugins/external-resource-gpu/"
STOCK_FILES = ("nvidia-gpu-discovery.sh", "gpu-discovery-common.sh")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flink-gpu-tests"


def _installed_stock_script():
    """The script of an installed apache-flink (the test extra installs it), or None."""
    import importlib.util

    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        script = Path(location) / "plugins" / "external-resource-gpu" / STOCK_FILES[0]
        if script.is_file():
            return script
    return None


def _downloaded_stock_script():
    """The two scripts from the apache-flink-libraries wheel, downloaded once and cached."""
    import fcntl
    import zipfile

    target = CACHE / f"flink-{STOCK_VERSION}-external-resource-gpu"
    script = target / STOCK_FILES[0]
    if script.exists():
        return script
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download even when several sessions start at once
        if script.exists():
            return script
        download = CACHE / f"download-{os.getpid()}"
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    f"apache-flink-libraries=={STOCK_VERSION}",
                    "-d",
                    str(download),
                ],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            wheels = list(download.glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                raise RuntimeError(
                    f"cannot download apache-flink-libraries {STOCK_VERSION} for the stock script "
                    f"(pip exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
                )
            staging = CACHE / f"staging-{os.getpid()}"
            staging.mkdir()
            with zipfile.ZipFile(wheels[0]) as wheel:
                for name in STOCK_FILES:
                    (staging / name).write_bytes(wheel.read(STOCK_DIR_IN_WHEEL + name))
            os.replace(staging, target)
        finally:
            shutil.rmtree(download, ignore_errors=True)
    return script


def stock_script_path():
    """Flink 2.3.0's nvidia-gpu-discovery.sh (gpu-discovery-common.sh beside it), never copied into
    this repository: from the installed apache-flink, else downloaded once and cached. Raises
    RuntimeError saying why when neither works."""
    return _installed_stock_script() or _downloaded_stock_script()


def stock_env(bin_dir):
    """Environment for the stock script: a fake nvidia-smi first on PATH. The sanitizer run
    (tools/sanitizer_tests.sh) preloads libasan for our binaries; the stock script and the tools it
    runs are not ours, and procps' ps deadlocks with that preload, so it is left out."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    return env


def fake_nvidia_smi(bin_dir, count):
    """A directory with an nvidia-smi that answers the stock script's one query for `count` GPUs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$*" != "--query-gpu=index --format=csv,noheader" ]; then
            echo "fake nvidia-smi: unexpected arguments: $*" >&2
            exit 2
        fi
        i=0
        while [ $i -lt {count} ]; do echo $i; i=$((i + 1)); done
        """)
    )
    smi.chmod(0o755)
    return bin_dir


def executable_stock_script(directory):
    """The stock scripts copied into ``directory`` with the executable bit, so that they run as
    Flink runs them (directly, through their ``#!/usr/bin/env bash``)."""
    source = stock_script_path()
    directory.mkdir(parents=True, exist_ok=True)
    for name in STOCK_FILES:
        shutil.copy(source.parent / name, directory / name)
        (directory / name).chmod(0o755)
    return directory / source.name
