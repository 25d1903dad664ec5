"""Fault injection: NVML errors, a coordination file that goes wrong, hung or killed lock holders,
discovery scripts that misbehave, broken configuration files. Real processes, files and mounts.

For every fault the test checks the clear error or the documented recovery, that live owners keep
their GPUs, and (autouse fixture) that nothing leaks: no new file descriptor, no child process left
(zombie or not), no grandchild still running.
"""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flink_gpu
from conftest import dead_pid, proc_start_time
from flink_gpu import (
    Configuration,
    FlinkException,
    GPUDriverFactory,
    IllegalConfigurationException,
    coordination,
    simulator,
)
from flink_gpu.flink.framework import load_external_resources
from support.files import fill, make_odd_path, small_tmpfs
from support.interop import fake_nvidia_smi, stock_env
from support.leases import our_lease

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


def idle_lease(fds: dict) -> dict:
    """The one lease descriptor a process keeps after releasing everything (csrc/coordination/lease.hpp),
    if the new descriptors ``fds`` hold one: a cache of one, not a leak."""
    leases = {fd: target for fd, target in fds.items() if target.removesuffix(" (deleted)").endswith(".lease")}
    return leases if len(leases) == 1 else {}


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test here leaves the descriptors and children as it found them (but for the one idle lease)."""
    fds_before = open_fds()
    children_before = children()
    yield
    deadline = time.monotonic() + 5  # threads of a test may still be closing what they opened
    while True:
        leaked_fds = {fd: target for fd, target in open_fds().items() if fds_before.get(fd) != target}
        for fd in idle_lease(leaked_fds):
            del leaked_fds[fd]
        leaked_children = children() - children_before
        if not (leaked_fds or leaked_children) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not leaked_fds, f"descriptors leaked: {leaked_fds}"
    assert not leaked_children, f"children left behind: {leaked_children}"


def line_of(index, pid, path=None):
    """The line our core writes for ``pid`` (start time, pid namespace and, for this process, its lease on
    the lease file of ``path``)."""
    lease = our_lease(path) if pid == os.getpid() else ""
    return f"{index} {pid}\t{proc_start_time(pid)}\tns={os.stat('/proc/self/ns/pid').st_ino}{lease}\n"


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
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


# ---- NVML faults from the simulator -------------------------------------------------------------------


@pytest.fixture(scope="module")
def discovery_exe():
    from conftest import find_discovery_executable

    return find_discovery_executable()


@pytest.mark.parametrize(
    "code, words",
    [
        (9, "kernel driver is not loaded"),  # NVML_ERROR_DRIVER_NOT_LOADED
        (18, "different versions"),  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        (4, "NVML_ERROR_NO_PERMISSION"),
        (999, "NVML_ERROR_UNKNOWN"),
    ],
)
def test_drop_in_executable_reports_nvml_init_errors_and_claims_nothing(discovery_exe, tmp_path, code, words):
    path = tmp_path / "coordination"
    proc = subprocess.run(
        [discovery_exe, "2", "--enable-coordination-mode", "--coordination-file", str(path)],
        env=child_env(init_error=code),
        capture_output=True,
        text=True,
        timeout=30,
    )
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


def test_drop_in_executable_and_cli_refuse_a_library_path_naming_a_fifo(discovery_exe, tmp_path):
    fifo, _ = make_odd_path(tmp_path / "libnvidia-ml.so.1", "fifo")  # dlopen of it would block
    env = child_env()
    env["FLINK_GPU_NVML_LIBRARY"] = str(fifo)
    expected = f"Could not load the NVIDIA Management Library '{fifo}': it is a FIFO (named pipe), not a regular file."
    for argv in ([discovery_exe, "1"], [sys.executable, "-m", "flink_gpu.cli", "list"]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        assert expected in proc.stderr and "Traceback" not in proc.stderr


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
from flink_gpu.flink.framework import load_external_resources
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
""" % (JAVA_FACTORY, JAVA_FACTORY)  # noqa: UP031 (the template's own braces are Python dicts)


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
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
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
            result["got"] = coordination.claim(amount, indices, path=path, **kwargs).taken
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
    assert path.read_text() == line_of("0", os.getpid(), path)
    assert coordination.release(path=path) == ["0"]


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
    assert coordination.claim(2, [str(i) for i in range(8)], path=path).taken == ["1", "2"]
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
    assert coordination.claim(2, ["0", "1", "2"], path=path).taken == ["1", "2"]  # 2 free, 1 reclaimed
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


