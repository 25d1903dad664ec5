"""Times each NVML query flink-gpu makes (csrc/nvml/loader.cpp's symbols), min and median over N calls per
GPU, through pynvml on whatever libnvidia-ml.so.1 this process loads: the real driver's on a GPU host, the
bundled simulator's with --simulate. Then flink-gpu's own paths on the same library: an in-process
retrieve_resource_info of every GPU, and a coordinated claim + release. Writes one JSON document.

  python tools/nvml_query_times.py --calls 1000 --out report.json            # the real driver
  PYTHONPATH=src:tests python tools/nvml_query_times.py --simulate 2 --calls 20    # what CI runs

--simulate points this process at the simulator with tests/support/simulated.py, so ``tests`` must be on
PYTHONPATH, as pytest's pythonpath has it (tools/real_gpu_check.sh sets both).

Read-only: it never changes a GPU's settings (no MIG, persistence, clocks or reset).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable


def _time(call: Callable[[], object], calls: int) -> dict:
    """min / median / max in µs of ``calls`` calls; the error's name when the query fails (NOT_SUPPORTED
    on this GPU, NO_PERMISSION...), which is a finding in itself."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        try:
            call()
        except Exception as error:  # pynvml.NVMLError and its subclasses
            return {"error": type(error).__name__, "detail": str(error)}
        samples.append((time.perf_counter_ns() - start) / 1000.0)
    return {
        "calls": calls,
        "min_us": round(min(samples), 2),
        "median_us": round(statistics.median(samples), 2),
        "max_us": round(max(samples), 2),
    }


def queries(pynvml, handle) -> "dict[str, Callable[[], object]]":
    """The per-device queries flink-gpu makes, by NVML's name (one call each)."""
    n = pynvml
    # the one batch a claim reads per GPU (csrc/nvml/state.cpp; docs/design.md §9.1, "Query plan")
    names = [
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "NVML_FI_DEV_ECC_CURRENT",
        "NVML_FI_DEV_ECC_DBE_VOL_TOTAL",
        "NVML_FI_DEV_REMAPPED_PENDING",
        "NVML_FI_DEV_REMAPPED_FAILURE",
        "NVML_FI_DEV_RETIRED_PENDING",
    ]
    fields = [getattr(n, name) for name in names if hasattr(n, name)]
    out = {
        "nvmlDeviceGetUUID": lambda: n.nvmlDeviceGetUUID(handle),
        "nvmlDeviceGetName": lambda: n.nvmlDeviceGetName(handle),
        "nvmlDeviceGetPciInfo": lambda: n.nvmlDeviceGetPciInfo(handle),
        "nvmlDeviceGetMinorNumber": lambda: n.nvmlDeviceGetMinorNumber(handle),
        "nvmlDeviceGetMemoryInfo": lambda: n.nvmlDeviceGetMemoryInfo(handle),
        "nvmlDeviceGetComputeMode": lambda: n.nvmlDeviceGetComputeMode(handle),
        "nvmlDeviceGetMigMode": lambda: n.nvmlDeviceGetMigMode(handle),
        "nvmlDeviceGetEccMode": lambda: n.nvmlDeviceGetEccMode(handle),
        "nvmlDeviceGetTotalEccErrors": lambda: n.nvmlDeviceGetTotalEccErrors(
            handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
        ),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(handle),
        "nvmlDeviceGetRemappedRows": lambda: n.nvmlDeviceGetRemappedRows(handle),
        "nvmlDeviceValidateInforom": lambda: n.nvmlDeviceValidateInforom(handle),
        "nvmlDeviceGetComputeRunningProcesses": lambda: n.nvmlDeviceGetComputeRunningProcesses(handle),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda: n.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "nvmlDeviceGetMPSComputeRunningProcesses": lambda: n.nvmlDeviceGetMPSComputeRunningProcesses(handle),
        "nvmlDeviceGetUtilizationRates": lambda: n.nvmlDeviceGetUtilizationRates(handle),
        "nvmlDeviceGetTemperature": lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetPowerUsage": lambda: n.nvmlDeviceGetPowerUsage(handle),
        "nvmlDeviceGetPersistenceMode": lambda: n.nvmlDeviceGetPersistenceMode(handle),
        "nvmlDeviceGetCpuAffinityWithinScope": lambda: n.nvmlDeviceGetCpuAffinityWithinScope(
            handle, 64, n.NVML_AFFINITY_SCOPE_NODE
        ),
    }
    if fields:
        out[f"nvmlDeviceGetFieldValues({len(fields)} health fields)"] = lambda: n.nvmlDeviceGetFieldValues(
            handle, fields
        )
    if hasattr(n, "nvmlDeviceGetGpuFabricInfo"):
        info = n.c_nvmlGpuFabricInfo_t()  # v1: what the oldest driver with the call answers
        out["nvmlDeviceGetGpuFabricInfo"] = lambda: n.nvmlDeviceGetGpuFabricInfo(handle, n.byref(info))
    return out


def slow_calls(name: str, calls: int) -> int:
    """Process lists and InfoROM reads take milliseconds on real drivers: fewer of them keep the run short."""
    slow = ("RunningProcesses", "ValidateInforom", "PowerUsage")
    return max(1, calls // 10) if any(s in name for s in slow) else calls


def flink_gpu_paths(count: int, calls: int) -> dict:
    """flink-gpu's own costs on this library: retrieve every GPU in-process, and a coordinated claim of one
    GPU + release on a private coordination file."""
    from flink_gpu import GPUDriver, coordination

    out: dict = {}
    driver = GPUDriver({"discovery-mode": "nvml"})
    out[f"retrieve_resource_info({count})"] = _time(lambda: driver.retrieve_resource_info(count), calls)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "coordination")
        indices = [str(i) for i in range(count)]

        def cycle():
            coordination.claim(1, indices, path=path)
            coordination.release(path=path)

        out["coordination claim(1) + release"] = _time(cycle, calls)
    return out


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per query (slow queries: a tenth)")
    parser.add_argument(
        "--simulate",
        type=int,
        metavar="N",
        default=None,
        help="the bundled simulator with N GPUs instead of this host's driver",
    )
    parser.add_argument("--label", default="idle", help="what the GPUs were doing, for the report")
    parser.add_argument("--out", default="-", help="the JSON file (default: stdout)")
    args = parser.parse_args(argv)
    if args.simulate is not None:
        from support.simulated import use_simulator  # tests/ on PYTHONPATH: see the module docstring

        use_simulator(args.simulate)
    import pynvml

    report: dict = {"label": args.label, "simulated": args.simulate is not None, "calls": args.calls}
    start = time.perf_counter_ns()
    pynvml.nvmlInit()
    report["nvmlInit_us"] = round((time.perf_counter_ns() - start) / 1000.0, 1)
    try:
        report["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
        report["devices"] = []
        for index in range(count):
            start = time.perf_counter_ns()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            first_handle_us = round((time.perf_counter_ns() - start) / 1000.0, 1)
            per_query = {
                name: _time(call, slow_calls(name, args.calls)) for name, call in queries(pynvml, handle).items()
            }
            report["devices"].append({"index": index, "first_handle_us": first_handle_us, "queries": per_query})
        report["flink_gpu"] = flink_gpu_paths(count, max(1, args.calls // 10)) if count else {}
    finally:
        pynvml.nvmlShutdown()
    text = json.dumps(report, indent=1)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
