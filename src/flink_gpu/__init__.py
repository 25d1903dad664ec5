"""flink-gpu: Apache Flink's external-resource GPU plugin for Python, with a native NVML core.

Public names are loaded on first use (PEP 562), so ``import flink_gpu`` costs next to nothing:
an inference operator that only needs ``GPUInfo`` never pays for YAML, subprocess or NVML.
"""

from flink_gpu.base import lazy as _lazy
from flink_gpu.errors import (
    BindingError,
    CudaDeviceError,
    DiscoveryScriptNotExecutable,
    DiscoveryScriptNotFound,
    FactoryLoadError,
    FactoryNotFoundError,
    FileTooLargeError,
    FlinkException,
    IllegalConfigurationException,
    LocalClusterError,
    NotARegularFileError,
    NotEnoughGpusError,
    NvmlError,
    SlotUnknownError,
    ValueTooLongError,
)

# not typing.TYPE_CHECKING: importing typing (and re, enum, functools with it) would cost an operator
# several ms; mypy and pyright treat any constant named TYPE_CHECKING as true
TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load on first use
    # "X as X": the explicit re-export mypy --strict and pyright need (__all__ below is built at run time)
    from flink_gpu.deploy.requests import kubernetes_resource_requirements as kubernetes_resource_requirements
    from flink_gpu.deploy.requests import merge_into_pod_template as merge_into_pod_template
    from flink_gpu.deploy.requests import yarn_resources as yarn_resources
    from flink_gpu.flink.configuration import ConfigOption as ConfigOption
    from flink_gpu.flink.configuration import Configuration as Configuration
    from flink_gpu.flink.configuration import config_option as config_option
    from flink_gpu.flink.framework import ExternalResourceDriver as ExternalResourceDriver
    from flink_gpu.flink.framework import ExternalResourceDriverFactory as ExternalResourceDriverFactory
    from flink_gpu.flink.framework import ExternalResourceInfoProvider as ExternalResourceInfoProvider
    from flink_gpu.flink.framework import load_external_resources as load_external_resources
    from flink_gpu.flink.resource_info import ExternalResourceInfo as ExternalResourceInfo
    from flink_gpu.gpu.affinity import pin_to_gpus as pin_to_gpus
    from flink_gpu.gpu.driver import GPUDriver as GPUDriver
    from flink_gpu.gpu.driver import GPUDriverFactory as GPUDriverFactory
    from flink_gpu.gpu.info import GPUInfo as GPUInfo
    from flink_gpu.gpu.info import cuda_visible_devices as cuda_visible_devices
    from flink_gpu.gpu.options import GPUDriverOptions as GPUDriverOptions

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "Configuration": "flink_gpu.flink.configuration",
    "ConfigOption": "flink_gpu.flink.configuration",
    "config_option": "flink_gpu.flink.configuration",
    "ExternalResourceInfo": "flink_gpu.flink.resource_info",
    "ExternalResourceDriver": "flink_gpu.flink.framework",
    "ExternalResourceDriverFactory": "flink_gpu.flink.framework",
    "ExternalResourceInfoProvider": "flink_gpu.flink.framework",
    "load_external_resources": "flink_gpu.flink.framework",
    "kubernetes_resource_requirements": "flink_gpu.deploy.requests",
    "merge_into_pod_template": "flink_gpu.deploy.requests",
    "yarn_resources": "flink_gpu.deploy.requests",
    "GPUDriverFactory": "flink_gpu.gpu.driver",
    "GPUDriver": "flink_gpu.gpu.driver",
    "GPUInfo": "flink_gpu.gpu.info",
    "GPUDriverOptions": "flink_gpu.gpu.options",
    "cuda_visible_devices": "flink_gpu.gpu.info",
    "pin_to_gpus": "flink_gpu.gpu.affinity",
}

# the exceptions: flink_gpu.errors' __all__, every failure a caller can act on
__all__ = [
    "BindingError",
    "CudaDeviceError",
    "DiscoveryScriptNotExecutable",
    "DiscoveryScriptNotFound",
    "FactoryLoadError",
    "FactoryNotFoundError",
    "FileTooLargeError",
    "FlinkException",
    "IllegalConfigurationException",
    "LocalClusterError",
    "NotARegularFileError",
    "NotEnoughGpusError",
    "NvmlError",
    "SlotUnknownError",
    "ValueTooLongError",
    *_LAZY,
]

__getattr__, __dir__ = _lazy.attach(__name__, _LAZY, __all__)
