"""The lease file beside a coordination or bindings file, as tests read it (docs/design.md §9.4)."""

import fcntl
import os
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from support.files import fill


def lease_token(path: "str | os.PathLike[str]") -> str:
    """The token the lease file of ``path`` carries, which a holder's lines record as ``lf=``."""
    lease = f"{os.fspath(path)}.lease"
    with open(lease, "rb") as f:
        token, inode = f.readline().decode("ascii").split()  # "<token> <inode>\n"
    assert len(token) == 16 and int(inode) == os.stat(lease).st_ino, f"no token for {lease}'s inode"
    return token


def lease_held(path: "str | os.PathLike[str]", slot: int) -> bool:
    """Whether some process holds byte ``slot`` of ``path``'s lease file (F_OFD_GETLK, as another pid namespace
    tests it: a line's own namespace judges it by pid instead)."""
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, slot, 1, 0)  # struct flock, l_pid 0 for OFD locks
    with open(f"{os.fspath(path)}.lease", "rb") as lease:
        (l_type,) = struct.unpack_from("h", fcntl.fcntl(lease, fcntl.F_OFD_GETLK, query))
    return l_type != fcntl.F_UNLCK


def our_lease(path: "str | os.PathLike[str]", slot: int = 0) -> str:
    """The fields a line of this process records for its lease on byte ``slot`` of ``path``'s lease file."""
    return f"\tlease={slot}\tlf={lease_token(path)}"


@contextmanager
def tokenless_lease_file(path: Path, cause: str) -> "Iterator[None]":
    """While the block runs, the lease file of ``path`` cannot get its token: its filesystem is full
    (``cause="full"``: ``path`` on a small tmpfs, support.files.small_tmpfs), or another process holds its
    flock(2) for longer than a claim waits for it (``"flock held"``: 0.2 s)."""
    if cause == "full":
        filler = fill(path.parent)
        try:
            yield
        finally:
            filler.unlink()
        return
    lease = Path(f"{path}.lease")
    lease.touch()
    with open(lease, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield
