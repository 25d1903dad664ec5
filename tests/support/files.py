"""Paths that are not regular files, for the tests of every reader that must refuse them; a small, full
filesystem, for the tests of writers that must survive one."""

import errno
import os
import shutil
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: What a refusal calls each kind (flink_gpu.base.regular_files' wording).
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


@contextmanager
def small_tmpfs(mount_point: Path, size: str = "8k") -> "Iterator[Path]":
    """Mounts a tmpfs of ``size`` on ``mount_point`` (a new directory) for the block; root only: skips the
    test where mounting is refused."""
    import pytest

    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(directory: Path) -> Path:
    """Fills the filesystem of ``directory`` with one file, until ENOSPC; returns it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 1024)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
    finally:
        os.close(fd)
    return filler
