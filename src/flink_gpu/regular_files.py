"""The one rule for every file a user names to flink-gpu (a configuration, a conf directory's
file, a pod template, a simulator spec): it must be a regular file of bounded size.

A FIFO, a socket or a device is refused before it is read, because reading one can block forever
(a FIFO without a writer) or never end (``/dev/zero``); the file is opened with ``O_NONBLOCK`` and
checked again on the open descriptor, so swapping the path between the check and the open cannot
make a read block either. Reads stop at :data:`MAX_FILE_SIZE`.
"""

from __future__ import annotations

import errno
import os
import stat

from flink_gpu.errors import FileTooLargeError, NotARegularFileError

__all__ = ["MAX_FILE_SIZE", "FileTooLargeError", "NotARegularFileError", "check_regular_file", "read_regular_file"]

MAX_FILE_SIZE = 16 * 1024 * 1024
"""The most bytes read from one file (16 MiB): far above any configuration, spec or template."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _require_regular(status: os.stat_result, path: str, what: str) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise NotARegularFileError(
            f"The {what} {path} is {_kind(status.st_mode)}, not a regular file; give the path of a file."
        )


def _size_text(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"


def _too_large(path: str, what: str, limit: int) -> FileTooLargeError:
    return FileTooLargeError(
        f"The {what} {path} is larger than {_size_text(limit)}, the most flink-gpu reads from one file."
    )


def check_regular_file(path: str | os.PathLike[str], what: str) -> None:
    """Raise unless ``path`` names an existing regular file (symbolic links followed).

    ``what`` names the file in the messages ("Flink configuration file", "pod template file"):
    ``FileNotFoundError`` "The <what> <path> does not exist.", ``NotARegularFileError`` saying
    what it is instead ("is a FIFO (named pipe)", "is a directory").
    """
    path = os.fspath(path)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"The {what} {path} does not exist.") from None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise OSError(
            errno.ELOOP, f"The {what} {path} is a loop of symbolic links; give the path of a file.", path
        ) from None
    _require_regular(status, path, what)


def read_regular_file(path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_SIZE) -> bytes:
    """The content of the regular file ``path``; never blocks and never reads more than ``limit``.

    Raises as :func:`check_regular_file`, ``FileTooLargeError`` naming the file and the limit, or
    the ``OSError`` of the open/read (e.g. ``PermissionError``).
    """
    path = os.fspath(path)
    check_regular_file(path, what)  # refuse a device or FIFO without even opening it
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise FileNotFoundError(f"The {what} {path} does not exist.") from None
    try:
        status = os.fstat(fd)
        _require_regular(status, path, what)  # the path may have changed since the check
        if status.st_size > limit:
            raise _too_large(path, what, limit)
        chunks: list[bytes] = []
        total = 0
        while True:  # the file may grow while it is read: stop one byte past the limit
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_large(path, what, limit)
    finally:
        os.close(fd)
