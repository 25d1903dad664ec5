"""What a user would write instead of flink-gpu: pynvml (``nvidia-ml-py``) plus ``fcntl.flock`` on a
coordination file in Flink's format (``<index> <pid>`` per line, the stock script's file).

Written the way a competent user would: NVML initialised once per process, devices and their
properties queried when asked for, the file locked with ``flock(2)`` on the file itself (so that it
excludes the stock script), owners checked with ``os.kill(pid, 0)``, free GPUs before dead owners'
ones, claims appended, a release rewrites the file in place without its lines. It is the baseline
the benchmarks compare against, not part of the package.
"""

from __future__ import annotations

import errno
import fcntl
import os

import pynvml

_initialised_in: int | None = None


def _init() -> None:
    """nvmlInit once per process (again in a forked child)."""
    global _initialised_in
    pid = os.getpid()
    if _initialised_in != pid:
        pynvml.nvmlInit()
        _initialised_in = pid


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def device_count() -> int:
    _init()
    return pynvml.nvmlDeviceGetCount()


def device_info(index: int) -> dict[str, str]:
    """The properties flink-gpu's NVML backend reports for one device."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "index": str(index),
        "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "pci.bus-id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
        "memory.total": str(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        "minor-number": str(pynvml.nvmlDeviceGetMinorNumber(handle)),
    }


def retrieve(amount: int) -> list[dict[str, str]]:
    """The first ``amount`` GPUs with their properties (not coordinated)."""
    count = device_count()
    if count < amount:
        raise RuntimeError(f"Could not get enough GPU resources: {amount} requested, {count} present.")
    return [device_info(i) for i in range(amount)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _parse(lines: list[str]) -> list[tuple[str, int | None]]:
    entries = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            entries.append((fields[0], int(fields[1])))
        else:
            entries.append(("", None))  # kept as is, never reclaimed
    return entries


def claim(amount: int, path: str) -> list[dict[str, str]]:
    """Claims ``amount`` GPUs for this process in the coordination file at ``path``."""
    count = device_count()
    me = os.getpid()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            lines = f.read().splitlines()
            entries = _parse(lines)
            owners: dict[str, list[int]] = {}
            for index, pid in entries:
                if pid is not None:
                    owners.setdefault(index, []).append(pid)
            mine = [str(i) for i in range(count) if me in owners.get(str(i), ())]
            if len(mine) >= amount:
                return [device_info(int(i)) for i in mine[:amount]]
            chosen = list(mine)
            free = [str(i) for i in range(count) if str(i) not in owners]
            chosen += free[: amount - len(chosen)]
            reclaimed = []
            if len(chosen) < amount:
                for i in range(count):
                    index = str(i)
                    if len(chosen) == amount:
                        break
                    pids = owners.get(index)
                    if pids and index not in chosen and not any(map(_alive, pids)):
                        chosen.append(index)
                        reclaimed.append(index)
            if len(chosen) < amount:
                raise RuntimeError(
                    f"Could not get enough GPU resources: {amount} requested, {count} present, held: {owners}."
                )
            new = [f"{index} {me}\n" for index in chosen if index not in mine]
            if reclaimed:
                kept = [line + "\n" for line, (index, _) in zip(lines, entries, strict=True) if index not in reclaimed]
                f.seek(0)
                f.write("".join(kept + new))
                f.truncate()
            else:
                f.seek(0, os.SEEK_END)
                f.write("".join(new))
            f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    return [device_info(int(i)) for i in sorted(chosen, key=int)]


def release(path: str) -> None:
    """Removes this process's lines from the coordination file, rewriting it in place."""
    me = os.getpid()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return
        raise
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            lines = f.read().splitlines()
            kept = [line + "\n" for line, (_, pid) in zip(lines, _parse(lines), strict=True) if pid != me]
            if len(kept) != len(lines):
                f.seek(0)
                f.write("".join(kept))
                f.truncate()
                f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
