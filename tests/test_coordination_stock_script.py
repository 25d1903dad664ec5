"""Flink's stock script replacing the coordination file (B2, docs/design.md §5.1): a claim waits for a stock
script still writing the copy it replaced, in a pid namespace of its own too, bounds that wait, and a mixed
stress of the stock script, flink-gpu-discovery and our API never gives one GPU to ours and another at once.
The shims that widen its windows are in support/faults.py.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import dead_pid
from flink_gpu import coordination
from support.faults import (
    FORK_STORM,
    MARKING_SED,
    MIXED_TASKMANAGER,
    OUR_WORKER,
    child_env,
    holders,
    settle,
    stock_reclaimer,
)
from support.interop import fake_nvidia_smi, stock_env


@pytest.mark.usefixtures("no_leaks")
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


@pytest.mark.usefixtures("no_leaks")
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


@pytest.mark.usefixtures("no_leaks")
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


@pytest.mark.usefixtures("no_leaks")
def test_mixed_stock_script_executable_and_api_with_sigkills_never_give_a_gpu_to_ours_twice(
    stock_script, discovery_exe, tmp_path
):
    """Our API (SIGKILLed at random), flink-gpu-discovery and Flink's stock script, one after another,
    on one file of 4 GPUs for 8 s, and on until the stock script has replaced the file 5 times (at most
    180 s: a loaded machine runs the stock script slowly): no GPU is held by one of ours and another
    process at once. The stock script's `sed -i` lingers 200 ms (B2's window widened), and it runs niced
    on the CPU of a fork storm, so that its subshell is often many pids below the `flock` that /proc/locks
    names (a busy host)."""
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
        while time.monotonic() - started < 180 and (
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
            time.sleep(0.005)  # the watch's pace: the workers run meanwhile
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
    assert len(replaced.read_text().split()) >= 5, "the stock script replaced the file fewer than 5 times in 180 s"
