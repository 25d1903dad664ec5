"""Fault injection: NVML errors, a coordination file that goes wrong, hung or killed lock holders,
discovery scripts that misbehave, broken configuration files. Real processes, files and mounts.

For every fault the test checks the clear error or the documented recovery, that live owners keep
their GPUs, and (autouse fixture) that nothing leaks: no new file descriptor, no child process left
(zombie or not), no grandchild still running.
"""

import errno
import fcntl
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import flink_gpu
from flink_gpu import (Configuration, FlinkException, GPUDriverFactory, IllegalConfigurationException,
                       coordination, simulator)
from flink_gpu.framework import load_external_resources

SRC = str(Path(flink_gpu.__file__).resolve().parent.parent)
JAVA_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"


# ---- leak checks ----------------------------------------------------------------------------------

def open_fds():
    """This process's descriptors, with what they point at."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            pass  # the descriptor listdir itself used
    return out


def proc_stat(pid):
    """(state, ppid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1])


def children():
    """Pids whose parent is this process, zombies included."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None and stat[1] == os.getpid():
                found.add(int(entry))
    return found


def running(pid):
    """True while ``pid`` runs; a zombie does not count."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def wait_gone(pid, seconds=5.0):
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not running(pid)


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test here leaves the descriptors and children as it found them."""
    fds_before = open_fds()
    children_before = children()
    yield
    deadline = time.monotonic() + 5  # threads of a test may still be closing what they opened
    while True:
        leaked_fds = {fd: target for fd, target in open_fds().items() if fds_before.get(fd) != target}
        leaked_children = children() - children_before
        if not (leaked_fds or leaked_children) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not leaked_fds, f"descriptors leaked: {leaked_fds}"
    assert not leaked_children, f"children left behind: {leaked_children}"


@pytest.fixture
def owners():
    """Live processes that own GPUs; killed and reaped at the end."""
    procs = []

    def spawn():
        proc = subprocess.Popen(["sleep", "600"])
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def start_time(pid):
    data = Path(f"/proc/{pid}/stat").read_text()
    return int(data[data.rindex(")") + 2:].split()[19])


def line_of(index, pid):
    """The line our core writes for ``pid`` (start time after a tab)."""
    return f"{index} {pid}\t{start_time(pid)}\n"


def holders(path):
    """index -> live pids, from the file, read by the code under test."""
    return coordination.snapshot(path).holders()


def child_env(**sim):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env["PYTHONPATH"] = SRC
    if sim:
        env.update(simulator.environment(**sim))
    return env


def run_child(code, *args, env=None, timeout=60):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


# ---- NVML faults from the simulator -------------------------------------------------------------------

@pytest.fixture(scope="module")
def discovery_exe():
    from conftest import find_discovery_executable

    return find_discovery_executable()


@pytest.mark.parametrize("code, words", [
    (9, "kernel driver is not loaded"),        # NVML_ERROR_DRIVER_NOT_LOADED
    (18, "different versions"),                # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    (4, "NVML_ERROR_NO_PERMISSION"),
    (999, "NVML_ERROR_UNKNOWN"),
])
def test_drop_in_executable_reports_nvml_init_errors_and_claims_nothing(discovery_exe, tmp_path, code, words):
    path = tmp_path / "coordination"
    proc = subprocess.run([discovery_exe, "2", "--enable-coordination-mode", "--coordination-file", str(path)],
                          env=child_env(init_error=code), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stdout == ""  # Flink parses stdout: nothing there may look like GPU indices
    assert words in proc.stderr and simulator.library_path() in proc.stderr
    assert not path.exists()  # nothing was claimed for a host whose GPUs cannot be seen


def test_drop_in_executable_with_a_missing_library(discovery_exe, tmp_path):
    env = child_env()
    env["FLINK_GPU_NVML_LIBRARY"] = str(tmp_path / "no" / "libnvidia-ml.so.1")
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert str(tmp_path / "no" / "libnvidia-ml.so.1") in proc.stderr and "FLINK_GPU_NVML_LIBRARY" in proc.stderr


FAULTY = {"devices": [{}, {"fault": "NO_PERMISSION"}, {"fault": "GPU_IS_LOST"}, {}]}


def test_faulty_devices_are_never_claimed(discovery_exe, tmp_path, owners):
    path = tmp_path / "coordination"
    holder = owners()
    path.write_text(line_of("0", holder.pid))  # a live worker holds GPU 0
    env = child_env(spec=FAULTY)
    argv = [discovery_exe, "1", "--enable-coordination-mode", "--coordination-file", str(path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout) == (0, "3\n")  # not 1 or 2: they answer errors
    argv[1] = "2"
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == "Could not get enough GPU resources.\n"
    assert str(holder.pid) in proc.stderr
    # the owner of the discovery executable is its parent: this process
    assert holders(path) == {"0": (holder.pid,), "3": (os.getpid(),)}
    assert coordination.release(path=path) == ["3"]


NVML_PROVIDER = """
import json, os
from flink_gpu.framework import load_external_resources
script = os.environ["TEST_SCRIPT"]
config = {
    "external-resources": "gpu;fpga",
    "external-resource.gpu.amount": 1,
    "external-resource.gpu.driver-factory.class": "%s",
    "external-resource.gpu.param.discovery-mode": "nvml",
    "external-resource.fpga.amount": 1,
    "external-resource.fpga.driver-factory.class": "%s",
    "external-resource.fpga.param.discovery-script.path": script,
}
before = sorted(os.listdir("/proc/self/fd"))
for _ in range(20):
    with load_external_resources(config) as provider:
        result = {
            "gpu": sorted(map(str, provider.get_external_resource_infos("gpu"))),
            "gpu_reason": provider.missing_reason("gpu"),
            "fpga": sorted(map(str, provider.get_external_resource_infos("fpga"))),
        }
