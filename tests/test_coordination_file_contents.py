"""The coordination file's contents whatever happens to it: a missing directory, a file deleted between
claims, binary and huge lines, a file over 16 MiB, a full filesystem, file size limits, a file planted by another
user. Live owners keep their GPUs and the file is never half-written.
"""

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import dead_pid
from flink_gpu import coordination
from support.faults import holders, line_of, run_child
from support.files import fill, small_tmpfs


@pytest.mark.usefixtures("no_leaks")
def test_missing_directory_is_clear_and_nothing_is_created(tmp_path):
    path = tmp_path / "missing" / "coordination"
    with pytest.raises(FileNotFoundError) as info:
        coordination.claim(1, ["0"], path=path)
    assert (
        str(info.value)
        == f"[Errno {errno.ENOENT}] Cannot open the coordination file {path}: {os.strerror(errno.ENOENT)}"
    )
    # readers and cleaners treat it as an empty file: nothing is held, nothing to clean
    snap = coordination.snapshot(path)
    assert not snap.exists and snap.entries == ()
    assert coordination.release(path=path) == []
    assert coordination.clean_stale(path).removed == ()
    assert not path.parent.exists()


@pytest.mark.usefixtures("no_leaks")
def test_file_deleted_between_claims_forgets_them_until_owners_claim_again(tmp_path, owners):
    """Documented recovery (docs/SECURITY.md): deleting the file drops every claim in it; an owner asking
    again gets its GPUs recorded again, and a worker that starts meanwhile may get them."""
    path = tmp_path / "coordination"
    a = owners()
    assert coordination.claim(2, ["0", "1", "2"], path=path, owner=a.pid).taken == ["0", "1"]
    path.unlink()
    assert not coordination.snapshot(path).exists  # tools see that nothing is recorded
    assert coordination.claim(2, ["0", "1", "2"], path=path, owner=a.pid).taken == ["0", "1"]
    b = owners()
    assert coordination.claim(1, ["0", "1", "2"], path=path, owner=b.pid).taken == ["2"]
    assert holders(path) == {"0": (a.pid,), "1": (a.pid,), "2": (b.pid,)}


