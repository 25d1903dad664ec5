"""The coordination file's lock: a claim waiting for it while the file is deleted or swapped for a symlink,
lock holders that hang, exit or die mid-claim, a reader who holds it, a lease file locked for ever. Every wait
is bounded and names who holds the lock; a dead holder never blocks the others.
"""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flink_gpu import coordination
from support.faults import LockHolder, child_env, claim_in_thread, holders, line_of, wait_for_open, wait_gone
from support.waiting import wait_until


@pytest.mark.usefixtures("no_leaks")
def test_file_deleted_while_a_claim_waits_uses_the_new_file(tmp_path):
    path = tmp_path / "coordination"
    path.write_text("")
    old_inode = path.stat().st_ino
    holder = LockHolder(path)
    with open(path, "rb") as deleted:  # keeps the old inode readable (and its number taken)
        try:
            thread, result = claim_in_thread(path, 1, ["0", "1"], timeout=20)
            wait_for_open(old_inode)
            path.unlink()  # an operator deletes the file while a worker waits for its lock
        finally:
            holder.go()
        thread.join(30)
        assert result == {"got": ["0"]}
        # recorded in the file at the path, not in the deleted inode nobody will read again
        assert path.stat().st_ino != old_inode
        assert deleted.read() == b""
    assert path.read_text() == line_of("0", os.getpid(), path)
    assert coordination.release(path=path) == ["0"]


