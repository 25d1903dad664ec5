"""The fault harness: what tests that break things share. Leak checks (descriptors, children), the child
environment and child interpreters, a process that holds a file's lock, shims that widen the stock script's
windows (a lingering `sed -i`, a `flock` run far above its shell's pid), a fork storm, and the TaskManager and
worker stand-ins of the mixed stress (tests/test_coordination_stock_script.py).

A test that breaks something also checks that nothing leaks: `@pytest.mark.usefixtures("no_leaks")`
(tests/conftest.py), which runs `nothing_leaks` around it.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import flink_gpu
from conftest import proc_start_time
from flink_gpu import Configuration, GPUDriverFactory, coordination, simulator
from support.files import make_odd_path
from support.interop import fake_nvidia_smi, stock_env
from support.leases import our_lease
from support.waiting import wait_until

SRC = str(Path(flink_gpu.__file__).resolve().parent.parent)


JAVA_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"


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
    return wait_until(lambda: not running(pid), f"pid {pid} is gone", seconds)


def idle_lease(fds: dict) -> dict:
    """The one lease descriptor a process keeps after releasing everything (csrc/coordination/lease.hpp),
    if the new descriptors ``fds`` hold one: a cache of one, not a leak."""
    leases = {fd: target for fd, target in fds.items() if target.removesuffix(" (deleted)").endswith(".lease")}
    return leases if len(leases) == 1 else {}


@contextlib.contextmanager
def nothing_leaks() -> Iterator[None]:
    """The block leaves the descriptors and children as it found them (but for the one idle lease)."""
    fds_before = open_fds()
    children_before = children()
    yield
    leaked: "dict[str, object]" = {}

    def nothing_left() -> bool:
        fds = {fd: target for fd, target in open_fds().items() if fds_before.get(fd) != target}
        for fd in idle_lease(fds):
            del fds[fd]
        leaked.update(descriptors=fds, children=children() - children_before)
        return not any(leaked.values())

    try:  # threads of a test may still be closing what they opened
        wait_until(nothing_left, "the block's descriptors and children are gone", 5)
    except AssertionError:
        pass  # said below, with what leaked
    assert not leaked["descriptors"], f"descriptors leaked: {leaked['descriptors']}"
    assert not leaked["children"], f"children left behind: {leaked['children']}"


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


def wait_for_open(inode, seconds=10):
    """Until this process has a descriptor on ``inode`` (a claim waiting for that file's lock)."""

    def opened():
        for fd in os.listdir("/proc/self/fd"):
            try:
                if int(fd) > 2 and os.stat(f"/proc/self/fd/{fd}").st_ino == inode:
                    return True
            except OSError:
                pass
        return False

    wait_until(opened, "the claim opened the coordination file", seconds, interval=0.002)


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

    def replaced():
        assert proc.poll() is None, "the stock script ended without replacing the file"
        return mark.exists()

    wait_until(replaced, "the stock script replaced the file", 30, interval=0.005)
    return proc, mark


def settle(path):
    """Waits until ``path`` has been there for five seconds (kFlockGapMs), then claims and releases on it in a fresh
    process: that look finds no stock script writing a replaced copy, and settles the file
    (csrc/coordination/proc_locks.cpp): no process of ours reads /proc/locks for it again."""
    # born no later than its last change
    wait_until(lambda: time.time() - os.stat(path).st_ctime > 5.0, f"{path} is five seconds old", 60)
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
            time.sleep(0.002)  # none free: the next try, paced
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


def script_driver(tmp_path, body, timeout="5 s", name="discovery.sh"):
    script = tmp_path / name
    script.write_bytes(body.encode() if isinstance(body, str) else body)
    script.chmod(0o755)
    return GPUDriverFactory().create_external_resource_driver(
        Configuration(
            {"discovery-mode": "script", "discovery-script.path": str(script), "discovery-script.timeout": timeout}
        )
    )


def write_conf(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def indices(infos):
    return sorted(info.index for info in infos)


def _odd_path(tmp_path, kind):
    return make_odd_path(tmp_path / "odd", kind)
