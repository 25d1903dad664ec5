"""Binding GPUs to the holders inside one TaskManager or service (docs/design.md §9.3): :func:`bind` and the
:class:`GPUBinding` it returns, their memory requests and gauges, and the CUDA ordinals of the bound GPUs.

    from flink_gpu.binding import bind
"""

from flink_gpu.binding.gauges import GAUGES
from flink_gpu.binding.gpu_binding import GPUBinding, bind, checked_counts, checked_memory
from flink_gpu.bindings_file import (
    BINDINGS_SUFFIX,
    MAX_HOLDERS_PER_GPU,
    BindingEntry,
    BindingSnapshot,
    bindings_path,
    snapshot,
)
from flink_gpu.errors import BindingError

__all__ = [
    "BINDINGS_SUFFIX",
    "GAUGES",
    "MAX_HOLDERS_PER_GPU",
    "BindingEntry",
    "BindingError",  # flink_gpu.errors', named here as before
    "BindingSnapshot",
    "GPUBinding",
    "bind",
    "bindings_path",
    "checked_counts",
    "checked_memory",
    "snapshot",
]
