"""The one door to NVML: open a libnvidia-ml, list its usable devices and those it had to skip.

The work is done by the C++ core (csrc/nvml*, through ``flink_gpu._native``); every other module
goes through this one. A library is loaded and initialised once per path and process (once more in
a forked child), never per call.
"""

from __future__ import annotations

from flink_gpu._native import Nvml, NvmlDevice, SkippedDevice

__all__ = ["Device", "Library", "SkippedDevice", "open_library"]

#: A loaded, initialised libnvidia-ml: ``library_path``, ``driver_version`` (None when the driver
#: cannot say), ``devices()`` (the usable GPUs in NVML index order) and ``skipped()`` (the GPUs
#: the last ``devices()`` had to leave out, each with its NVML ``code`` and a ``reason``).
Library = Nvml
#: One usable GPU: ``index`` (NVML's, = nvidia-smi's), ``uuid``, ``name``, ``pci_bus_id``,
#: ``memory_total`` (bytes), ``minor_number``; an attribute is None where the driver cannot answer.
Device = NvmlDevice


def open_library(library_path: "str | None" = None) -> Library:
    """The library at ``library_path`` (None or empty: ``$FLINK_GPU_NVML_LIBRARY``, else
    ``libnvidia-ml.so.1``), loaded and initialised; raises :class:`~flink_gpu.NvmlError` when it
    cannot be loaded or initialised."""
    return Nvml.open(library_path)
