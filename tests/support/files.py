"""Paths that are not regular files, for the tests of every reader that must refuse them."""

import os
import socket
from pathlib import Path

#: What a refusal calls each kind (flink_gpu.regular_files' wording).
KINDS = {
    "fifo": "a FIFO (named pipe)",
    "directory": "a directory",
    "socket": "a socket",
    "device": "a character device",
}


def make_odd_path(path: Path, kind: str) -> "tuple[Path, str]":
    """Makes ``path`` a FIFO (no writer: a read blocks), a directory, a socket, or a symlink to
    /dev/zero (endless), and returns it with what a refusal calls it."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    return path, KINDS[kind]
