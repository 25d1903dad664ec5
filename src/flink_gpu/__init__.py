"""flink-gpu: Apache Flink's external-resource GPU plugin for Python, with a native NVML core.

Public names are loaded on first use (PEP 562), so ``import flink_gpu`` costs next to nothing:
an inference operator that only needs ``GPUInfo`` never pays for YAML, subprocess or NVML.
"""

from typing import TYPE_CHECKING

from flink_gpu.errors import FlinkException, IllegalConfigurationException, NvmlError

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "Configuration": "flink_gpu.config",
    "ConfigOption": "flink_gpu.config",
    "config_option": "flink_gpu.config",
    "ExternalResourceInfo": "flink_gpu.framework",
    "ExternalResourceDriver": "flink_gpu.framework",
    "ExternalResourceDriverFactory": "flink_gpu.framework",
    "ExternalResourceInfoProvider": "flink_gpu.framework",
    "load_external_resources": "flink_gpu.framework",
    "kubernetes_resource_requirements": "flink_gpu.deployment",
    "merge_into_pod_template": "flink_gpu.deployment",
    "yarn_resources": "flink_gpu.deployment",
    "GPUDriverFactory": "flink_gpu.gpu.driver",
    "GPUDriver": "flink_gpu.gpu.driver",
    "GPUInfo": "flink_gpu.gpu.info",
    "GPUDriverOptions": "flink_gpu.gpu.options",
    "cuda_visible_devices": "flink_gpu.gpu.info",
}

__all__ = ["FlinkException", "IllegalConfigurationException", "NvmlError", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flink_gpu' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
