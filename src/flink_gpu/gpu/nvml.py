"""The NVML backend (docs/design.md §4.2): GPUs enumerated in-process through :mod:`flink_gpu.nvml`.

No process is spawned. Each device becomes a ``GPUInfo`` whose index is NVML's (= nvidia-smi's,
what the stock script prints) and whose properties carry uuid, name, PCI bus id, total memory and
minor number. Which devices a worker gets is decided in one place, :meth:`NvmlDiscovery.choose`,
where coordination between workers plugs in.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import NamedTuple

from flink_gpu.errors import FlinkException
from flink_gpu.gpu.info import (PROPERTY_MEMORY_TOTAL, PROPERTY_MINOR_NUMBER, PROPERTY_NAME,
                                PROPERTY_PCI_BUS_ID, PROPERTY_UUID, GPUInfo)
from flink_gpu.gpu.settings import GPUDriverSettings

_log = logging.getLogger("flink_gpu.gpu.nvml")

def gpu_info(device) -> GPUInfo:
    """The ``GPUInfo`` of an NVML device (a :class:`flink_gpu.nvml.Device`): its index, and each
    property the driver answered."""
    properties = {}
    for key, value in ((PROPERTY_UUID, device.uuid),
                       (PROPERTY_NAME, device.name),
                       (PROPERTY_PCI_BUS_ID, device.pci_bus_id),
                       (PROPERTY_MEMORY_TOTAL, device.memory_total),
                       (PROPERTY_MINOR_NUMBER, device.minor_number)):
        if value is not None:
            properties[key] = str(value)
    return GPUInfo(str(device.index), properties)


class _Enumeration(NamedTuple):
    pid: int
    infos: tuple[GPUInfo, ...]
    skipped: tuple
    by_index: dict[str, GPUInfo]


# library path -> the process's enumeration, shared by all its drivers (see NvmlDiscovery)
_enumerations: dict[str, _Enumeration] = {}

# (coordination file, pid, index) -> how many open drivers of process pid use a GPU that one of
# them added to the file. The file knows only the process, so a driver's close() releases a GPU
# when the last driver of the process that uses it closes, not while another one still uses it.
_driver_holds: dict[tuple[str, int, str], int] = {}
_driver_holds_lock = threading.Lock()  # held across the claim (up to its lock timeout)


def _new_lock_after_fork() -> None:
    # a child forked while another thread claimed would otherwise inherit the lock held forever
    global _driver_holds_lock
    _driver_holds_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


class NvmlDiscovery:
    """GPUs from NVML. Enumeration is done once per process and library, and reused by every
    driver: the devices and their static properties do not change while NVML is initialised (a
    forked child enumerates anew).
    """

    def __init__(self, nvml, settings: GPUDriverSettings) -> None:
        """``nvml`` is an opened :class:`flink_gpu.nvml.Library` (it re-initialises after a fork);
        ``settings.script_args`` say whether and through which file to coordinate."""
        self.args = settings.script_args
        self._nvml = nvml
        self._claimed: set[str] = set()  # indices this driver counts in _driver_holds
        self._claimed_pid = os.getpid()

    def enumerate(self) -> _Enumeration:
        """All usable devices as ``GPUInfo``s, in NVML index order.

        Cached per process: a forked child (whose NVML state is its own) enumerates again.
        """
        nvml = self._nvml
        pid = os.getpid()
        # shared with the process's other drivers, so that a new driver per task costs no NVML
        # queries and no GPUInfo objects (and a skipped device is WARNed once per process)
        enumeration = _enumerations.get(nvml.library_path)
        if enumeration is None or enumeration.pid != pid:
            devices = nvml.devices()
            skipped = tuple(nvml.skipped())
            for device in skipped:
                _log.warning("%s", device.reason)
            infos = tuple(gpu_info(d) for d in devices)
            enumeration = _Enumeration(pid, infos, skipped, {info.index: info for info in infos})
            _enumerations[nvml.library_path] = enumeration
        return enumeration

    def choose(self, enumeration: _Enumeration, amount: int) -> tuple[GPUInfo, ...]:
        """The devices this worker gets.

        Not coordinated: the first ``amount`` (docs/design.md §4.2). Coordinated: claimed for this process in
        the coordination file shared with the other workers of the host (docs/design.md §5.2); asking again
        returns what this process already holds.
        """
        infos = enumeration.infos
        if len(infos) < amount:
            raise FlinkException(self._shortage(enumeration, amount))
        if not self.args.coordination_mode:
            return infos[:amount]
        from flink_gpu import coordination

        by_index = enumeration.by_index
        path = self.args.coordination_file
        pid = os.getpid()
        with _driver_holds_lock:
            if self._claimed_pid != pid:  # a forked child: the parent's counts are not its own
                self._claimed, self._claimed_pid = set(), pid
            result = coordination.claim(amount, by_index, path=path)
            for index in result.taken:
                key = (path, pid, index)
                # GPUs the process held otherwise (coordination.claim()) are not the drivers' to
                # release; one that a driver added is released when no open driver uses it
                if index not in self._claimed and (index in result.added or key in _driver_holds):
                    _driver_holds[key] = _driver_holds.get(key, 0) + 1
                    self._claimed.add(index)
        return tuple(by_index[index] for index in result.taken)

    def _shortage(self, enumeration: _Enumeration, amount: int) -> str:
        present = len(enumeration.infos)
        message = (f"Could not get enough GPU resources: {amount} requested, but NVML "
                   f"({self._nvml.library_path}) reports {present} usable "
                   f"device{'' if present == 1 else 's'}")
        if enumeration.skipped:
            reasons = " ".join(device.reason for device in enumeration.skipped)
            message += f" and {len(enumeration.skipped)} skipped ({reasons})"
        return message + "."

    def retrieve(self, amount: int) -> frozenset[GPUInfo]:
        chosen = self.choose(self.enumerate(), amount)
        if _log.isEnabledFor(logging.INFO):
            _log.info("Discover GPU resources: [%s].", ", ".join(map(str, chosen)))
        return frozenset(chosen)

    def close(self) -> None:
        """Releases what this driver claimed for the calling process (a forked child releases
        only its own claims, never its parent's)."""
        path = self.args.coordination_file
        pid = os.getpid()
        with _driver_holds_lock:
            claimed, self._claimed = self._claimed, set()
            self._nvml = None
            if self._claimed_pid != pid:
                return  # a forked child's copy of its parent's driver: nothing of the child's
            unused = []
            for index in claimed:
                key = (path, pid, index)
                count = _driver_holds.get(key, 0)
                if count > 1:
                    _driver_holds[key] = count - 1
                else:
                    _driver_holds.pop(key, None)
                    unused.append(index)
            if unused:
                from flink_gpu import coordination

                coordination.release(path=path, indices=sorted(unused))