result["fd_leak"] = sorted(set(os.listdir("/proc/self/fd")) - set(before))
print(json.dumps(result))
""" % (JAVA_FACTORY, JAVA_FACTORY)


def test_nvml_init_failure_never_stops_a_worker_and_leaks_nothing(tmp_path):
    script = tmp_path / "fpga.sh"
    script.write_text("#!/bin/sh\necho 7\n")
    script.chmod(0o755)
    env = child_env(init_error=9)
    env["TEST_SCRIPT"] = str(script)
    result = json.loads(run_child(NVML_PROVIDER, env=env))
    assert result["gpu"] == []  # Flink's contract: an empty set, the worker starts
    assert "kernel driver is not loaded" in result["gpu_reason"]
    assert simulator.library_path() in result["gpu_reason"]
    assert result["fpga"] == ["GPU Device(7)"]  # the other resource is unaffected
    assert result["fd_leak"] == []  # 20 failed NVML initialisations, no descriptor left open


# ---- the coordination file ----------------------------------------------------------------------------

def test_missing_directory_is_clear_and_nothing_is_created(tmp_path):
    path = tmp_path / "missing" / "coordination"
    with pytest.raises(FileNotFoundError) as info:
        coordination.claim(1, ["0"], path=path)
    assert str(path) in str(info.value) and info.value.filename == str(path)
    # readers and cleaners treat it as an empty file: nothing is held, nothing to clean
    snap = coordination.snapshot(path)
    assert not snap.exists and snap.entries == ()
    assert coordination.release(path=path) == []
    assert coordination.clean_stale(path).removed == ()
    assert not path.parent.exists()


def wait_for_open(inode, seconds=10):
    """Until this process has a descriptor on ``inode`` (a claim waiting for that file's lock)."""
    deadline = time.monotonic() + seconds
    while True:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if int(fd) > 2 and os.stat(f"/proc/self/fd/{fd}").st_ino == inode:
                    return
            except OSError:
                pass
        assert time.monotonic() < deadline, "the claim never opened the coordination file"
        time.sleep(0.002)


LOCK_HOLDER = textwrap.dedent("""\
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    """)


class LockHolder:
    """A process holding flock(LOCK_EX) on a file until told to go (or killed)."""

    def __init__(self, path):
        self.proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "locked\n"

    def go(self):
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.wait(10)

    def kill(self):
        self.proc.kill()
        self.go()


def claim_in_thread(path, amount, indices, **kwargs):
    result = {}

    def body():
        try:
            result["got"] = coordination.claim(amount, indices, path=path, **kwargs)
        except Exception as error:  # handed to the test thread
            result["error"] = error

    thread = threading.Thread(target=body)
    thread.start()
    return thread, result


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
    assert path.read_text() == line_of("0", os.getpid())
    assert coordination.release(path=path) == ["0"]


def test_file_deleted_between_claims_forgets_them_until_owners_claim_again(tmp_path, owners):
    """Documented recovery (docs/SECURITY.md): deleting the file drops every claim in it; an owner asking
    again gets its GPUs recorded again, and a worker that starts meanwhile may get them."""
    path = tmp_path / "coordination"
    a = owners()
    assert coordination.claim(2, ["0", "1", "2"], path=path, owner=a.pid) == ["0", "1"]
    path.unlink()
    assert not coordination.snapshot(path).exists  # tools see that nothing is recorded
    assert coordination.claim(2, ["0", "1", "2"], path=path, owner=a.pid) == ["0", "1"]
    b = owners()
    assert coordination.claim(1, ["0", "1", "2"], path=path, owner=b.pid) == ["2"]
    assert holders(path) == {"0": (a.pid,), "1": (a.pid,), "2": (b.pid,)}


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


def test_binary_lines_are_kept_byte_for_byte_and_reported(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    garbage = [b"\x00\x01\x02", b"0\xff\xfe 1", b"\xed\xa0\x80 2", b"5 \x00", b"6 1\r", b"\x1b[31m7 1"]
    content = line_of("0", live.pid).encode() + b"\n".join(garbage) + b"\n"
    path.write_bytes(content)
    assert coordination.claim(2, [str(i) for i in range(8)], path=path) == ["1", "2"]
    assert path.read_bytes().startswith(content)  # appended after, nothing rewritten
    snap = coordination.snapshot(path)
    assert [os.fsencode(line.text) for line in snap.unparsable] == garbage  # reported reversibly
    assert snap.holders() == {"0": (live.pid,), "1": (os.getpid(),), "2": (os.getpid(),)}
    assert coordination.release(path=path) == ["1", "2"]
    assert path.read_bytes() == content


def test_a_huge_line_is_kept_and_the_claim_stays_fast(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid).encode() + b"x" * (4 << 20) + b"\n" + f"1 {dead_pid()}\n".encode()
    path.write_bytes(content)
    started = time.monotonic()
    assert coordination.claim(2, ["0", "1", "2"], path=path) == ["1", "2"]  # 2 free, 1 reclaimed
    assert time.monotonic() - started < 5
    text = path.read_bytes()
    assert text.startswith(line_of("0", live.pid).encode() + b"x" * (4 << 20) + b"\n")
    assert coordination.release(path=path) == ["1", "2"]


def test_a_file_over_16_mib_is_refused_untouched(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid).encode() + b"#" * (17 << 20)
    path.write_bytes(content)
    before = path.stat()
    for call in (lambda: coordination.claim(1, ["0", "1"], path=path), lambda: coordination.snapshot(path),
                 lambda: coordination.clean_stale(path), lambda: coordination.release(live.pid, path=path)):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.EFBIG
        assert "larger than 16 MiB" in str(info.value) and str(path) in str(info.value)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; the RLIMIT_FSIZE test below covers hosts where mounting is refused)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(directory):
    """Fills the filesystem of ``directory`` with one file; returns it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 1024)
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_full_filesystem_write_fails_cleanly_and_recovers(small_tmpfs, owners):
    path = small_tmpfs / "coordination"
    live = owners()
    first = line_of("0", live.pid)
    content = first + "\n" * (4096 - len(first))  # exactly one page: a new line needs another
    path.write_text(content)
    filler = fill(small_tmpfs)
    with pytest.raises(OSError) as info:
        coordination.claim(1, ["0", "1"], path=path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert str(path) in str(info.value) and os.strerror(errno.ENOSPC) in str(info.value)
    assert path.read_text() == content  # restored: no half-written line, the live owner keeps GPU 0
    assert holders(path) == {"0": (live.pid,)}
    # shrinking needs no space: a release and a clean still work on the full filesystem
    assert coordination.clean_stale(path).removed == ()
    assert coordination.release(live.pid, path=path, indices=["0"]) == ["0"]
    assert path.read_text() == "\n" * (4096 - len(first))
    filler.unlink()
    assert coordination.claim(1, ["0", "1"], path=path) == ["0"]
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
    print(error.errno == errno.EFBIG, error.filename == path, os.strerror(errno.EFBIG) in str(error))
"""


def test_file_size_limit_write_fails_cleanly(tmp_path, owners):
    path = tmp_path / "coordination"
    live = owners()
    content = line_of("0", live.pid)
    path.write_text(content)
    assert run_child(FSIZE_CHILD, path).split() == ["True", "True", "True"]
    assert path.read_text() == content  # nothing half-written
    assert holders(path) == {"0": (live.pid,)}
