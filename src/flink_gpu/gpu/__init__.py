"""Flink's GPU plugin: options, ``GPUInfo``, the driver and its script and NVML backends.

Names are resolved on first use, so ``from flink_gpu.gpu import GPUInfo`` loads neither the
driver nor the native module.
"""

from flink_gpu.base import lazy as _lazy

TYPE_CHECKING = False  # not typing's: see flink_gpu/__init__.py
if TYPE_CHECKING:  # "X as X": an explicit re-export (see flink_gpu/__init__.py)
    from flink_gpu.gpu.affinity import pin_to_gpus as pin_to_gpus
    from flink_gpu.gpu.driver import GPUDriver as GPUDriver
    from flink_gpu.gpu.driver import GPUDriverFactory as GPUDriverFactory
    from flink_gpu.gpu.info import GPUInfo as GPUInfo
    from flink_gpu.gpu.info import cuda_visible_devices as cuda_visible_devices
    from flink_gpu.gpu.options import GPUDriverOptions as GPUDriverOptions

_LAZY = {
    "GPUDriverFactory": "flink_gpu.gpu.driver",
    "GPUDriver": "flink_gpu.gpu.driver",
    "GPUInfo": "flink_gpu.gpu.info",
    "cuda_visible_devices": "flink_gpu.gpu.info",
    "GPUDriverOptions": "flink_gpu.gpu.options",
    "pin_to_gpus": "flink_gpu.gpu.affinity",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = _lazy.attach(__name__, _LAZY, __all__)
