"""Pin the calling process to the CPUs local to its GPUs (docs/design.md §9.1).

The NVML backend gives every ``GPUInfo`` a ``cpu.affinity`` property: the GPU's local CPUs as a
Linux cpulist (``0-15,32-47``). :func:`pin_to_gpus` restricts every thread of the process to the
union of those, within the CPUs the process may already use.
"""

from __future__ import annotations

import logging
import os
import threading

from flink_gpu.gpu.info import PROPERTY_CPU_AFFINITY

TYPE_CHECKING = False  # annotations only
if TYPE_CHECKING:
    from collections.abc import Iterable

    from flink_gpu.flink.resource_info import ExternalResourceInfo

_log = logging.getLogger("flink_gpu.gpu.affinity")

# a thread started while we pin inherits its creator's mask: list the threads again until none is
# new, but give up on a process that keeps starting threads faster than we can pin them
_MAX_PASSES = 10

# whether this process said that its GPUs report no CPU affinity: every subtask's open() pins, and a driver
# without the query (the simulator, some VMs) answers the same each time
_no_affinity_said = False
_no_affinity_lock = threading.Lock()


def parse_cpulist(text: str) -> frozenset[int]:
    """The CPUs of a Linux cpulist (``0-3,8,10-11``); ``ValueError`` naming it when malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(f"{text!r} is not a CPU list such as '0-15,32-47'.") from None
        if low < 0 or high < low:
            raise ValueError(f"{text!r} is not a CPU list such as '0-15,32-47': bad range {part!r}.")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def _first_no_affinity() -> bool:
    """True the first time this process finds no GPU info with its CPUs."""
    global _no_affinity_said
    with _no_affinity_lock:
        said, _no_affinity_said = _no_affinity_said, True
    return not said


def _threads() -> set[int]:
    return {int(entry) for entry in os.listdir("/proc/self/task")}


def pin_to_gpus(infos: Iterable[ExternalResourceInfo]) -> frozenset[int]:
    """Restrict every thread of this process (as listed in ``/proc/self/task``) to the CPUs local
    to ``infos``, and return the CPU set applied.

    The set is the union of the infos' ``cpu.affinity`` intersected with the CPUs this thread may
    use now (``os.sched_getaffinity(0)``, e.g. as ``taskset`` or a cgroup left them). When that is
    empty nothing changes and the current set is returned: when none of the GPUs' CPUs may be used here, a WARN
    says so (pinning cannot be done); when no info knows its CPUs (a driver without the query, as the
    simulator's and some VMs', or infos from a discovery script) that is no fault, and one INFO per process
    says so.
    """
    local: set[int] = set()
    known = []
    for info in infos:
        text = info.get_property(PROPERTY_CPU_AFFINITY)
        if text is None:
            continue
        try:
            local |= parse_cpulist(text)
        except ValueError as error:
            raise ValueError(f"The {PROPERTY_CPU_AFFINITY} of {info} is not usable: {error}") from None
        known.append(f"{info}: {text}")
    allowed = frozenset(os.sched_getaffinity(0))
    chosen = allowed & local
    if not chosen:
        if known:
            _log.warning(
                "Not pinning to the GPUs' CPUs: none of them (%s) is among the CPUs this "
                "process may use (%s); the affinity is unchanged.",
                "; ".join(known),
                format_cpulist(allowed),
            )
        elif _first_no_affinity():
            _log.info(
                "Not pinning to the GPUs' CPUs: no GPU info has a %s property (NVML reports none on the "
                "simulator and some VMs, a discovery script none at all); the affinity is unchanged.",
                PROPERTY_CPU_AFFINITY,
            )
        return allowed
    pinned: set[int] = set()
    for _ in range(_MAX_PASSES):
        pending = _threads() - pinned
        if not pending:
            break
        for tid in pending:
            try:
                os.sched_setaffinity(tid, chosen)
            except ProcessLookupError:
                pass  # the thread ended meanwhile
            pinned.add(tid)
    else:
        _log.warning(
            "Threads kept starting while pinning to CPUs %s; the newest may not be pinned.", format_cpulist(chosen)
        )
    return chosen


def format_cpulist(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` as the cpulist ``0-2,5``."""
    ranges: list[list[int]] = []  # [first, last] of each run
    for cpu in sorted(cpus):
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