# An unprivileged process that may start no thread (RLIMIT_NPROC 1: itself) opens NVML, whose reads run on a
# thread of their own (csrc/nvml/deadline.cpp).
NO_THREAD_CHILD = """
import os, resource
from flink_gpu.nvml import open_library
os.setgid(65534)
os.setuid(65534)
resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
try:
    open_library()
except OSError as error:
    print(str(error))
"""


def test_a_thread_that_cannot_start_is_an_os_error_of_one_sentence_naming_the_library():
    """The core's sentence does not name the library, so OSError's filename does, after it: "...: '<path>'",
    never "....: '<path>'"."""
    said = run_child(NO_THREAD_CHILD, env=child_env(devices=1))
    assert said == (
        f"[Errno {errno.EAGAIN}] Could not start a thread to read NVML with a deadline: {os.strerror(errno.EAGAIN)}: "
        f"'{simulator.library_path()}'\n"
    )


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


# ---- the stock script's replacement (B2) ----------------------------------------------------------

# sed, but a `sed -i` lingers once it has replaced the file, before the stock script appends its line
# to the new one: B2's window, widened. It says when it is in it.
LINGERING_SED = """#!/bin/sh
"{real}" "$@" || exit $?
case " $* " in *" -i "*) : > "{mark}"; sleep {seconds} ;; esac
"""


# flock, but run by a shell whose pid is far below its own, as on a busy host where other processes take
# the pids between the stock script's subshell and its `flock -x 200`: this shim forks `forks` processes
# first, then runs flock as its child, and writes "<the subshell's pid> <flock's pid>".
FORKING_FLOCK = """#!/bin/sh
i=0
while [ $i -lt {forks} ]; do "{true}"; i=$((i + 1)); done
"{real}" "$@" &
echo "$PPID $!" > "{pids}"
wait $!
"""


def forking_flock(bin_dir, pids, forks):
    """Puts FORKING_FLOCK in ``bin_dir`` as `flock`; it writes the two pids to ``pids``."""
    shim = bin_dir / "flock"
    shim.write_text(FORKING_FLOCK.format(forks=forks, true=shutil.which("true"), real=shutil.which("flock"), pids=pids))
    shim.chmod(0o755)