@pytest.mark.usefixtures("no_leaks")
def test_file_replaced_by_a_symlink_while_a_claim_waits(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    path.write_text(line_of("0", live.pid))
    precious = tmp_path / "precious"
    precious.write_text("someone else's file\n")
    holder = LockHolder(path)
    try:
        thread, result = claim_in_thread(path, 1, ["0", "1"], timeout=20)
        wait_for_open(path.stat().st_ino)
        link = tmp_path / "link"
        link.symlink_to(precious)
        os.replace(link, path)  # an attacker swaps the path for a symlink while the lock is held
    finally:
        holder.go()
    thread.join(30)
    error = result["error"]
    assert isinstance(error, OSError) and error.errno == errno.ELOOP
    assert "symbolic link" in str(error) and str(path) in str(error)
    assert precious.read_text() == "someone else's file\n"  # never followed, never written


@pytest.mark.usefixtures("no_leaks")
def test_a_stopped_lock_holder_bounds_the_wait_and_sigkill_frees_the_lock(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    path.write_text(line_of("0", live.pid))
    holder = LockHolder(path)  # a worker that took the lock, then hung (stopped) mid-claim
    with open(path, "a") as f:
        f.write(line_of("1", holder.proc.pid))
    content = path.read_text()
    os.kill(holder.proc.pid, signal.SIGSTOP)
    try:
        for call in (
            lambda: coordination.claim(1, ["0", "1", "2"], path=path, timeout=0.3),
            lambda: coordination.snapshot(path, timeout=0.3),
            lambda: coordination.release(live.pid, path=path, timeout=0.3),
        ):
            started = time.monotonic()
            with pytest.raises(TimeoutError) as info:
                call()
            assert time.monotonic() - started < 3
            assert f"held by pid {holder.proc.pid}" in str(info.value) and str(path) in str(info.value)
        assert path.read_text() == content  # nobody wrote while it was locked
    finally:
        holder.kill()  # SIGKILL reaches a stopped process; the kernel drops its lock
    assert coordination.claim(2, ["0", "1", "2"], path=path, timeout=0).taken == ["1", "2"]  # 2 free, 1 reclaimed
    assert holders(path) == {"0": (live.pid,), "1": (os.getpid(),), "2": (os.getpid(),)}
    assert coordination.release(path=path) == ["1", "2"]


@pytest.mark.usefixtures("no_leaks")
def test_timeout_names_a_live_holder_when_the_locker_has_exited(tmp_path):
    # /proc/locks names the process that took the lock, here gone; the holder is the one that inherited it
    path = tmp_path / "coordination"
    path.write_text("")
    # flock(1) takes the lock and exits; the background sleep inherited the locked descriptor
    locker = subprocess.run(
        ["flock", str(path), "sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $$ $!"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    shell, sleeper = map(int, locker.stdout.split())
    try:
        with pytest.raises(TimeoutError) as info:
            coordination.claim(1, ["0"], path=path, timeout=0.2)
        assert f"pid {sleeper}" in str(info.value)
    finally:
        os.kill(sleeper, signal.SIGKILL)
        assert wait_gone(sleeper)
    assert coordination.claim(1, ["0"], path=path, timeout=5).taken == ["0"]
    assert coordination.release(path=path) == ["0"]


@pytest.mark.usefixtures("no_leaks")
def test_a_worker_killed_while_claiming_never_blocks_the_others(tmp_path, discovery_exe):
    """SIGKILL at random moments of a real claim (in the lock or not): the lock is free again at once,
    the file stays parseable, and the victim's lines (if written) are reclaimed."""
    path = tmp_path / "coordination"
    env = child_env(devices=4)
    for attempt in range(20):
        # the owner is the shell (the discovery executable's parent), killed with its whole group
        proc = subprocess.Popen(
            [
                "sh",
                "-c",
                f'"{discovery_exe}" 4 --enable-coordination-mode '
                f'--coordination-file "{path}" >/dev/null; exec sleep 600',
            ],
            env=env,
            start_new_session=True,
        )
        time.sleep(attempt * 0.0015)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # the discovery process may still be dying (it was reparented, nobody waits for it): the lock
        # is free once it is gone, a moment later, never a stuck lock
        started = time.monotonic()
        assert coordination.claim(4, ["0", "1", "2", "3"], path=path, timeout=5).taken == ["0", "1", "2", "3"]
        assert time.monotonic() - started < 2
        snap = coordination.snapshot(path)
        assert snap.unparsable == ()
        assert snap.holders() == {i: (os.getpid(),) for i in "0123"}
        assert coordination.release(path=path) == ["0", "1", "2", "3"]


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_any_user_who_can_read_the_file_can_lock_it():
    """flock(2) needs no write permission: a reader of the 0644 file can hold the lock and make every
    claim time out (naming it). Not defended (docs/SECURITY.md); the wait is bounded."""
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="flink-gpu-readable-", dir="/tmp"))
    try:
        directory.chmod(0o755)
        path = directory / "coordination"
        assert coordination.claim(1, ["0", "1"], path=path).taken == ["0"]
        assert path.stat().st_mode & 0o777 == 0o644
        hold = (
            "import fcntl, os, sys; os.setgid(65534); os.setuid(65534); fd = os.open(sys.argv[1], os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.readline()"
        )
        reader = subprocess.Popen(
            [sys.executable, "-c", hold, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert reader.stdout.readline() == "locked\n"
            with pytest.raises(TimeoutError, match=f"held by pid {reader.pid}"):
                coordination.claim(2, ["0", "1"], path=path, timeout=0.2)
        finally:
            reader.stdin.close()
            reader.stdout.close()
            reader.wait(10)
        assert coordination.release(path=path) == ["0"]
    finally:
        shutil.rmtree(directory)


@pytest.mark.usefixtures("no_leaks")
def test_a_lease_file_locked_for_ever_by_another_process_never_stalls_a_claim(tmp_path):
    """Only claimers flock the lease file, to write its token; anyone who can read it can hold that lock for
    ever. The claim then goes on without a token (its lines are judged by pid) instead of hanging under the
    coordination file's lock, where every other claimer would wait behind it."""
    path = tmp_path / "coordination"
    Path(f"{path}.lease").write_bytes(b"")  # created empty, as an older version leaves it
    holder = subprocess.Popen(["flock", "-x", f"{path}.lease", "sleep", "60"])
    try:
        wait_until(
            lambda: subprocess.run(["flock", "-n", f"{path}.lease", "true"]).returncode != 0, "flock(1) holds the lock"
        )
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from flink_gpu import coordination; print(coordination.claim(1, ['0'], path={str(path)!r}).taken)",
            ],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert done.returncode == 0 and done.stdout.strip() == "['0']", done.stderr
        (entry,) = coordination.snapshot(path).entries
        assert entry.lease is not None and entry.lease_file is None  # a lease, no token for it
    finally:
        holder.kill()
        holder.wait()
