"""The NVML backend (docs/design.md §4.2, §9.1): GPUs enumerated in-process through :mod:`flink_gpu.nvml`.

No process is spawned. Each device becomes a ``GPUInfo`` whose index is NVML's (= nvidia-smi's,
what the stock script prints) and whose properties carry the static ones (uuid, name, PCI bus id,
total memory, minor number, local CPUs, NUMA node), cached per process, and the GPU's state when
it was chosen (health, memory used and free, the number of processes), read per choice. Which
devices a worker gets is decided in one place, :meth:`NvmlDiscovery.choose`: the C++ core reads the
GPUs in preference order until it has enough, ranks them by health and foreign processes
(``busy-gpus``), and claims them; only the GPUs it reads are opened (a GPU's first handle in a process
costs seconds without persistence mode), and only those that could be handed out are enumerated.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Iterable

from flink_gpu import coordination, policy
from flink_gpu.errors import FlinkException, NotEnoughGpusError
from flink_gpu.gpu import holders
from flink_gpu.gpu.info import (
    PROPERTY_CPU_AFFINITY,
    PROPERTY_HEALTH,
    PROPERTY_MEMORY_FREE,
    PROPERTY_MEMORY_TOTAL,
    PROPERTY_MEMORY_USED,
    PROPERTY_MIG_CI,
    PROPERTY_MIG_GI,
    PROPERTY_MINOR_NUMBER,
    PROPERTY_NAME,
    PROPERTY_NUMA_NODE,
    PROPERTY_PARENT_INDEX,
    PROPERTY_PARENT_UUID,
    PROPERTY_PCI_BUS_ID,
    PROPERTY_PROCESSES,
    PROPERTY_UUID,
    GPUInfo,
)
from flink_gpu.gpu.settings import GPUDriverSettings
from flink_gpu.nvml import Device, DeviceState, Library, Verdict, find_taskmanager

if TYPE_CHECKING:
    from flink_gpu.policy import DiscoveryOutcome

_log = logging.getLogger("flink_gpu.gpu.nvml_discovery")


def static_properties(device: Device) -> dict[str, str]:
    """The properties of an NVML device (a :class:`flink_gpu.nvml.Device`) that do not change
    while NVML is initialised: each one the driver answered (a MIG unit's parent and instances too)."""
    properties: dict[str, str] = {}
    for key, value in (
        (PROPERTY_UUID, device.uuid),
        (PROPERTY_NAME, device.name),
        (PROPERTY_PCI_BUS_ID, device.pci_bus_id),
        (PROPERTY_MEMORY_TOTAL, device.memory_total),
        (PROPERTY_MINOR_NUMBER, device.minor_number),
        (PROPERTY_CPU_AFFINITY, device.cpu_affinity),
        (PROPERTY_NUMA_NODE, device.numa_node),
        (PROPERTY_PARENT_INDEX, device.parent_index),
        (PROPERTY_PARENT_UUID, device.parent_uuid),
        (PROPERTY_MIG_GI, device.mig_gi),
        (PROPERTY_MIG_CI, device.mig_ci),
    ):
        if value is not None:
            properties[key] = str(value)
    return properties


def gpu_info(device: Device) -> GPUInfo:
    """The ``GPUInfo`` of an NVML device with its static properties (no state: that is read
    when the NVML backend makes a choice)."""
    return GPUInfo(device.gpu_index, static_properties(device))


def state_properties(state: DeviceState) -> dict[str, str]:
    """The properties a :class:`flink_gpu.nvml.DeviceState` gives an info, each where known."""
    properties = {PROPERTY_HEALTH: state.health}
    if state.memory_used is not None:
        properties[PROPERTY_MEMORY_USED] = str(state.memory_used)
    if state.memory_free is not None:
        properties[PROPERTY_MEMORY_FREE] = str(state.memory_free)
    if state.processes_known and state.processes_read:  # busy-gpus ignore reads none: no property
        properties[PROPERTY_PROCESSES] = str(len(state.processes))
    return properties


def process_holders(nvml: Library, holders: Iterable[int]) -> "dict[tuple[str, int], int]":
    """``(GPU index, pid) -> holder`` for each process NVML lists that belongs to one of
    ``holders`` (owner pids in the coordination file): the holder itself or a descendant of it,
    by the C++ core's own-process rule with that holder as the owner."""
    belongs: dict[tuple[str, int], int] = {}
    for holder in sorted(set(holders)):
        for state in nvml.states(holder, None):
            for process in state.processes:
                if process.own:
                    belongs.setdefault((state.gpu_index, process.pid), holder)
    return belongs


class _Known:
    """What a process learnt of the host's GPUs through one library, shared by all its drivers: the static
    properties of the GPUs enumerated so far (only those a choice could hand out, and unhealthy ones it
    read: a GPU that is never read is never opened), and what was WARNed."""

    __slots__ = ("pid", "counted", "static", "warned")

    def __init__(self, pid: int, counted: str) -> None:
        self.pid = pid
        self.counted = counted  # what a shortage calls the devices: "devices NVML (<library>) lists"
        self.static: dict[str, dict[str, str]] = {}  # index -> static properties
        # (index, health), (index, warning), (index, "processes unknown") and (index, skip reason) WARNed
        # once per process
        self.warned: set[tuple[str, str]] = set()


# library path -> what the process knows of its GPUs (see NvmlDiscovery)
_known: dict[str, _Known] = {}

# pid -> its TaskManager (the nearest TaskManagerRunner ancestor), found once per process
_taskmanagers: dict[int, "int | None"] = {}


class NvmlDiscovery:
    """GPUs from NVML. What the process learns of them (their static properties, read once per GPU) is
    shared by every driver of the process and library: the devices and their static properties do not
    change while NVML is initialised (a forked child learns anew). Their state is read each time a choice
    is made.
    """

    def __init__(self, nvml: Library, settings: GPUDriverSettings) -> None:
        """``nvml`` is an opened :class:`flink_gpu.nvml.Library` (it re-initialises after a fork);
        ``settings.script_args`` say whether and through which file to coordinate,
        ``settings.busy_policy()`` what to do with busy GPUs."""
        self.args = settings.script_args
        self.busy_gpus = settings.busy_policy()
        self.topology = settings.topology_policy()
        self.health_checks = settings.health_checks
        self.nvml_timeout = settings.nvml_timeout_seconds()
        self._nvml: Library | None = nvml  # None once closed
        self._claimed: set[str] = set()  # indices this driver counts in holders.driver_holds
        self._claimed_pid = coordination.own_pid()

    def known(self) -> _Known:
        """What this process knows of the GPUs of this driver's library (a forked child starts anew)."""
        nvml = self._library()
        pid = coordination.own_pid()
        known = _known.get(nvml.library_path)
        if known is None or known.pid != pid:
            known = _known[nvml.library_path] = _Known(pid, f"devices NVML ({nvml.library_path}) lists")
        return known

    def choose(self, known: _Known, amount: int) -> frozenset[GPUInfo]:
        """The devices this worker gets, decided by the core's one discovery (flink_gpu.policy).

        It reads the devices' state now, within nvml-timeout, in preference order until ``amount`` of
        the best class are found, and ranks them (docs/design.md §9.1): unhealthy and unknown ones never,
        degraded ones last, busy ones by ``busy-gpus``; within a class, for two or more under ``topology:
        prefer``, the best joined set (NVLink, then PCIe), else the lowest index first. Not
        coordinated: the first ``amount`` of that order (docs/design.md §4.2). Coordinated: claimed for
        this process in the coordination file shared with the other workers of the host, honouring the
        ranks (docs/design.md §5.2); asking again returns what this process already holds.
        """
        pid = coordination.own_pid()
        try:
            taskmanager = _taskmanagers[pid]
        except KeyError:
            taskmanager = _taskmanagers[pid] = find_taskmanager(pid)
        nvml = self._library()
        path = self.args.coordination_file if self.args.coordination_mode else None
        with holders.driver_lock if path is not None else contextlib.nullcontext():
            outcome = policy.discover(
                nvml,
                amount,
                None,
                owner=pid,
                taskmanager=taskmanager,
                counted=known.counted,
                busy_gpus=self.busy_gpus,
                topology=self.topology,
                health_checks=self.health_checks,
                nvml_timeout=self.nvml_timeout,
                coordination_file=path,
                known_devices=known.static.keys(),
            )
            if path is not None and outcome.shortage is None:
                self._count_holds(path, pid, outcome)
        self._learn(known, outcome)
        for state in outcome.states:
            self._warn(known, state.gpu_index, state)
        if path is not None:
            coordination.log_notices(outcome.notices)
        if outcome.shortage is not None:
            # too few usable is Flink's FlinkException; too few free, the claim's NotEnoughGpusError
            raise (FlinkException if outcome.too_few_usable else NotEnoughGpusError)(outcome.shortage)
        states = {state.gpu_index: state for state in outcome.states}
        return frozenset([self._info(known, index, state_properties(states[index])) for index in outcome.chosen])

    @staticmethod
    def _learn(known: _Known, outcome: DiscoveryOutcome) -> None:
        """Keeps the static properties of the devices ``outcome`` enumerated; WARNs, once per process, a
        device the enumeration skipped (it was left out)."""
        for device in outcome.devices:
            known.static[device.gpu_index] = static_properties(device)
        for skipped in outcome.skipped:
            if (skipped.gpu_index, skipped.reason) not in known.warned:
                known.warned.add((skipped.gpu_index, skipped.reason))
                _log.warning("%s", skipped.reason)

    @staticmethod
    def _info(known: _Known, index: str, properties: dict[str, str]) -> GPUInfo:
        """The GPUInfo of ``index``: its static properties and its state ``properties``."""
        return GPUInfo(index, {**known.static.get(index, {}), **properties})

    def _count_holds(self, path: str, pid: int, outcome: DiscoveryOutcome) -> None:
        """Counts the GPUs of ``outcome`` this driver uses in holders.driver_holds (under holders.driver_lock)."""
        if self._claimed_pid != pid:  # a forked child: the parent's counts are not its own
            self._claimed, self._claimed_pid = set(), pid
        for index in outcome.chosen:
            hold = (path, pid, index)
            # GPUs the process held otherwise (coordination.claim()) are not the drivers' to release;
            # one that a driver added is released when no open driver uses it
            if index not in self._claimed and (index in outcome.added or hold in holders.driver_holds):
                holders.driver_holds[hold] = holders.driver_holds.get(hold, 0) + 1
                self._claimed.add(index)

    @staticmethod
    def _warn(known: _Known, index: str, state: DeviceState) -> None:
        """WARN, once per process and GPU, an unhealthy GPU, a finding that leaves it ok, and a GPU
        whose processes NVML would not list; at every choice, a GPU whose state was not read in time."""
        warned = known.warned
        uuid = known.static.get(index, {}).get(PROPERTY_UUID)
        # a GPU never read in time was never enumerated: its uuid is not known
        gpu = f"GPU {index} ({uuid})" if uuid else f"GPU {index}"
        if state.verdict is Verdict.UNKNOWN:  # every time: it says how long the query has been stuck
            _log.warning("%s is %s; it is not handed out.", gpu, state.health)
        if state.verdict is Verdict.UNHEALTHY and (index, state.health) not in warned:
            warned.add((index, state.health))
            _log.warning("%s is %s; it is not handed out.", gpu, state.health)
        for warning in state.warnings:
            if (index, warning) not in warned:
                warned.add((index, warning))
                _log.warning("%s: %s; it is handed out.", gpu, warning)
        if not state.processes_known and (index, "processes unknown") not in warned:
            warned.add((index, "processes unknown"))
            _log.warning("NVML gives no permission to list the processes on GPU %s; it counts as not busy.", index)

    def _library(self) -> Library:
        nvml = self._nvml
        if nvml is None:
            raise FlinkException("This NVML discovery has been closed.")
        return nvml

    def retrieve(self, amount: int) -> frozenset[GPUInfo]:
        chosen = self.choose(self.known(), amount)
        if _log.isEnabledFor(logging.INFO):
            from flink_gpu.base.gpu_index import index_sort_order

            _log.info(
                "Discover GPU resources: [%s].", ", ".join(map(str, index_sort_order(chosen, lambda info: info.index)))
            )
        return chosen

    def close(self) -> None:
        """Releases what this driver claimed for the calling process (a forked child releases
        only its own claims, never its parent's)."""
        path = self.args.coordination_file
        pid = coordination.own_pid()
        with holders.driver_lock:
            claimed, self._claimed = self._claimed, set()
            self._nvml = None
            if self._claimed_pid != pid:
                return  # a forked child's copy of its parent's driver: nothing of the child's
            unused: list[str] = []
            for index in claimed:
                key = (path, pid, index)
                count = holders.driver_holds.get(key, 0)
                if count > 1:
                    holders.driver_holds[key] = count - 1
                else:
                    holders.driver_holds.pop(key, None)
                    unused.append(index)
            if unused:
                coordination.release(pid, path=path, indices=sorted(unused))
