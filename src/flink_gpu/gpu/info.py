"""GPUInfo (docs/design.md §3.4) and the CUDA_VISIBLE_DEVICES helper.

This module is on the hot path of every operator that asks for its GPUs, so it imports nothing
beyond the framework's ABC and the native core's Java text rule and index order (one
implementation each, shared with flink-gpu-discovery; about 1 ms to load the extension once), and
keeps construction to a couple of attribute stores.
"""

from __future__ import annotations

from flink_gpu.flink.grammars import is_java_blank
from flink_gpu.flink.resource_info import ExternalResourceInfo

TYPE_CHECKING = False  # annotations only: collections (and typing) cost an operator ~2 ms to import
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: Property keys. ``index`` is Flink's; the others are filled by the NVML backend (docs/design.md §4.2).
PROPERTY_INDEX = "index"
PROPERTY_UUID = "uuid"
PROPERTY_NAME = "name"
PROPERTY_PCI_BUS_ID = "pci.bus-id"
PROPERTY_MEMORY_TOTAL = "memory.total"
PROPERTY_MINOR_NUMBER = "minor-number"
#: The GPU's state when it was chosen (docs/design.md §9.1): ``ok`` or ``degraded: <reason>``;
#: memory in bytes; the number of processes NVML listed on it.
PROPERTY_HEALTH = "health"
PROPERTY_MEMORY_USED = "memory.used"
PROPERTY_MEMORY_FREE = "memory.free"
PROPERTY_PROCESSES = "processes"
#: Locality: the GPU's local CPUs as a Linux cpulist (``0-15,32-47``) and its NUMA node.
PROPERTY_CPU_AFFINITY = "cpu.affinity"
PROPERTY_NUMA_NODE = "numa.node"
#: A MIG unit (docs/design.md §9.2), whose index is ``<parent index>:<slot>``: its GPU's index and
#: UUID, and its GPU and compute instance ids.
PROPERTY_PARENT_INDEX = "parent.index"
PROPERTY_PARENT_UUID = "parent.uuid"
PROPERTY_MIG_GI = "mig.gi"
PROPERTY_MIG_CI = "mig.ci"


class GPUInfo(ExternalResourceInfo):
    """One GPU as Flink's ``GPUInfo``: an index plus, from the NVML backend, static properties.

    ``str()`` is ``GPU Device(<index>)``; equality and hash use the index only, so infos from the
    script and the NVML backend for the same device are equal. Instances are immutable.
    """

    __slots__ = ("_index", "_properties")
    # set once, through object.__setattr__ (the class refuses attribute stores)
    _index: str
    _properties: dict[str, str] | None

    def __init__(self, index: str, properties: Mapping[str, str] | None = None) -> None:
        if type(index) is not str:
            raise TypeError(f"GPUInfo index must be a str, got {type(index).__name__}: {index!r}")
        if is_java_blank(index):
            raise ValueError(f"GPUInfo index must not be blank, got {index!r}.")
        object.__setattr__(self, "_index", index)
        if properties:
            properties = dict(properties)
            if PROPERTY_INDEX in properties:
                raise ValueError("GPUInfo properties must not contain 'index'; pass it as the index.")
            for key, value in properties.items():
                if type(key) is not str or type(value) is not str:
                    raise TypeError(f"GPUInfo properties must map str to str, got {key!r}: {value!r}")
        else:
            properties = None
        object.__setattr__(self, "_properties", properties)

    @property
    def index(self) -> str:
        """The GPU index as the backend reported it (a string, as in Flink)."""
        return self._index

    def get_property(self, key: str) -> str | None:
        if key == PROPERTY_INDEX:
            return self._index
        properties = self._properties
        return None if properties is None else properties.get(key)

    def get_keys(self) -> tuple[str, ...]:
        if self._properties is None:
            return (PROPERTY_INDEX,)
        return (PROPERTY_INDEX, *self._properties)

    def __str__(self) -> str:
        return f"GPU Device({self._index})"

    def __repr__(self) -> str:
        if self._properties is None:
            return f"GPUInfo({self._index!r})"
        return f"GPUInfo({self._index!r}, {self._properties!r})"

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, GPUInfo):
            return self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._index)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GPUInfo is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"GPUInfo is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[GPUInfo], tuple[str, dict[str, str] | None]]:
        # __slots__ plus the __setattr__ guard defeat pickle's default; rebuild through __init__.
        return (GPUInfo, (self._index, self._properties))


def cuda_visible_devices(infos: Iterable[ExternalResourceInfo]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that exposes exactly ``infos`` to CUDA.

    When every info knows its ``uuid`` (the NVML backend), the value lists UUIDs, which name the
    same devices whatever order CUDA enumerates them in. Otherwise (a discovery script reports only
    indices) it lists the indices; those are nvidia-smi/NVML indices, which equal CUDA ordinals only
    when the process runs with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default order is
    fastest-first). Entries are sorted by index so the value is deterministic; no infos give ``""``
    (no device visible). A MIG unit is named by its ``MIG-...`` UUID; CUDA uses only one MIG
    instance per process, so more than one unit raises ``ValueError`` (a TaskManager may hold
    several, one per slot: expose one to each; docs/design.md §9.2), and so does a unit without a
    uuid (index ``<gpu>:<slot>`` alone, as a Java ``GPUInfo`` gives it): its GPU's number would
    expose the whole GPU.
    """
    from flink_gpu.base.gpu_index import index_sort_order, unit_parent

    ordered = index_sort_order(infos, lambda info: info.get_property(PROPERTY_INDEX) or "")
    # a unit as the NVML backend describes it, or by its index alone (a Java GPUInfo, flink-gpu-discovery)
    units = [
        info
        for info in ordered
        if info.get_property(PROPERTY_PARENT_INDEX) is not None
        or unit_parent(info.get_property(PROPERTY_INDEX) or "") is not None
    ]
    if len(units) > 1:
        named = ", ".join(_index_of(info) for info in units)
        raise ValueError(
            f"A CUDA process can use only one MIG instance, but the infos hold {len(units)} "
            f"({named}): give each slot its own unit (one GPU per slot, e.g. "
            "cuda_visible_devices([info]) in each subtask) instead of exposing them all."
        )
    for unit in units:
        if not unit.get_property(PROPERTY_UUID):
            index = _index_of(unit)
            gpu = unit.get_property(PROPERTY_PARENT_INDEX) or unit_parent(index)
            raise ValueError(
                f"MIG instance {index} has no uuid: CUDA reaches a MIG instance only by its MIG- uuid, and "
                f"'{gpu}' in CUDA_VISIBLE_DEVICES would mean the whole GPU {gpu}, on which CUDA picks an instance "
                "of its own, possibly another slot's. Use infos from the NVML backend (discovery-mode nvml, "
                "which gives the uuid), or set CUDA_VISIBLE_DEVICES to the unit's MIG- uuid (nvidia-smi -L)."
            )
    uuids = [uuid for info in ordered if (uuid := info.get_property(PROPERTY_UUID))]
    if ordered and len(uuids) == len(ordered):
        return ",".join(uuids)
    return ",".join(_index_of(info) for info in ordered)


def _index_of(info: ExternalResourceInfo) -> str:
    """The ``index`` of ``info``; an info without one (another resource's) cannot be named to CUDA."""
    index = info.get_property(PROPERTY_INDEX)
    if index is None:
        raise ValueError(
            f"{info!r} has no 'index' property, so CUDA_VISIBLE_DEVICES cannot name it: "
            "pass cuda_visible_devices the infos of a GPU resource (GPUInfo), not another "
            "resource's."
        )
    return index
