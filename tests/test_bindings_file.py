"""flink_gpu.bindings_file: where the bindings file lives, what a snapshot of it says, and removing a holder's
lines, on real files written by real binding processes."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from flink_gpu import GPUInfo
from flink_gpu.binding import bind
from flink_gpu.bindings_file import bindings_path, file_identity, snapshot, unbind
from flink_gpu.coordination import DEFAULT_PATH


def test_the_bindings_file_sits_beside_the_coordination_file(tmp_path):
    assert bindings_path() == DEFAULT_PATH + ".bindings"
    assert bindings_path(tmp_path / "c") == str(tmp_path / "c") + ".bindings"


def test_the_snapshot_groups_live_bindings_by_taskmanager(tmp_path, binders):
    path = str(tmp_path / "c.bindings")
    worker, got, _ = binders(path, None, ["0", "1"])
    assert got == ["0"]
    with bind([GPUInfo("0"), GPUInfo("1")], slot="abc", taskmanager_pid=worker.pid, path=path):
        snap = snapshot(path)
        assert snap.exists
        assert snap.by_taskmanager() == {
            (None, None): {f"pid {worker.pid}": ("0",)},
            (worker.pid, None): {"slot abc": ("1",)},
        }
        slot_line = next(e for e in snap.entries if e.slot)
        assert slot_line.pid == threading.get_native_id() and slot_line.holders_per_gpu == 1
    assert not snapshot(path + ".missing").exists


def test_a_dead_holders_binding_is_in_the_snapshot_but_not_in_its_live_groups(tmp_path, binders):
    path = str(tmp_path / "c.bindings")
    worker, got, _ = binders(path, None, ["0"])
    worker.kill()
    worker.wait(10)
    snap = snapshot(path)
    assert [(e.pid, e.index, e.alive) for e in snap.entries] == [(worker.pid, "0", False)]
    assert snap.by_taskmanager() == {}


def test_unbind_removes_only_that_holders_lines_and_names_what_they_bound(tmp_path, binders):
    path = str(tmp_path / "c.bindings")
    first, _, _ = binders(path, None, ["0", "1", "2"], count=2)
    second, got, _ = binders(path, None, ["0", "1", "2"])
    assert got == ["2"]
    assert sorted(unbind(path, 5.0, first.pid, None, None)) == ["0", "1"]
    assert snapshot(path).by_taskmanager() == {(None, None): {f"pid {second.pid}": ("2",)}}
    assert unbind(path, 5.0, first.pid, None, None) == []


def test_file_identity_names_the_file_by_device_and_inode_and_none_when_there_is_none(tmp_path):
    path = tmp_path / "c.bindings"
    assert file_identity(str(path)) is None
    path.write_text("")
    st = os.stat(path)
    assert file_identity(str(path)) == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"
    os.replace(path, tmp_path / "moved")
    path.write_text("")
    assert file_identity(str(path)) != f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_a_bindings_file_another_user_put_there_first_is_refused_naming_it():
    """In a directory every user may write (as /var/tmp), another user creates the bindings file first,
    world-writable, to empty root's bindings at will: a bind refuses it, names it and the fix, writes nothing,
    and creates no lease file beside it (which would copy its mode)."""
    shared = Path(tempfile.mkdtemp(prefix="flink-gpu-shared-", dir="/tmp"))  # pytest's tmp_path is private
    try:
        shared.chmod(0o1777)
        path = str(shared / "c.bindings")
        squat = (
            "import os, sys; os.setgroups([]); os.setgid(65534); os.setuid(65534); os.umask(0); open(sys.argv[1], 'w')"
        )
        subprocess.run([sys.executable, "-c", squat, path], check=True, timeout=30)
        with pytest.raises(PermissionError) as refused:
            bind([GPUInfo("0")], path=path)
        assert refused.value.strerror.startswith(
            f"Refusing to use the bindings file {path}: it is owned by uid 65534, not by root, and writable by every "
            "user (mode 0666)"
        ), refused.value
        assert "Remove it" in refused.value.strerror and "docs/SECURITY.md" in refused.value.strerror
        assert os.path.getsize(path) == 0 and not os.path.exists(path + ".lease")
    finally:
        shutil.rmtree(shared)
