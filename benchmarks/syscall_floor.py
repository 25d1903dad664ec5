"""The syscall floor of a coordinated claim + release: ``floor/coordination_floor.c``, compiled with
the system C compiler into a shared library and called through ctypes (see docs/design.md §8)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "floor" / "coordination_floor.c"


def build(directory: Path) -> Path:
    """Compiles the floor into ``directory``; the compiler's error when it fails."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        compiler = "cc"
    out = Path(directory) / "libcoordination_floor.so"
    proc = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"Cannot compile {SOURCE} with {compiler}: {proc.stderr.strip()}")
    return out


class Floor:
    """One claim + release of given lines on a coordination file and its lease file."""

    # byte 1: this process may keep its idle lease on byte 0 of the lease file after real_lines()'s claim
    # (csrc/coordination/lease.hpp), and OFD locks of two descriptions of one process exclude each other
    def __init__(self, library: Path, path: Path | str, lines: bytes, slot: int = 1):
        self._lib = ctypes.CDLL(str(library))
        self._lib.floor_cycle.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
        ]
        self._lib.floor_cycles.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int64),
        ]
        self._path = os.fsencode(str(path))
        self._lease = self._path + b".lease"
        self._lines = lines
        self._slot = slot
        with open(self._lease, "ab"):  # the real claim creates it once; the floor only opens it
            pass

    def cycle(self) -> None:
        if self._lib.floor_cycle(self._path, self._lease, self._lines, len(self._lines), self._slot) != 0:
            raise OSError(ctypes.get_errno(), f"floor cycle failed on {self._path!r}")

    def cycles(self, count: int) -> list[int]:
        """``count`` cycles run in C; each one's latency in nanoseconds."""
        latencies = (ctypes.c_int64 * count)()
        if (
            self._lib.floor_cycles(self._path, self._lease, self._lines, len(self._lines), self._slot, count, latencies)
            != 0
        ):
            raise OSError(ctypes.get_errno(), f"floor cycles failed on {self._path!r}")
        return list(latencies)


def real_lines(path: Path | str, amount: int, indices) -> bytes:
    """The lines a real claim of ``amount`` of ``indices`` writes for this process (then released)."""
    from flink_gpu import coordination

    coordination.claim(amount, indices, path=path)
    ours = f" {os.getpid()}\t".encode()
    lines = b"".join(line for line in Path(path).read_bytes().splitlines(keepends=True) if ours in line)
    coordination.release(path=path)
    return lines
