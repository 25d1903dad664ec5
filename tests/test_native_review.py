"""Fixes from the review of the native layer: the binding's handling of NVML library paths."""

import os

from conftest import run_python, simulated_env

# Each case runs in a fresh interpreter: NVML initialises once per process.
OPEN_PATH = """
import os, sys
from flink_gpu import NvmlError, _native
path = os.fsdecode(bytes.fromhex(sys.argv[1] if len(sys.argv) > 1 else {hex!r}))
try:
    nvml = _native.Nvml.open(path)
except ValueError as error:
    print("ValueError", error)
except NvmlError as error:
    print("NvmlError", error.code)
else:
    print("opened", len(nvml.devices()), nvml.library_path == path)
"""


def open_path(path: bytes) -> str:
    return run_python(OPEN_PATH.format(hex=path.hex()), env=simulated_env(devices=3)).stdout.strip()


def simulator_path() -> bytes:
    from flink_gpu import simulator

    return os.fsencode(simulator.library_path())


def test_library_path_with_nul_is_refused_not_truncated():
    # dlopen sees a C string: everything after the NUL was dropped and the simulator was loaded
    # although the configured path names another file.
    assert open_path(simulator_path() + b"\0.disabled").startswith("ValueError")


def test_library_path_with_non_utf8_bytes_is_opened(tmp_path):
    # A path as os.fsdecode gives it (surrogateescape) must reach dlopen as the original bytes.
    directory = os.path.join(os.fsencode(str(tmp_path)), b"driver-\xff")
    os.mkdir(directory)
    library = os.path.join(directory, b"libnvidia-ml.so.1")
    os.symlink(simulator_path(), library)
    assert open_path(library) == "opened 3 True"


def test_missing_non_utf8_library_is_an_nvml_error(tmp_path):
    # The loader's message names the path; decoding it must not fail on the undecodable byte.
    missing = os.path.join(os.fsencode(str(tmp_path)), b"gone-\xff", b"libnvidia-ml.so.1")
    assert open_path(missing).startswith("NvmlError")
