"""Our loader against NVIDIA's real libnvidia-ml.so.1 (Debian's libnvidia-ml1, driver 535), fetched
by tools/fetch_real_nvml.sh; FLINK_GPU_REAL_NVML is its path (.ci/run sets it). There is no kernel
driver here: loading works, nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED, and every entry point
says so clearly with its documented exit code."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_python
from flink_gpu import _native

REAL = os.environ.get("FLINK_GPU_REAL_NVML")
pytestmark = pytest.mark.skipif(
    not REAL,
    reason="FLINK_GPU_REAL_NVML is unset: run tools/fetch_real_nvml.sh and set it to the path it prints (.ci/run does)",
)
DRIVER_NOT_LOADED = 9
MESSAGE = "The NVIDIA kernel driver is not loaded"


def real_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env["FLINK_GPU_NVML_LIBRARY"] = REAL
    import flink_gpu

    env["PYTHONPATH"] = str(Path(flink_gpu.__file__).resolve().parent.parent)  # the flink_gpu under test
    return env


def probe():
    # in a child: the real library stays loaded for the life of the process that loads it
    code = f"from flink_gpu import _native; p = _native.probe_nvml_library({REAL!r}); "
    out = run_python(code + "print(repr((p.exported, p.resolved, p.process_api)))").stdout
    return eval(out)  # a tuple literal of our own making


def test_every_symbol_the_loader_resolves_exists_or_is_declared_optional():
    exported, resolved, _ = probe()
    table = dict(_native.nvml_symbols())
    assert set(resolved) <= set(exported)
    missing_required = [name for name, use in table.items() if use == "required" and name not in exported]
    assert missing_required == []
    for name in set(table) - set(exported):
        assert table[name] in ("optional", "fallback"), name


def test_the_process_api_follows_the_r535_rule_and_is_one_the_simulator_covers():
    exported, _, api = probe()
    has = set(exported).__contains__
    expected = (
        "detail_list"
        if has("nvmlDeviceGetRunningProcessDetailList")
        else "v3_r535"
        if has("nvmlDeviceGetComputeRunningProcesses_v3") and has("nvmlDeviceGetConfComputeMemSizeInfo")
        else "v3"
        if has("nvmlDeviceGetComputeRunningProcesses_v3")
        else "v2"
    )
    assert api == expected
    # tests/test_native.py and csrc/tests/nvml/test_state.cpp run each of these on the simulator
    assert api in ("detail_list", "v3_r535", "v3")


def test_the_live_readings_resolve_with_the_temperature_query_the_driver_has():
    exported, resolved, _ = probe()
    assert {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage"} <= set(resolved)
    # nvmlDeviceGetTemperatureV came with R565; an older driver is read through the original query
    newer = "nvmlDeviceGetTemperatureV" in exported
    assert ("nvmlDeviceGetTemperatureV" in resolved, "nvmlDeviceGetTemperature" in resolved) == (newer, not newer)


def test_the_api_says_the_driver_is_not_loaded():
    proc = run_python(
        """
from flink_gpu import NvmlError, nvml
try:
    nvml.open_library()
except NvmlError as error:
    print(error.code, error)
""",
        env=real_env(),
    )
    code, _, message = proc.stdout.partition(" ")
    assert int(code) == DRIVER_NOT_LOADED
    assert MESSAGE in message and REAL in message


def test_flink_gpu_list_says_the_driver_is_not_loaded_and_exits_1():
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list"], env=real_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert MESSAGE in proc.stderr and "Traceback" not in proc.stderr


def test_flink_gpu_discovery_says_the_driver_is_not_loaded_and_exits_1(discovery_exe):
    proc = subprocess.run([discovery_exe, "1"], env=real_env(), capture_output=True, text=True, timeout=60)
    assert (proc.stdout, proc.returncode) == ("", 1)
    assert MESSAGE in proc.stderr
