"""The one rule for every file a user names to flink-gpu (a configuration, a conf directory's
file, a pod template, a simulator spec): it must be a regular file of bounded size.

A FIFO, a socket or a device is refused before it is read, because reading one can block forever
(a FIFO without a writer) or never end (``/dev/zero``); the file is opened with ``O_NONBLOCK`` and
checked again on the open descriptor, so swapping the path between the check and the open cannot
make a read block either. Reads stop at :data:`MAX_FILE_SIZE`.

A file that another process names (a GPU holder's ``-Dlog.file=``, read by ``flink-gpu list``) has a
stricter rule, :func:`read_named_file_head`: only a regular file of data, never one of the kernel's
(``/proc``, ``/sys``, ``/dev``, or any file system of that kind wherever it is mounted), because a
root ``list`` would otherwise read what any local user names (docs/SECURITY.md).
"""

from __future__ import annotations

import errno
import os
import stat

from flink_gpu.errors import FileTooLargeError, NotARegularFileError

__all__ = [
    "MAX_FILE_SIZE",
    "FileTooLargeError",
    "NotARegularFileError",
    "check_regular_file",
    "read_named_file_head",
    "read_regular_file",
]

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


# -- files that another process names ----------------------------------------------------------

#: Trees of the kernel's files: reading one can take what another reader is owed (``/proc/kmsg``),
#: change a device's state or block (a FIFO, tracefs's ``trace_pipe``).
_KERNEL_TREES = ("/proc", "/sys", "/dev")

#: statfs(2) ``f_type`` of the file systems whose files are not data (linux/magic.h), refused
#: wherever they are mounted; FUSE too: a process answers its reads, maybe never.
_NOT_DATA_FILE_SYSTEMS = frozenset(
    {
        0x9FA0,  # proc
        0x62656572,  # sysfs
        0x64626720,  # debugfs
        0x74726163,  # tracefs
        0x73636673,  # securityfs
        0x27E0EB,  # cgroup
        0x63677270,  # cgroup2
        0xCAFE4A11,  # bpf
        0x6165676C,  # pstore
        0xDE5E81E4,  # efivarfs
        0x62656570,  # configfs
        0x65735543,  # fusectl
        0x65735546,  # fuse
        0xF97CFF8C,  # selinuxfs
        0x43415D53,  # smackfs
        0x42494E4D,  # binfmt_misc
        0x6E736673,  # nsfs
        0x1CD1,  # devpts
        0x19800202,  # mqueue
        0x67596969,  # rpc_pipefs
        0x6E667364,  # nfsd
        0x50495045,  # pipefs
        0x534F434B,  # sockfs
        0x09041934,  # anon_inode
    }
)


def _file_system_type(target: str | int) -> int | None:
    """statfs(2) (a path) or fstatfs(2) (a descriptor): the file system's ``f_type``; None when unknown."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(256)  # struct statfs: 120 bytes on 64-bit Linux, f_type first
    if isinstance(target, int):
        status = libc.fstatfs(target, buffer)
    else:
        status = libc.statfs(os.fsencode(target), buffer)
    if status != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF  # every magic is 32 bits


def _of_data(target: str | int) -> bool:
    kind = _file_system_type(target)
    return kind is not None and kind not in _NOT_DATA_FILE_SYSTEMS


def _in_kernel_tree(real: str) -> bool:
    return any(real == tree or real.startswith(tree + "/") for tree in _KERNEL_TREES)


def read_named_file_head(path: str, limit: int, owners: tuple[int, ...]) -> bytes | None:
    """The first ``limit`` bytes of ``path``, a file another process names; None unless, its
    symbolic links resolved, it is outside ``/proc``, ``/sys`` and ``/dev``, on a file system of data
    (not procfs, sysfs, debugfs, FUSE, … mounted elsewhere), a regular file, and owned by one of
    ``owners``. A relative ``path`` is None too: it is relative to the other process's directory.

    All of this is checked before the file is opened, so that a FIFO or a device is never opened
    (opening a FIFO wakes its writer; opening a device may act). The open (``O_NOFOLLOW``,
    ``O_NONBLOCK``) and the descriptor are checked again: a path swapped after the checks is never
    read.
    """
    if not os.path.isabs(path):
        return None
    try:
        real = os.path.realpath(path, strict=True)
        if _in_kernel_tree(real):
            return None
        before = os.stat(real, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode) or before.st_uid not in owners or not _of_data(real):
            return None
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    try:
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not _of_data(fd):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