@pytest.mark.usefixtures("no_leaks")
def test_binary_lines_are_kept_byte_for_byte_and_reported(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    garbage = [b"\x00\x01\x02", b"0\xff\xfe 1", b"\xed\xa0\x80 2", b"5 \x00", b"6 1\r", b"\x1b[31m7 1"]
    content = line_of("0", live.pid).encode() + b"\n".join(garbage) + b"\n"
    path.write_bytes(content)
    assert coordination.claim(2, [str(i) for i in range(8)], path=path).taken == ["1", "2"]
    assert path.read_bytes().startswith(content)  # appended after, nothing rewritten
    snap = coordination.snapshot(path)
    assert [os.fsencode(line.text) for line in snap.unparsable] == garbage  # reported reversibly
    assert snap.holders() == {"0": (live.pid,), "1": (os.getpid(),), "2": (os.getpid(),)}
    assert coordination.release(path=path) == ["1", "2"]
    assert path.read_bytes() == content


@pytest.mark.usefixtures("no_leaks")
def test_a_huge_line_is_kept_and_the_claim_stays_fast(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid).encode() + b"x" * (4 << 20) + b"\n" + f"1 {dead_pid()}\n".encode()
    path.write_bytes(content)
    started = time.monotonic()
    assert coordination.claim(2, ["0", "1", "2"], path=path).taken == ["1", "2"]  # 2 free, 1 reclaimed
    assert time.monotonic() - started < 5
    text = path.read_bytes()
    assert text.startswith(line_of("0", live.pid).encode() + b"x" * (4 << 20) + b"\n")
    assert coordination.release(path=path) == ["1", "2"]


@pytest.mark.usefixtures("no_leaks")
def test_a_file_over_16_mib_is_refused_untouched(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid).encode() + b"#" * (17 << 20)
    path.write_bytes(content)
    before = path.stat()
    for call in (
        lambda: coordination.claim(1, ["0", "1"], path=path),
        lambda: coordination.snapshot(path),
        lambda: coordination.clean_stale(path),
        lambda: coordination.release(live.pid, path=path),
    ):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.EFBIG
        assert "larger than 16 MiB" in str(info.value) and str(path) in str(info.value)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


@pytest.fixture
def tmpfs_64k(tmp_path):
    """A 64 KiB tmpfs (root only; the RLIMIT_FSIZE test below covers hosts where mounting is refused)."""
    with small_tmpfs(tmp_path / "small", "64k") as mount_point:
        yield mount_point


@pytest.mark.usefixtures("no_leaks")
def test_full_filesystem_write_fails_cleanly_and_recovers(tmpfs_64k, owners):
    path = tmpfs_64k / "coordination"
    live = owners()
    first = line_of("0", live.pid)
    content = first + "\n" * (4096 - len(first))  # exactly one page: a new line needs another
    path.write_text(content)
    filler = fill(tmpfs_64k)
    with pytest.raises(OSError) as info:
        coordination.claim(1, ["0", "1"], path=path)
    assert info.value.errno == errno.ENOSPC and str(info.value).startswith(
        f"[Errno {errno.ENOSPC}] Cannot write the coordination file {path}: {os.strerror(errno.ENOSPC)}; "
    )
    assert str(info.value).endswith("; nothing was written, the file is unchanged.")
    assert path.read_text() == content  # restored: no half-written line, the live owner keeps GPU 0
    assert holders(path) == {"0": (live.pid,)}
    # shrinking needs no space: a release and a clean still work on the full filesystem
    assert coordination.clean_stale(path).removed == ()
    assert coordination.release(live.pid, path=path, indices=["0"]) == ["0"]
    assert path.read_text() == "\n" * (4096 - len(first))
    filler.unlink()
    assert coordination.claim(1, ["0", "1"], path=path).taken == ["0"]
    assert coordination.release(path=path) == ["0"]


FSIZE_CHILD = """
import errno, os, resource, sys
from flink_gpu import coordination
path = sys.argv[1]
size = os.path.getsize(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # no byte beyond the current end
try:
    coordination.claim(1, ["0", "1"], path=path)
except OSError as error:
    print(str(error))
"""


@pytest.mark.usefixtures("no_leaks")
def test_file_size_limit_write_fails_cleanly(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid)
    path.write_text(content)
    # one sentence naming the file, not "...unchanged.: '<path>'" (OSError's own filename appended)
    assert run_child(FSIZE_CHILD, path) == (
        f"[Errno {errno.EFBIG}] Cannot write the coordination file {path}: {os.strerror(errno.EFBIG)}; nothing was "
        "written, the file is unchanged.\n"
    )
    assert path.read_text() == content  # nothing half-written
    assert holders(path) == {"0": (live.pid,)}


BEYOND_LIMIT_CHILD = """
import errno, resource, signal, sys
from flink_gpu import coordination
path, action, owner = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_DFL if action == "default" else signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))  # below the file's size
try:
    coordination.claim(1, ["0", "1"], path=path, owner=owner)
except OSError as error:
    print(error.errno == errno.EFBIG, str(error).split("; ", 1)[1])
"""


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    ("reclaim", "action", "says"),
    [
        (True, "default", "its old content was restored."),
        (True, "ignore", "its old content was restored."),
        (False, "ignore", "nothing was written, the file is unchanged."),
    ],
)
def test_a_write_refused_by_a_file_size_limit_below_the_file_says_what_the_file_holds(
    tmp_path, owners, reclaim, action, says
):
    """The file is already beyond RLIMIT_FSIZE. A reclaim rewrites from byte 0 and is cut at the limit:
    the bytes it overwrote are put back, and the message says the file was restored. An append starts
    beyond the limit and writes nothing: the message says the file is unchanged. Either way it is
    byte-identical, and SIGXFSZ at its default action (an embedding host may leave it so) kills nothing."""
    path = tmp_path / "coordination"
    live, claimer = owners(), owners()
    content = (f"0 {dead_pid()}\n" if reclaim else "") + line_of("1" if reclaim else "0", live.pid)
    content += "\n" * (2000 - len(content))
    path.write_text(content)
    assert run_child(BEYOND_LIMIT_CHILD, path, action, claimer.pid).split(" ", 1) == ["True", says + "\n"]
    assert path.read_text() == content
    assert holders(path) == {"1" if reclaim else "0": (live.pid,)}


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_a_file_planted_by_another_user_is_used_as_it_is(owners):
    """Squatting: in a world-writable directory another user may create the file first, world-writable,
    and then rewrite it at will. Not defended (docs/SECURITY.md): use a directory only the workers can
    write, or pre-create the file."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="flink-gpu-shared-", dir="/tmp"))  # like /var/tmp: sticky, 1777
    try:
        shared.chmod(0o1777)
        path = shared / "coordination"
        as_nobody = "import os, sys; os.setgid(65534); os.setuid(65534); os.umask(0); open(sys.argv[1], 'w').close()"
        subprocess.run([sys.executable, "-c", as_nobody, str(path)], check=True, timeout=30)
        assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (65534, 0o666)
        victim = owners()
        assert coordination.claim(1, ["0", "1"], path=path, owner=victim.pid).taken == ["0"]  # no ownership check
        subprocess.run([sys.executable, "-c", as_nobody, str(path)], check=True, timeout=30)  # truncates it
        assert coordination.claim(1, ["0", "1"], path=path).taken == ["0"]  # the live victim's GPU, given again
        coordination.release(path=path)
    finally:
        shutil.rmtree(shared)
