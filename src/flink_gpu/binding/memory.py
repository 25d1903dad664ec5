"""A binding's memory request, enforced by the framework (docs/design.md §9.3): the environment a worker
starts with (JAX, CuPy, MPS) and the limits set after import (PyTorch's and CuPy's allocators)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Iterable

from flink_gpu.bindings_file import snapshot

if TYPE_CHECKING:
    from flink_gpu.flink.resource_info import ExternalResourceInfo

__all__ = ["apply", "environment", "frameworks", "process_limit", "totals"]

#: Where an MPS control daemon listens unless CUDA_MPS_PIPE_DIRECTORY says otherwise.
_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"


def totals(
    indices: "Iterable[str]",
    infos: "Iterable[ExternalResourceInfo]",
    memory_total: "dict[str, int]",
    library_path: "str | None",
) -> "list[tuple[str, int]]":
    """(index, total bytes) of each bound GPU, in index order: what the bind read (``memory_total``), else the
    info's ``memory.total``, else NVML's enumeration; ValueError naming a GPU whose total is not known."""
    indices = list(indices)
    by_index = {info.get_property("index"): info for info in infos}
    found = dict(memory_total)
    for index in indices:
        text = by_index[index].get_property("memory.total") if index in by_index else None
        if index not in found and text is not None and text.isdigit():
            found[index] = int(text)
    if any(not found.get(index) for index in indices) and library_path:
        from flink_gpu.base.gpu_index import unit_parent
        from flink_gpu.nvml import open_library

        gpus = {unit_parent(index) or index for index in indices}
        numbers = sorted(int(gpu) for gpu in gpus if gpu.isdigit())
        for device in open_library(library_path).devices(gpus=numbers).devices:
            if device.memory_total and not found.get(device.gpu_index):
                found[device.gpu_index] = device.memory_total
    missing = [index for index in indices if not found.get(index)]
    if missing:
        raise ValueError(
            f"GPU {', '.join(missing)}'s total memory is not known (NVML did not read it), so no share of it "
            "can be given."
        )
    return [(index, found[index]) for index in indices]


def process_limit(
    path: str, timeout: float, holder: "tuple[int, str | None, int | None, int]", limit: int, index: str
) -> int:
    """What this process may allocate on GPU ``index`` for a binding of ``holder`` with request ``limit``: the
    request, or for a slot (thread mode: every slot of the TaskManager is this one process) the requests of
    all the live slots of its TaskManager on that GPU, each slot once."""
    _, slot, taskmanager, _ = holder
    if slot is None or taskmanager is None:  # no TaskManager recorded: its slots cannot be told
        return limit
    requests: "dict[str, int]" = {}
    for entry in snapshot(path, timeout=timeout).entries:
        if entry.alive and entry.ours and entry.slot is not None and entry.index == index:
            if entry.taskmanager == taskmanager:
                requests[entry.slot] = max(requests.get(entry.slot, 0), entry.memory or 0)
    return max(sum(requests.values()), limit)


def environment(
    limit: int, totals: "list[tuple[str, int]]", holders_per_gpu: int, mps: "bool | None"
) -> "dict[str, str]":
    """GPUBinding.memory_environment's variables for a request of ``limit`` bytes per GPU."""
    # floored to a millionth, so that the share never exceeds the request (and never reads as none)
    fraction = max(1, int(min(limit / total for _, total in totals) * 10**6)) / 10**6
    env = {
        "XLA_CLIENT_MEM_FRACTION": f"{fraction:.6f}",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.6f}",
        "CUPY_GPU_MEMORY_LIMIT": str(limit),
    }
    if mps is None:
        pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or _MPS_PIPE_DIRECTORY
        mps = os.path.exists(os.path.join(pipe, "control"))
    if mps:
        mebibytes = max(1, limit >> 20)
        # the client's ordinals: its CUDA_VISIBLE_DEVICES is this binding's GPUs, in index order
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{i}={mebibytes}M" for i in range(len(totals)))
        if holders_per_gpu > 1:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, 100 // holders_per_gpu))
    return env


def frameworks() -> "tuple[Any, Any]":
    """The imported PyTorch and CuPy modules (None for one not imported); RuntimeError when neither is."""
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is None and cupy is None:
        raise RuntimeError(
            "apply_memory_limit() limits PyTorch's or CuPy's allocator, and neither is imported: import it "
            "first, or start the worker with memory_environment() (JAX, CuPy, MPS)."
        )
    return torch, cupy


def apply(
    torch: Any, cupy: Any, limits: "dict[str, int]", totals: "list[tuple[str, int]]", ordinals: "dict[str, int]"
) -> "tuple[str, ...]":
    """Sets ``limits`` (bytes per GPU index) in PyTorch's and CuPy's allocators (``torch``, ``cupy``: the
    modules, None for one not imported), on the CUDA devices ``ordinals``; the names of those limited."""
    applied = []
    if torch is not None:
        for index, total in totals:
            torch.cuda.set_per_process_memory_fraction(min(1.0, limits[index] / total), ordinals[index])
        applied.append("torch")
    if cupy is not None:
        for index in limits:
            with cupy.cuda.Device(ordinals[index]):
                cupy.get_default_memory_pool().set_limit(size=limits[index])
        applied.append("cupy")
    return tuple(applied)
