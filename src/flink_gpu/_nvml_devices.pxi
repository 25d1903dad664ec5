# NVML's library and its devices (csrc/nvml/loader.*, devices.*): the enumeration's records, the loader's
# symbols and a library's probe; included by _native.pyx before the other _nvml*.pxi files.

cdef inline str _gpu_index(unsigned index, slot):
    return str(index) if slot is None else f"{index}:{slot}"


cdef class NvmlDevice:
    """One GPU, or one MIG instance standing in for its GPU in MIG mode, as NVML reports it; an
    attribute is None where the driver cannot answer.

    ``index``: the GPU's NVML index (a MIG unit's: its parent's); ``gpu_index``: the index as
    GPUInfo carries it, "<index>" or "<parent index>:<slot>" for a MIG unit; ``parent_index``,
    ``parent_uuid``, ``mig_slot``, ``mig_gi``, ``mig_ci``: a MIG unit's GPU, its slot and its GPU and
    compute instance ids (None for a whole GPU).
    """

    cdef readonly unsigned index
    cdef readonly object parent_uuid
    cdef readonly object mig_slot
    cdef readonly object mig_gi
    cdef readonly object mig_ci
    cdef readonly object uuid
    cdef readonly object name
    cdef readonly object pci_bus_id
    cdef readonly object memory_total
    cdef readonly object minor_number
    cdef readonly object cpu_affinity
    cdef readonly object numa_node
    cdef readonly object persistence_mode

    def __repr__(self):
        mig = (f", mig_slot={self.mig_slot!r}, parent_uuid={self.parent_uuid!r}, "
               f"mig_gi={self.mig_gi!r}, mig_ci={self.mig_ci!r}" if self.mig_slot is not None else "")
        return (f"NvmlDevice(index={self.index}{mig}, uuid={self.uuid!r}, name={self.name!r}, "
                f"pci_bus_id={self.pci_bus_id!r}, memory_total={self.memory_total!r}, "
                f"minor_number={self.minor_number!r}, cpu_affinity={self.cpu_affinity!r}, "
                f"numa_node={self.numa_node!r}, persistence_mode={self.persistence_mode!r})")

    @property
    def gpu_index(self):
        return _gpu_index(self.index, self.mig_slot)

    @property
    def parent_index(self):
        return None if self.mig_slot is None else self.index


cdef class SkippedDevice:
    """A GPU (or MIG unit) that exists but cannot be used (NO_PERMISSION, GPU_IS_LOST, MIG mode
    without instances, ...); ``index``, ``mig_slot`` and ``gpu_index`` as :class:`NvmlDevice` has them."""

    cdef readonly unsigned index
    cdef readonly object mig_slot
    cdef readonly int code
    cdef readonly str reason

    def __repr__(self):
        return f"SkippedDevice(index={self.gpu_index}, code={self.code}, reason={self.reason!r})"

    @property
    def gpu_index(self):
        return _gpu_index(self.index, self.mig_slot)


cdef NvmlDevice _device(const DeviceInfo& info):
    cdef NvmlDevice d = NvmlDevice.__new__(NvmlDevice)
    d.index = info.nvml_index
    d.mig_slot = info.mig_slot.value() if info.mig_slot.has_value() else None
    d.parent_uuid = _optional_text(info.parent_uuid)
    d.mig_gi = info.mig_gi.value() if info.mig_gi.has_value() else None
    d.mig_ci = info.mig_ci.value() if info.mig_ci.has_value() else None
    d.uuid = _optional_text(info.uuid)
    d.name = _optional_text(info.name)
    d.pci_bus_id = _optional_text(info.pci_bus_id)
    d.memory_total = info.memory_total.value() if info.memory_total.has_value() else None
    d.minor_number = info.minor_number.value() if info.minor_number.has_value() else None
    d.cpu_affinity = _optional_text(info.cpu_affinity)
    d.numa_node = info.numa_node.value() if info.numa_node.has_value() else None
    d.persistence_mode = bool(info.persistence_mode.value()) if info.persistence_mode.has_value() else None
    return d


cdef SkippedDevice _skipped(const CSkippedDevice& info):
    cdef SkippedDevice s = SkippedDevice.__new__(SkippedDevice)
    s.index = info.nvml_index
    s.mig_slot = info.mig_slot.value() if info.mig_slot.has_value() else None
    s.code = info.code
    s.reason = info.reason.decode("utf-8", "replace")
    return s


_SYMBOL_USES = {SymbolUse.kRequired: "required", SymbolUse.kFallback: "fallback", SymbolUse.kOptional: "optional"}


def nvml_symbols():
    """Every entry point the NVML loader looks up, in its order: {name: "required" | "fallback" | "optional"}."""
    cdef size_t i
    return {nvml_symbol(<NvmlSymbol>i).name.decode("ascii"): _SYMBOL_USES[nvml_symbol(<NvmlSymbol>i).use]
            for i in range(kNvmlSymbolCount)}


cdef class LibraryProbe(_Record):
    """What probe_nvml_library found in a library: the names of nvml_symbols() it ``exported``, those the
    loader ``resolved`` from it, and its ``process_api``, how it lists processes ("detail_list" | "v3" |
    "v3_r535" | "v2" | "v1" | "none")."""

    _FIELDS = ("exported", "resolved", "process_api")
    cdef readonly tuple exported
    cdef readonly tuple resolved
    cdef readonly str process_api

    def __init__(self):
        raise TypeError("LibraryProbe objects come from probe_nvml_library()")


def probe_nvml_library(library_path):
    """Loads (never initialises) the library at ``library_path``: a LibraryProbe."""
    cdef bytes encoded = os.fsencode(library_path)
    if not encoded or b"\0" in encoded:
        raise ValueError(f"Not a library path: {library_path!r}")
    cdef string requested = encoded
    cdef Status status
    cdef const NvmlLibrary* lib
    with nogil:
        lib = NvmlLibrary.probe(requested, &status)
    if lib == NULL:
        raise _error(status, os.fsdecode(encoded))
    cdef size_t i
    cdef LibraryProbe out = LibraryProbe.__new__(LibraryProbe)
    out.exported = tuple([nvml_symbol(<NvmlSymbol>i).name.decode("ascii") for i in range(kNvmlSymbolCount)
                          if lib.exports(<NvmlSymbol>i)])
    out.resolved = tuple([nvml_symbol(<NvmlSymbol>i).name.decode("ascii") for i in range(kNvmlSymbolCount)
                          if lib.resolved().test(i)])
    out.process_api = process_api_name(lib.api().process_api).decode("ascii")
    return out
