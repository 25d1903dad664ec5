# How this host's GPUs are joined (csrc/nvml/topology.*, csrc/topology/links.*, sets.*): the records a
# topology read returns; included by _native.pyx after _nvml_state.pxi (Nvml.topology() makes them).


cdef class NvLinks(_Record):
    """What NVML says of one GPU's NVLinks: ``known`` (the link count or a link's state was answered),
    ``count`` (links the GPU has, active or not), ``inactive`` (of those, not active) and ``to_switch`` (a
    link leads to an NVSwitch: the GPU is part of a switch fabric)."""

    _FIELDS = ("known", "count", "inactive", "to_switch")
    cdef readonly bint known
    cdef readonly unsigned count
    cdef readonly unsigned inactive
    cdef readonly bint to_switch

    def __init__(self):
        raise TypeError("NvLinks objects come from Topology.nvlinks")


cdef class GpuLink(_Record):
    """How two GPUs are joined: ``nvlinks`` usable between them (0: none known), ``pcie`` their closest
    common PCIe point as `nvidia-smi topo -m` names it ("X" for the same GPU, "PIX", "PXB", "PHB", "NODE",
    "SYS", "?" unknown), ``pcie_level`` its rank (0 the same GPU, closer first, unknown last) and ``cell``
    the matrix's text ("NV<n>" where NVLinks join them, else ``pcie``)."""

    _FIELDS = ("nvlinks", "pcie", "pcie_level", "cell")
    cdef readonly unsigned nvlinks
    cdef readonly str pcie
    cdef readonly int pcie_level
    cdef readonly str cell

    def __init__(self):
        raise TypeError("GpuLink objects come from Topology.between()")


cdef class Topology(_Record):
    """How the GPUs ``gpus`` (NVML numbers, ascending) are joined, as ``nvidia-smi topo -m`` shows it:
    ``matrix`` (a row per GPU of ``gpus``, a cell per GPU: "X" on the diagonal, "NV<n>", "PIX", "PXB", "PHB",
    "NODE", "SYS", "?" where unknown), ``nvlinks`` (an NvLinks per GPU), ``numa`` (per GPU its NUMA node from
    sysfs, None where unknown), ``calls`` (the NVML calls this read made; 0: all of it was read earlier in this
    process) and ``stalls`` (a sentence per GPU not read in time: its pairs are unknown)."""

    _FIELDS = ("gpus", "matrix", "nvlinks", "numa", "calls", "stalls")
    cdef CTopology _c
    cdef readonly tuple gpus
    cdef readonly tuple matrix
    cdef readonly tuple nvlinks
    cdef readonly tuple numa
    cdef readonly unsigned long calls
    cdef readonly tuple stalls

    def __init__(self):
        raise TypeError("Topology objects come from Nvml.topology()")

    def between(self, a, b):
        """The GpuLink of GPUs ``a`` and ``b`` (NVML numbers; one that was not read: unknown)."""
        cdef unsigned first = _gpu_number(a)
        cdef unsigned second = _gpu_number(b)
        return _gpu_link(self._c.links.between(first, second))

    def best_set(self, among, count):
        """Of the GPUs ``among`` (NVML numbers, in the caller's preference), the ``count`` joined best, as the
        one choice takes them (csrc/topology/sets.hpp), in ascending order; ValueError when ``among`` has
        fewer."""
        cdef vector[CCandidate] candidates
        cdef CCandidate candidate
        numbers = [_gpu_number(gpu) for gpu in among]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a whole number of at least 1, got {count!r}.")
        if count > len(numbers):
            raise ValueError(f"best_set needs {count} GPUs, but among names {len(numbers)}.")
        for gpu in numbers:
            candidate.index = _utf8(str(gpu))
            candidate.rank = 0
            candidates.push_back(candidate)
        cdef vector[string] fixed
        cdef vector[size_t] chosen = choose_set(self._c.links, fixed, candidates, count)
        return tuple(sorted([numbers[i] for i in chosen]))

    def joined_better(self, a, b):
        """Whether the GPUs ``a`` are joined better than the GPUs ``b`` (NVML numbers), by the one choice's own
        measure (csrc/topology/sets.hpp: NVLinks summed over their pairs, then the worst PCIe level, then their
        sum)."""
        cdef vector[string] first = [_utf8(str(_gpu_number(gpu))) for gpu in a]
        cdef vector[string] second = [_utf8(str(_gpu_number(gpu))) for gpu in b]
        return compare_joined(self._c.links, first, second) < 0


cdef unsigned _gpu_number(gpu) except? 0xFFFFFFFF:
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 0xFFFFFFFF:
        raise ValueError(f"A GPU's NVML number is a whole number of at least 0, got {gpu!r}.")
    return gpu


cdef GpuLink _gpu_link(const CLink& c):
    cdef GpuLink out = GpuLink.__new__(GpuLink)
    out.nvlinks = c.nvlinks
    out.pcie = pcie_label(c.pcie).decode("ascii")
    out.pcie_level = <int>c.pcie
    out.cell = _text(link_cell(c))
    return out


cdef NvLinks _nvlinks(const CNvLinkReading& c):
    cdef NvLinks out = NvLinks.__new__(NvLinks)
    out.known = c.known
    out.count = c.count
    out.inactive = c.inactive
    out.to_switch = c.to_switch
    return out


cdef object _numa_node(const string& bus_id):
    """The NUMA node of the GPU at ``bus_id``, as its device info has it (sysfs); None where unknown."""
    cdef optional[int] node = pci_numa_node(b"/sys", bus_id)
    return node.value() if node.has_value() else None


cdef Topology _topology(CTopology& c, tuple gpus, double seconds):
    """The record of the read ``c`` of ``gpus`` (ascending), made within ``seconds``."""
    cdef Topology out = Topology.__new__(Topology)
    cdef CNvLinkReading none
    cdef unsigned a
    cdef unsigned b
    cdef size_t i
    out._c = c
    if c.nvlink.empty() and c.stalls.empty():
        gpus = ()  # nothing read and nothing stalled: no GPU, or more than a topology is read for
    out.gpus = gpus
    out.matrix = tuple([tuple(["X" if a == b else _text(link_cell(c.links.between(a, b))) for b in gpus])
                        for a in gpus])
    links = []
    numa = []
    for a in gpus:
        links.append(_nvlinks(c.nvlink[a] if c.nvlink.count(a) else none))
        numa.append(_numa_node(c.bus_ids[a]) if c.bus_ids.count(a) else None)
    out.nvlinks = tuple(links)
    out.numa = tuple(numa)
    out.calls = c.calls
    out.stalls = tuple([_text(stall_text(c.stalls[i], seconds)) for i in range(c.stalls.size())])
    return out
