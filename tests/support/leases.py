"""The lease file beside a coordination or bindings file, as tests read it (docs/design.md §9.4)."""

import os


def lease_token(path: "str | os.PathLike[str]") -> str:
    """The token the lease file of ``path`` carries, which a holder's lines record as ``lf=``."""
    with open(f"{os.fspath(path)}.lease", "rb") as f:
        head = f.read(17)
    assert len(head) == 17 and head.endswith(b"\n"), f"no token in {os.fspath(path)}.lease: {head!r}"
    return head[:16].decode("ascii")


def our_lease(path: "str | os.PathLike[str]", slot: int = 0) -> str:
    """The fields a line of this process records for its lease on byte ``slot`` of ``path``'s lease file."""
    return f"\tlease={slot}\tlf={lease_token(path)}"
