"""Flink's GPU plugin: options, ``GPUInfo``, the driver and its script and NVML backends.

Names are resolved on first use, so ``from flink_gpu.gpu import GPUInfo`` loads neither the
driver nor the native module.
"""

_LAZY = {
    "GPUDriverFactory": "flink_gpu.gpu.driver",
    "GPUDriver": "flink_gpu.gpu.driver",
    "GPUInfo": "flink_gpu.gpu.info",
    "cuda_visible_devices": "flink_gpu.gpu.info",
    "GPUDriverOptions": "flink_gpu.gpu.options",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flink_gpu.gpu' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
