"""The lease file beside a coordination or bindings file, as tests read it (docs/design.md §9.4)."""

import os


def lease_token(path: "str | os.PathLike[str]") -> str:
    """The token the lease file of ``path`` carries, which a holder's lines record as ``lf=``."""
    lease = f"{os.fspath(path)}.lease"
    with open(lease, "rb") as f:
        token, inode = f.readline().decode("ascii").split()  # "<token> <inode>\n"
    assert len(token) == 16 and int(inode) == os.stat(lease).st_ino, f"no token for {lease}'s inode"
    return token


def our_lease(path: "str | os.PathLike[str]", slot: int = 0) -> str:
    """The fields a line of this process records for its lease on byte ``slot`` of ``path``'s lease file."""
    return f"\tlease={slot}\tlf={lease_token(path)}"
