"""The one discovery and the one bind (docs/design.md §4.2, §9.1, §9.3): each decides everything in one
call into the C++ core (csrc/policy/) and returns one typed record.

:func:`discover` reads each GPU's state now, judges and ranks it, and hands out the best ``amount`` or
claims them in the host's coordination file; :func:`bind` judges the given GPUs (a TaskManager's) the way
its driver does and binds ``count`` of the usable ones to a holder in the bindings file. No Python module
ranks GPUs or filters their health itself: the driver, ``flink-gpu claim``, :func:`flink_gpu.binding.bind`
and :func:`flink_gpu.pyflink.bind_gpus` all come here.
"""

from __future__ import annotations

import os
from typing import Iterable

from flink_gpu._native import BindOutcome, DiscoveryOutcome, LeftOut, Orphan, policy_bind, policy_discover
from flink_gpu.coordination import DEFAULT_TIMEOUT
from flink_gpu.nvml import DEFAULT_NVML_TIMEOUT, Library

__all__ = ["BindOutcome", "DiscoveryOutcome", "LeftOut", "Orphan", "bind", "discover"]


def discover(
    library: Library,
    amount: int,
    indices: "Iterable[str] | None",
    *,
    owner: int,
    taskmanager: "int | None" = None,
    skipped: "Iterable[tuple[str, str]]" = (),
    counted: str = "devices NVML lists",
    busy_gpus: str = "avoid",
    topology: str = "prefer",
    health_checks: "tuple[str, ...] | None" = None,
    nvml_timeout: float = DEFAULT_NVML_TIMEOUT,
    coordination_file: "str | os.PathLike[str] | None" = None,
    lock_timeout: float = DEFAULT_TIMEOUT,
    known_devices: "Iterable[str] | None" = None,
) -> DiscoveryOutcome:
    """``amount`` of ``indices`` (``library.devices().devices``' indices, in its order; ``skipped``: (index, reason)
    of the devices it skipped, counted in a shortage, which names the host's devices as ``counted``).
    ``indices`` None: no enumeration is made, the devices are the GPUs read (a GPU's first handle is taken
    only when it is read, in preference order, until enough are found); with ``known_devices`` (indices of
    the devices whose static properties the caller has) too, the GPUs of the others that could be handed
    out, and of the unhealthy ones read, are enumerated before anything is claimed (the record's ``devices`` and
    ``skipped``), and a device the enumeration skips is left out. Judged
    for ``owner`` and its ``taskmanager`` with ``health_checks`` (names of HEALTH_CHECKS; None: all) and
    ranked under ``busy_gpus``; of two or more under ``topology`` "prefer" the best joined set of the class
    (the topology read once per process), under "ignore" index order and no topology read; every state read
    within ``nvml_timeout`` seconds; with
    ``coordination_file``, claimed there for ``owner`` (its lock within ``lock_timeout`` seconds).

    Too few usable or free GPUs are the record's ``shortage``, not an error. Raises
    :class:`~flink_gpu.NvmlError` when NVML fails, TimeoutError when the file's lock is not had in time,
    OSError for a file that cannot be used."""
    path = None if coordination_file is None else os.fspath(coordination_file)
    return policy_discover(
        library,
        indices,
        skipped,
        counted,
        owner,
        taskmanager,
        busy_gpus,
        health_checks,
        nvml_timeout,
        amount,
        path,
        lock_timeout,
        known_devices,
        topology,
    )


def bind(
    library: "Library | None",
    path: str,
    gpus: "Iterable[str]",
    count: int,
    holders_per_gpu: int,
    *,
    holder_pid: int,
    slot: "str | None" = None,
    taskmanager: "int | None" = None,
    health_checks: "tuple[str, ...] | None" = None,
    nvml_timeout: float = DEFAULT_NVML_TIMEOUT,
    lock_timeout: float = DEFAULT_TIMEOUT,
    memory: int = 0,
    topology: str = "prefer",
    pack: bool = False,
) -> BindOutcome:
    """``count`` of ``gpus`` (indices) bound in the bindings file ``path`` (its lock within ``lock_timeout``
    seconds) to the process ``holder_pid``, or with ``slot`` to that slot for thread ``holder_pid``, each GPU
    shared by at most ``holders_per_gpu`` holders; every GPU judged by ``library`` (None: NVML could not be
    opened, each is taken as it is) with ``health_checks`` within ``nvml_timeout`` seconds, unhealthy and
    unknown ones left out, busy and degraded ones last; with ``memory`` (bytes, 0: none) requested on each
    GPU, only GPUs whose holders' requests with it fit NVML's total and whose free memory covers it. Of two
    or more, the best joined set of the last class needed (``topology`` "prefer"; "ignore": none is read);
    ``pack``: the most-bound GPU that still has room first, instead of the least-bound.

    Too few usable or free GPUs are the record's ``shortage``, not an error. Raises TimeoutError when the
    file's lock is not had in time, OSError for a file that cannot be used, ValueError for a bad slot or a
    memory request larger than every GPU or other than the one the holder bound with."""
    return policy_bind(
        library,
        path,
        lock_timeout,
        holder_pid,
        slot,
        taskmanager,
        gpus,
        count,
        holders_per_gpu,
        health_checks,
        nvml_timeout,
        memory,
        topology,
        pack,
    )