def stock_reclaimer(stock_script, tmp_path, path, seconds, forks_before_flock=0):
    """Flink's stock script reclaiming in coordination mode on a 3-GPU host, its `sed -i` lingering
    `seconds` once the file is replaced, and `forks_before_flock` processes forked between its subshell and
    its `flock` (FORKING_FLOCK) when not 0; returns (its process, the mark that says it is in the window)."""
    bin_dir = fake_nvidia_smi(tmp_path / "bin", 3)
    mark = tmp_path / "in-the-window"
    sed = bin_dir / "sed"
    sed.write_text(LINGERING_SED.format(real=shutil.which("sed"), mark=mark, seconds=seconds))
    sed.chmod(0o755)
    if forks_before_flock:
        forking_flock(bin_dir, tmp_path / "flock-pids", forks_before_flock)
    proc = subprocess.Popen(
        ["bash", str(stock_script), "1", "--enable-coordination-mode", "--coordination-file", str(path)],
        env=stock_env(bin_dir),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the stock script never replaced the file"
        time.sleep(0.005)
    return proc, mark


def settle(path):
    """Waits until ``path`` has been there for five seconds (kFlockGapMs), then claims and releases on it in a fresh
    process: that look finds no stock script writing a replaced copy, and settles the file
    (csrc/coordination/proc_locks.cpp): no process of ours reads /proc/locks for it again."""
    while time.time() - os.stat(path).st_ctime <= 5.0:  # born no later than its last change
        time.sleep(0.01)
    claim_release = "import sys; from flink_gpu import coordination as c; c.claim(1, ['9'], path=sys.argv[1]); "
    run_child(claim_release + "c.release(path=sys.argv[1])", path)
    probe = path.with_name("xattr-probe")
    probe.touch()
    try:
        os.setxattr(probe, "user.probe", b"1")
    except OSError:  # a filesystem without user attributes records nothing: each process looks once
        return
    finally:
        probe.unlink()
    assert os.getxattr(path, "user.flink-gpu.settled")


@pytest.mark.parametrize(
    ("settled", "forks_before_flock"),
    [(False, 0), (True, 0), (False, 40)],
    ids=["young", "settled", "shell-far-below-its-flock"],
)
def test_a_claim_waits_for_a_stock_script_still_writing_the_file_it_replaced(
    stock_script, tmp_path, owners, settled, forks_before_flock
):
    """The stock script reclaims GPU 0 with `sed -i` (a new inode, unlocked) and appends `0 <its
    TaskManager>` to it only afterwards. A claim in between waits for it instead of taking GPU 0 too
    (free in the new file), and then reclaims GPU 1; also when the file it replaced was settled (no
    stock script was writing it: our processes no longer looked), since the copy is another file; and
    when the subshell that holds the lock has a pid far below that of the exited `flock` that
    /proc/locks names (a busy host)."""
    path = tmp_path / "coordination"
    holder, claimer = owners(), owners()
    path.write_text(f"0 {dead_pid()}\n1 {dead_pid()}\n2 {holder.pid}\n")
    if settled:
        settle(path)
    stock, _ = stock_reclaimer(stock_script, tmp_path, path, seconds=1.0, forks_before_flock=forks_before_flock)
    if forks_before_flock:
        shell, locker = map(int, (tmp_path / "flock-pids").read_text().split())
        # far below its flock, or above it where the pids wrapped around meanwhile
        assert not 0 < locker - shell <= forks_before_flock, (shell, locker)
    try:
        started = time.monotonic()
        got = coordination.claim(1, ["0", "1", "2"], path=path, owner=claimer.pid).taken
        waited = time.monotonic() - started
        stock_out = stock.communicate(timeout=30)[0]
    finally:
        stock.kill()
        stock.wait()
    assert (stock_out, stock.returncode) == ("0\n", 0)
    assert got == ["1"], path.read_text()  # not 0, which the stock script was writing for its TaskManager
    assert waited > 0.5
    assert holders(path) == {"0": (os.getpid(),), "1": (claimer.pid,), "2": (holder.pid,)}


def test_a_claim_in_a_pid_namespace_of_its_own_waits_for_a_stock_script_there_too(stock_script):
    """In a container (a pid namespace with its own /proc), /proc/locks leaves out every lock whose locker is
    none of its processes, so the lock of a stock transaction whose `flock` has exited does not show: the
    test above, run in one, must pass there too (before, each case took the GPU the stock script was writing)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    test = f"{__file__}::test_a_claim_waits_for_a_stock_script_still_writing_the_file_it_replaced"
    inner = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            test,
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if inner.returncode != 0 and "unshare" in inner.stderr:
        pytest.skip(f"cannot create a pid namespace here: {inner.stderr.strip()}")
    assert inner.returncode == 0 and "3 passed" in inner.stdout, inner.stdout[-4000:] + inner.stderr[-2000:]


def test_a_stock_script_that_never_finishes_its_replaced_file_bounds_the_wait_and_is_named(
    stock_script, tmp_path, owners
):
    path = tmp_path / "coordination"
    holder, claimer = owners(), owners()
    path.write_text(f"0 {dead_pid()}\n1 {holder.pid}\n2 {holder.pid}\n")
    stock, _ = stock_reclaimer(stock_script, tmp_path, path, seconds=600)
    try:
        with pytest.raises(TimeoutError) as info:
            coordination.claim(1, ["0", "1", "2"], path=path, owner=claimer.pid, timeout=0.3)
        message = str(info.value)
        writer = int(re.search(r": pid (\d+) still holds the lock of the copy it replaced", message).group(1))
        assert os.readlink(f"/proc/{writer}/fd/200") == f"{path} (deleted)"  # the stock script's shell
        assert str(path) in message and "Timed out after 0.3 s" in message
    finally:
        os.killpg(stock.pid, signal.SIGKILL)
        stock.communicate()
    # the stock script died mid-transaction: nothing waits any more, GPU 0 is free again
    assert coordination.claim(1, ["0", "1", "2"], path=path, owner=claimer.pid, timeout=5).taken == ["0"]


# A TaskManager stand-in for the mixed stress below: runs one discovery (the stock script or
# flink-gpu-discovery) as its child, so that it owns what it prints, takes the GPUs' markers and lives a
# moment. A stock TaskManager takes `stock-<i>` first: two stock scripts racing each other may give one
# GPU twice (what is left of B2), so `all-<i>` failing after it is a GPU given to a stock TaskManager
# and one of ours.
MIXED_TASKMANAGER = """
import fcntl, os, random, subprocess, sys, time
kind, marks, log, *command = sys.argv[1:]
proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
if proc.returncode == 0:
    held = []
    with open(log, "a") as out:
        for index in proc.stdout.strip().split(","):
            for marker in (["stock-" + index] if kind == "stock" else []) + ["all-" + index]:
                fd = os.open(os.path.join(marks, marker), os.O_RDWR | os.O_CREAT, 0o644)
                held.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    out.write(("STOCK RACE " if marker.startswith("stock") else "DOUBLE ") + f"{kind} {index}\\n")
                    break
    time.sleep(random.uniform(0, 0.05))
"""

OUR_WORKER = """
import fcntl, os, random, sys, time
from flink_gpu import coordination
from flink_gpu.errors import FlinkException
path, marks, log, gpus, stop = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
with open(log, "a") as out:
    while not os.path.exists(stop):
        try:
            got = coordination.claim(random.randint(1, 2), [str(i) for i in range(gpus)], path=path, timeout=30).taken
        except FlinkException:
            time.sleep(0.002)
            continue
        held = []
        for index in got:
            fd = os.open(os.path.join(marks, "all-" + index), os.O_RDWR | os.O_CREAT, 0o644)
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                out.write(f"DOUBLE ours {index}\\n")
                out.flush()
        time.sleep(random.uniform(0, 0.01))
        for fd in held:
            os.close(fd)
        coordination.release(path=path, timeout=30)
"""

# LINGERING_SED for the mixed stress below. Once its `sed -i "/<index> /d"` has replaced the file, the GPU is
# the stock script's (it appends its line next): it holds the GPU's marker while it lingers, so that one of
# ours given that GPU meanwhile finds it taken, and it logs each time it replaced the file.
MARKING_SED = """#!/bin/sh
"{real}" "$@" || exit $?
case " $* " in *" -i "*)
    index=${{2#/}}
    index=${{index%% /d}}
    exec 9<>"{marks}/all-$index"
    "{flock}" -n 9 || echo "DOUBLE stock $index" >> "{log}"
    echo "$index" >> "{replaced}"
    sleep {seconds} ;;
esac
"""

# A busy host: short-lived processes forked as fast as a shell can (until killed, at most 2 min), so that
# pids are handed out between the stock script's subshell and its `flock -x 200`.
FORK_STORM = """
end=$(( $(date +%s) + 120 ))
while [ "$(date +%s)" -lt "$end" ]; do
    i=0
    while [ $i -lt 100 ]; do (:); i=$((i + 1)); done
done
"""


def test_mixed_stock_script_executable_and_api_with_sigkills_never_give_a_gpu_to_ours_twice(
    stock_script, discovery_exe, tmp_path
):
    """Our API (SIGKILLed at random), flink-gpu-discovery and Flink's stock script, one after another,
    on one file of 4 GPUs for 8 s, and on until the stock script has replaced the file 5 times (at most
    60 s): no GPU is held by one of ours and another process at once. The stock script's `sed -i`
    lingers 200 ms (B2's window widened), and it runs niced on the CPU of a fork storm, so that its
    subshell is often many pids below the `flock` that /proc/locks names (a busy host)."""
    path = tmp_path / "coordination"
    marks, logs, stop = tmp_path / "marks", tmp_path / "logs", tmp_path / "stop"
    marks.mkdir()
    logs.mkdir()
    replaced = tmp_path / "replaced"
    replaced.touch()
    gpus = 4
    bin_dir = fake_nvidia_smi(tmp_path / "bin", gpus)
    (bin_dir / "sed").write_text(
        MARKING_SED.format(
            real=shutil.which("sed"),
            marks=marks,
            flock=shutil.which("flock"),
            log=logs / "stock-sed",
            replaced=replaced,
            seconds=0.2,
        )
    )
    (bin_dir / "sed").chmod(0o755)
    stock_environment = stock_env(bin_dir)
    exe_environment = child_env(devices=gpus)
    coordinated = ["--enable-coordination-mode", "--coordination-file", str(path)]
    cpu = str(min(os.sched_getaffinity(0)))
    storm = subprocess.Popen(["taskset", "-c", cpu, "sh", "-c", FORK_STORM], start_new_session=True)

    def our_worker(name):
        return subprocess.Popen(
            [sys.executable, "-c", OUR_WORKER, str(path), str(marks), str(logs / name), str(gpus), str(stop)],
            env=child_env(),
        )

    workers = [our_worker(f"ours{n}") for n in range(4)]
    taskmanagers = []
    counts = {"stock": 0, "exe": 0}
    started = time.monotonic()
    try:
        kills = 0
        while time.monotonic() - started < 60 and (
            time.monotonic() - started < 8 or min(counts.values()) <= 10 or len(replaced.read_text().split()) < 5
        ):
            for kind, command, env in (
                ("stock", ["taskset", "-c", cpu, "nice", "-n", "10", "bash", str(stock_script)], stock_environment),
                ("exe", [discovery_exe], exe_environment),
            ):
                if not any(k == kind and t.poll() is None for k, t in taskmanagers):
                    taskmanagers.append(
                        (
                            kind,
                            subprocess.Popen(
                                [
                                    sys.executable,
                                    "-c",
                                    MIXED_TASKMANAGER,
                                    kind,
                                    str(marks),
                                    str(logs / kind),
                                    *command,
                                    "1",
                                    *coordinated,
                                ],
                                env=env,
                            ),
                        )
                    )
                    counts[kind] += 1
            if kills < 3 and time.monotonic() - started > 2 + 2 * kills:
                workers[kills].kill()
                workers[kills].wait()
                workers[kills] = our_worker(f"ours-again{kills}")
                kills += 1
            time.sleep(0.005)
    finally:
        stop.touch()
        os.killpg(storm.pid, signal.SIGKILL)
        storm.wait()
        for w in workers:
            w.wait(timeout=60)
        for _, t in taskmanagers:
            t.wait(timeout=60)
    doubles = [line for log in logs.iterdir() for line in log.read_text().splitlines() if line.startswith("DOUBLE")]
    assert doubles == [], (doubles, counts)
    assert counts["stock"] > 10 and counts["exe"] > 10, counts
    assert len(replaced.read_text().split()) >= 5, "the stock script replaced the file fewer than 5 times in 60 s"


# ---- lock holders that hang or die ----------------------------------------------------------------


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


# ---- discovery scripts that misbehave --------------------------------------------------------------


def script_driver(tmp_path, body, timeout="5 s", name="discovery.sh"):
    script = tmp_path / name
    script.write_bytes(body.encode() if isinstance(body, str) else body)
    script.chmod(0o755)
    return GPUDriverFactory().create_external_resource_driver(
        Configuration(
            {"discovery-mode": "script", "discovery-script.path": str(script), "discovery-script.timeout": timeout}
        )
    )


def indices(infos):
    return sorted(info.index for info in infos)


def test_script_killing_its_own_process_group_cannot_touch_the_caller(tmp_path):
    # `kill 0` signals the caller's group; Flink runs the script in the TaskManager's group
    pids = tmp_path / "pids"
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\nsleep 600 &\necho $! > '{pids}'\nkill -TERM 0\nsleep 5\n")
    with pytest.raises(FlinkException, match=r"return code: 143\. It was killed by signal 15 \(SIGTERM\)"):
        gpu_driver.retrieve_resource_info(1)
    assert wait_gone(int(pids.read_text()))  # its own background child went with it


def test_script_closing_its_output_then_hanging_times_out(tmp_path):
    gpu_driver = script_driver(tmp_path, "#!/bin/sh\necho 0\nexec >&- 2>&-\nsleep 600\n", timeout="300 ms")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="over 300 ms"):
        gpu_driver.retrieve_resource_info(1)
    assert time.monotonic() - started < 3


def test_grandchild_that_left_the_process_group_is_killed_on_timeout(tmp_path):
    # setsid escapes the process-group kill; holding the script's output pipe, it is still the script's
    pids = tmp_path / "pids"
    gpu_driver = script_driver(
        tmp_path, f"#!/bin/sh\nsetsid sleep 600 &\necho $! > '{pids}'\necho 0,1\n", timeout="300 ms"
    )
    try:
        with pytest.raises(TimeoutError):
            gpu_driver.retrieve_resource_info(2)
        assert wait_gone(int(pids.read_text()), 2)
    finally:
        if running(int(pids.read_text())):
            os.kill(int(pids.read_text()), signal.SIGKILL)


def test_invalid_utf8_output_is_replaced_like_java(tmp_path):
    # Java's decoder and Python's "replace" both give one U+FFFD per malformed byte here
    gpu_driver = script_driver(tmp_path, b"#!/bin/sh\nprintf '0,\\377,1\\376, \\355\\240\\200 \\n'\n")
    assert indices(gpu_driver.retrieve_resource_info(2)) == ["0", "1\ufffd", "\ufffd", "\ufffd\ufffd\ufffd"]


def test_a_control_character_index_is_a_clear_error_as_in_flink(tmp_path):
    # "\x01" is not Java whitespace, so Flink keeps the field, trims it to "" and GPUInfo rejects it
    gpu_driver = script_driver(tmp_path, b"#!/bin/sh\nprintf '0,\\001\\n'\n")
    with pytest.raises(ValueError, match="must not be blank"):
        gpu_driver.retrieve_resource_info(1)


def test_a_megabyte_line_of_indices_parses_in_linear_time(tmp_path):
    count = 60_000  # 350 KB: Flink collects into a HashSet; a quadratic de-duplication takes > 10 s
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\nseq -s, 0 {count - 1}\n", timeout="20 s")
    started = time.monotonic()
    infos = gpu_driver.retrieve_resource_info(1)
    assert len(infos) == count
    assert time.monotonic() - started < 3


def test_script_dying_by_a_signal_while_its_child_still_runs(tmp_path):
    # the child keeps no pipe open: the death is reported at once and the child is not waited for
    pids = tmp_path / "pids"
    gpu_driver = script_driver(
        tmp_path, f"#!/bin/sh\nsleep 600 >/dev/null 2>&1 &\necho $! > '{pids}'\necho 0\nkill -SEGV $$\n"
    )
    started = time.monotonic()
    with pytest.raises(FlinkException, match=r"return code: 139\. It was killed by signal 11 \(SIGSEGV\)"):
        gpu_driver.retrieve_resource_info(1)
    assert time.monotonic() - started < 3
    child = int(pids.read_text())
    try:
        # documented: a background child that holds none of the script's pipes is the script's business
        # (as in Flink); it was not started by us, so it is not reaped here and leaks no zombie to us
        assert proc_stat(child) is None or proc_stat(child)[1] != os.getpid()
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


# ---- configuration files ---------------------------------------------------------------------------


def write_conf(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("value", ["two", "2.5", "true", "[1, 2]", "'2 GPUs'"])
def test_wrong_amount_types_name_the_key_and_value(tmp_path, value):
    conf = write_conf(tmp_path, f"external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: {value}\n")
    with pytest.raises(IllegalConfigurationException) as info:
        load_external_resources(conf)
    assert "for key 'external-resource.gpu.amount'" in str(info.value)
    assert str(info.value).startswith("Could not parse value '")


def test_wrong_types_of_gpu_options_are_reasons_not_crashes(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu;tpu
external-resource:
  gpu:
    amount: 1
    driver-factory.class: {JAVA_FACTORY}
    param:
      discovery-mode: 2
  tpu:
    amount: 1
    driver-factory.class: {JAVA_FACTORY}
    param:
      discovery-mode: script
      discovery-script.path: /bin/true
      discovery-script.timeout: soon
""",
    )
    provider = load_external_resources(conf)
    assert provider.get_external_resource_infos("gpu") == frozenset()
    reason = provider.missing_reason("gpu")
    assert "'discovery-mode'" in reason and "auto, nvml, script" in reason
    assert provider.get_external_resource_infos("tpu") == frozenset()
    assert "soon" in provider.missing_reason("tpu") and "discovery-script.timeout" in provider.missing_reason("tpu")


@pytest.mark.parametrize(
    "text, reason",
    [
        ("external-resources: gpu\n", "external-resource.gpu.amount is not set"),
        (
            "external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n",
            "external-resource.gpu.driver-factory.class is not set",
        ),
        (f"external-resource:\n  gpu:\n    amount: 1\n    driver-factory.class: {JAVA_FACTORY}\n", None),
    ],
)
def test_missing_sections_leave_an_empty_set_and_a_reason(tmp_path, text, reason):
    provider = load_external_resources(write_conf(tmp_path, text))
    assert provider.get_external_resource_infos("gpu") == frozenset()
    if reason is None:  # no external-resources list at all: nothing is enabled
        assert provider.resource_names == ()
    else:
        assert reason in provider.missing_reason("gpu")


@pytest.mark.parametrize(
    "content",
    [
        b"external-resources: gpu\n\xff\xfe: 1\n",
        b"external-resources: \x00gpu\n",
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    ],
)
def test_binary_config_files_are_clear_errors(tmp_path, content):
    conf = write_conf(tmp_path, content)
    with pytest.raises(IllegalConfigurationException) as info:
        Configuration.from_yaml(conf)
    assert str(conf) in str(info.value)


def doctor(conf):
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "doctor", "--simulate", "2", str(conf)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_doctor_suggests_the_nearest_gpu_option_for_a_typo(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu
external-resource.gpu.amount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
external-resource.gpu.param.discovery-script.pth: /opt/discovery.sh
""",
    )
    _, output = doctor(conf)
    assert "discovery-script.pth" in output
    assert "Did you mean external-resource.gpu.param.discovery-script.path?" in output


def test_doctor_suggests_the_nearest_resource_key_for_a_typo(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu
external-resource.gpu.ammount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
""",
    )
    code, output = doctor(conf)
    assert code == 1  # the amount is missing: an error
    assert "external-resource.gpu.ammount is not an option of external resources" in output
    assert "Did you mean external-resource.gpu.amount?" in output


# ---- property: whatever bytes a script prints, the result is Flink's -----------------------------------

# java.lang.Character.isWhitespace
JAVA_WHITESPACE = set("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2028\u2029\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B) if c != 0x2007
}


def java_lines(text):
    """BufferedReader#lines(): ends at \\n, \\r or \\r\\n; no empty line after a final terminator."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines[-1] == "" else lines


def java_indices(line):
    """GPUDriver: split(","), drop isNullOrWhitespaceOnly fields, trim() (chars <= U+0020), a set."""
    out = []
    for field in line.split(","):
        if not all(c in JAVA_WHITESPACE for c in field):
            index = field.strip("".join(map(chr, range(0x21))))
            if index not in out:
                out.append(index)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    output=st.binary(max_size=64)
    | st.text(alphabet="0123, \t\r\n\x00\x01\x1c\u2003\u00a0\u2028é", max_size=40).map(lambda t: t.encode())
)
def test_any_script_output_gives_flinks_result(tmp_path, output):
    """A real script prints arbitrary bytes; the driver's answer is Java's: UTF-8 with replacement,
    BufferedReader lines, the first line only, Flink's split/filter/trim, GPUInfo rejecting an index that is
    whitespace only (isNullOrWhitespaceOnly, which a trimmed field can still be)."""
    data = tmp_path / "output"
    data.write_bytes(output)
    gpu_driver = script_driver(tmp_path, f"#!/bin/sh\ncat '{data}'\n")
    lines = java_lines(output.decode("utf-8", "replace"))
    expected = java_indices(lines[0]) if lines else []
    if any(all(c in JAVA_WHITESPACE for c in index) for index in expected):  # "\x01" -> "", "\x01\u2003" -> "\u2003"
        with pytest.raises(ValueError, match="must not be blank"):
            gpu_driver.retrieve_resource_info(1)
    else:
        assert indices(gpu_driver.retrieve_resource_info(1)) == sorted(expected)


# ---- the limits docs/SECURITY.md states, shown ------------------------------------------------------------


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


def test_doctor_does_not_flag_the_keys_of_a_resource_whose_name_extends_another(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu;gpu.a100
external-resource.gpu.amount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
external-resource.gpu.a100.amount: 1
external-resource.gpu.a100.driver-factory.class: {JAVA_FACTORY}
""",
    )
    _, output = doctor(conf)
    assert "is not an option of external resources" not in output


# ---- paths that are not regular files, at every reader of the package ----------------------------------


class _Blocked(BaseException):
    """Raised by the alarm: the reader blocked (a BaseException, so no reader's handler takes it)."""


def _odd_path(tmp_path, kind):
    return make_odd_path(tmp_path / "odd", kind)


def _read_pod_template(path):
    from flink_gpu import merge_into_pod_template

    return merge_into_pod_template(path, {})


def _load_configuration_file(path):
    from flink_gpu.flink.config_files import load_configuration_file

    return load_configuration_file(path, legacy=False)


def _nvml_driver(path):
    from flink_gpu import GPUDriver

    return GPUDriver({"discovery-mode": "nvml", "nvml.library-path": str(path)})


def _regular_file_refusal(what):
    return OSError, (
        lambda path, description: f"The {what} {path} is {description}, not a regular file; give the path of a file."
    )


# dlopen of a FIFO blocks until a writer comes: the NVML loader refuses it as library-not-found
_NVML_REFUSAL = (
    flink_gpu.NvmlError,
    lambda path, description: (
        f"Could not load the NVIDIA Management Library '{path}': it is {description}, not a regular "
        "file. Install the NVIDIA driver on this host, or set FLINK_GPU_NVML_LIBRARY (driver option "
        "nvml.library-path) to the path of its libnvidia-ml.so.1."
    ),
)

_READERS = {
    "Configuration.from_yaml": (
        lambda path: Configuration.from_yaml(path, legacy=False),
        _regular_file_refusal("Flink configuration file"),
    ),
    "Configuration.from_yaml legacy": (
        lambda path: Configuration.from_yaml(path, legacy=True),
        _regular_file_refusal("Flink configuration file"),
    ),
    "load_configuration_file": (_load_configuration_file, _regular_file_refusal("Flink configuration file")),
    "load_external_resources": (load_external_resources, _regular_file_refusal("Flink configuration file")),
    "merge_into_pod_template": (_read_pod_template, _regular_file_refusal("pod template file")),
    "simulator.read_spec": (simulator.read_spec, _regular_file_refusal("simulator spec file")),
    "simulator.environment": (
        lambda path: simulator.environment(spec=path),
        _regular_file_refusal("simulator spec file"),
    ),
    "GPUDriver nvml.library-path": (_nvml_driver, _NVML_REFUSAL),
}


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket", "device"])
@pytest.mark.parametrize("reader", sorted(_READERS))
def test_every_reader_refuses_a_path_that_is_not_a_regular_file_at_once(tmp_path, reader, kind):
    read, (error_type, expected) = _READERS[reader]
    path, description = _odd_path(tmp_path, kind)
    if kind == "directory" and reader.startswith(("Configuration", "load_")):
        (path / "config.yaml").mkdir()  # a directory is a conf directory: its file is the odd one
        path = path / "config.yaml"
        read_path = path.parent
    else:
        read_path = path

    def blocked(signum, frame):
        raise _Blocked()

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        with pytest.raises(error_type) as error:
            read(read_path)
    except _Blocked:
        pytest.fail(f"{reader} blocked on {description} {path}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(error.value) == expected(path, description)


def test_flink_conf_dir_naming_a_fifo_does_not_block_pyflink(tmp_path):
    fifo = tmp_path / "conf"
    os.mkfifo(fifo)
    env = child_env(devices=2)
    env["FLINK_CONF_DIR"] = str(fifo)
    out = run_child(
        """
        from flink_gpu.pyflink import get_external_resource_infos, lookup_external_resource_infos
        print(sorted(get_external_resource_infos(None, "gpu")))
        print(lookup_external_resource_infos(None, "gpu").reason)
    """,
        env=env,
        timeout=30,
    )
    infos, reason = out.splitlines()
    assert infos == "[]"
    assert f"The Flink configuration file {fifo} is a FIFO (named pipe), not a regular file" in reason


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_the_simulator_refuses_a_spec_path_that_is_not_a_regular_file(discovery_exe, tmp_path, kind):
    path, description = _odd_path(tmp_path, kind)
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        f"flink-gpu NVML simulator: cannot use FLINK_GPU_SIM_SPEC={path}: it is {description}, not a regular file"
    ) in proc.stderr


def test_the_simulator_refuses_a_spec_larger_than_16_mib(discovery_exe, tmp_path):
    path = tmp_path / "spec.json"
    with open(path, "wb") as handle:
        handle.truncate(16 * 2**20 + 1)
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "it is larger than 16 MiB, the most the simulator reads" in proc.stderr


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"devices": [{"name": 5}]}, "devices[0].name must be a string"),
        ({"devices": [{"uuid": ["x"]}]}, "devices[0].uuid must be a string"),
        ({"devices": [{"pci_bus_id": True}]}, "devices[0].pci_bus_id must be a string"),
        ({"devices": [{"memory_total": "abc"}]}, "devices[0].memory_total must be a whole number of bytes"),
        ({"devices": [{"minor_number": "1"}]}, "devices[0].minor_number must be a whole number"),
        ({"devices": [{"fault": 5}]}, 'devices[0].fault must be "NO_PERMISSION" or "GPU_IS_LOST"'),
        ({"driver_version": 5}, "driver_version must be a string"),
        ({"init_error": "x"}, "init_error must be an NVML error code (0..999)"),
    ],
)
def test_the_simulator_rejects_spec_values_of_the_wrong_type_naming_the_key(discovery_exe, tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"flink-gpu NVML simulator: {path}: {message}" in proc.stderr
    with pytest.raises(ValueError, match=re.escape(str(path))):  # the Python check agrees
        simulator.read_spec(path)


def test_a_lease_file_locked_for_ever_by_another_process_never_stalls_a_claim(tmp_path):
    """Only claimers flock the lease file, to write its token; anyone who can read it can hold that lock for
    ever. The claim then goes on without a token (its lines are judged by pid) instead of hanging under the
    coordination file's lock, where every other claimer would wait behind it."""
    path = tmp_path / "coordination"
    Path(f"{path}.lease").write_bytes(b"")  # created empty, as an older version leaves it
    holder = subprocess.Popen(["flock", "-x", f"{path}.lease", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "-n", f"{path}.lease", "true"]).returncode == 0:  # until it holds it
            assert time.monotonic() < deadline, "flock(1) never took the lock"
            time.sleep(0.01)
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
