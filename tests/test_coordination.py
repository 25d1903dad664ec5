"""GPU coordination (docs/design.md §5): our claims against the real file, real processes, real locks, and Flink's
real stock discovery script (from the apache-flink-libraries 2.3.0 wheel) on the same file."""

import errno
import json
import logging
import os
import random
import re
import shutil
import signal
import stat
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
from conftest import child_env, dead_pid, proc_start_time, run_python
from flink_gpu import coordination
from flink_gpu.errors import FlinkException
from support.files import small_tmpfs
from support.interop import fake_nvidia_smi, stock_env
from support.leases import lease_held, lease_token, our_lease, tokenless_lease_file
from support.waiting import wait_until

SRC = str(Path(flink_gpu.__file__).resolve().parent.parent)


# ---- helpers ------------------------------------------------------------------------------------------


def gpus(n):
    return [str(i) for i in range(n)]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "flink-gpu-coordination"


def live_holders(path):
    """index -> pid of its live owner; fails on an index with two live owners."""
    snap = coordination.snapshot(path)
    holders = snap.holders()
    doubles = {index: pids for index, pids in holders.items() if len(pids) > 1}
    assert not doubles, f"GPUs with two live owners: {doubles}\n{Path(path).read_text()}"
    return {index: pids[0] for index, pids in holders.items()}


# ---- Flink's stock script ---------------------------------------------------------------------------


class Stock:
    """Runs the stock script on one coordination file with `count` simulated GPUs."""

    def __init__(self, script, tmp_path, path, count, path_env=None):
        self.script = script
        self.path = path
        bin_dir = fake_nvidia_smi(tmp_path / f"smi{count}", count)
        self.env = stock_env(bin_dir)
        if path_env is not None:
            self.env["PATH"] = f"{bin_dir}:{path_env}"

    def args(self, amount):
        return [str(self.script), str(amount), "--enable-coordination-mode", "--coordination-file", str(self.path)]

    def run(self, amount):
        """The script with this test process as its parent, i.e. as the owner (the TaskManager)."""
        return subprocess.run(["bash", *self.args(amount)], env=self.env, capture_output=True, text=True, timeout=60)

    def start_owner(self, amount):
        """A TaskManager stand-in: a shell that runs the script (so owns its GPUs) and stays alive."""
        return StockOwner(
            subprocess.Popen(
                ["sh", "-c", 'bash "$0" "$@"; echo "rc=$?"; exec sleep 600', *self.args(amount)],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )


class Owner:
    def kill(self):
        self.proc.kill()
        self.proc.wait()

    @property
    def pid(self):
        return self.proc.pid


class StockOwner(Owner):
    def __init__(self, proc):
        self.proc = proc

    def result(self):
        """(list of indices, or None when the script failed, and its output)"""
        out = []
        for line in self.proc.stdout:
            if line.startswith("rc="):
                rc = int(line[3:])
                return (out[0].split(",") if rc == 0 else None), out
            out.append(line.strip())
        raise AssertionError(f"stock script owner {self.pid} ended early: {out} {self.proc.stderr.read()}")


OUR_OWNER = textwrap.dedent("""\
    import json, sys
    from flink_gpu import coordination
    from flink_gpu.errors import FlinkException
    amount, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    try:
        got = coordination.claim(amount, [str(i) for i in range(count)], path=path, timeout=30).taken
        print(json.dumps({"ok": got}), flush=True)
    except FlinkException as e:
        print(json.dumps({"error": str(e)}), flush=True)
    sys.stdin.read()  # hold the GPUs until the test lets go
    """)


class OurOwner(Owner):
    """A Python worker that claims through flink_gpu.coordination and stays alive."""

    def __init__(self, path, count, amount, env=None):
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = SRC
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OUR_OWNER, str(amount), str(path), str(count)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def result(self):
        line = self.proc.stdout.readline()
        assert line, f"our owner {self.pid} died"
        answer = json.loads(line)
        return answer.get("ok"), answer.get("error")


# ---- the API ----------------------------------------------------------------------------------------


def own_ns():
    return os.stat("/proc/self/ns/pid").st_ino


def test_claim_writes_flink_format_with_start_time(path):
    assert coordination.claim(2, gpus(4), path=path).taken == ["0", "1"]
    me, start = os.getpid(), proc_start_time(os.getpid())
    # the stock script's `<index> <pid>`, then tab-separated: the owner's start time, its pid namespace and,
    # as it claims for itself, the byte of the lease file it keeps locked
    tail = f"\t{start}\tns={own_ns()}{our_lease(path)}"
    assert path.read_text() == f"0 {me}{tail}\n1 {me}{tail}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~_umask()
    lease = Path(f"{path}.lease")
    # the coordination file's bits for its owner and group, none for other users (who could read-lock a byte)
    assert lease.is_file() and stat.S_IMODE(lease.stat().st_mode) == stat.S_IMODE(path.stat().st_mode) & 0o660
    assert coordination.process_start_time(me) == start


def test_the_protocols_one_description_names_every_field_the_core_writes_and_reads():
    """docs/design.md §5.2 (File format) is the protocol's one description: its table of fields names each
    key csrc/coordination/lines.cpp writes or parses, in the order the core writes them."""
    root = Path(__file__).resolve().parent.parent
    core = (root / "csrc" / "coordination" / "lines.cpp").read_text()
    written = re.findall(r'"\\t([a-z]+)="', core)
    parsed = re.findall(r'key_is\(word, eq, "([a-z]+)"\)', core)
    assert len(written) >= 7 and sorted(written) == sorted(parsed), (written, parsed)  # the regexes still find them
    design = (root / "docs" / "design.md").read_text()
    section = design.split("**File format.**", 1)[1].split("**MIG units", 1)[0]
    described = re.findall(r"^\| `([a-z]+)` \|", section, re.M)
    assert described == written
    order = re.search(r"^    <gpu> <pid>\\t<start time>(.*)$", section, re.M).group(1)
    assert re.findall(r"\\t([a-z]+)=", order) == written


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_default_path_is_the_stock_scripts():
    assert coordination.DEFAULT_PATH == "/var/tmp/flink-gpu-coordination"


def test_owner_asking_again_gets_what_it_holds(path):
    assert coordination.claim(2, gpus(4), path=path).taken == ["0", "1"]
    before = path.read_text()
    assert coordination.claim(2, gpus(4), path=path).taken == ["0", "1"]
    assert path.read_text() == before
    assert coordination.claim(3, gpus(4), path=path).taken == ["0", "1", "2"]  # topped up
    assert coordination.claim(1, gpus(4), path=path).taken == ["0"]  # the lowest, keeps holding all three
    assert sorted(live_holders(path)) == ["0", "1", "2"]


def test_indices_as_ints_and_natural_order(path):
    assert coordination.claim(3, [10, "2", 1], path=path).taken == ["1", "2", "10"]


def test_release_all_or_some_and_missing_file(path, owners):
    other = owners()
    assert coordination.claim(2, gpus(4), path=path, owner=other.pid).taken == ["0", "1"]
    assert coordination.claim(2, gpus(4), path=path).taken == ["2", "3"]
    assert coordination.release(path=path, indices=["3", "0"]) == ["3"]  # 0 is not ours
    assert live_holders(path) == {"0": other.pid, "1": other.pid, "2": os.getpid()}
    assert coordination.release(other.pid, path=path) == ["0", "1"]
    assert coordination.release(path=path) == ["2"]
    assert path.read_text() == ""
    missing = path.with_name("missing")
    assert coordination.release(path=missing) == []
    assert coordination.clean_stale(missing).removed == ()
    snap = coordination.snapshot(missing)
    assert not snap.exists and snap.entries == ()
    assert not missing.exists()


def test_claim_result_says_what_was_taken_added_and_reclaimed(path, owners):
    dead = dead_pid()
    path.write_text(f"0 {os.getpid()}\t{proc_start_time(os.getpid())}\n1 {dead}\n")
    result = coordination.claim(3, gpus(5), path=path)  # free GPUs before those of dead owners
    assert result == coordination.ClaimResult(taken=["0", "2", "3"], added=["2", "3"], reclaimed=[], owner=os.getpid())
    other = owners()
    assert coordination.claim(2, gpus(5), path=path, owner=other.pid) == coordination.ClaimResult(
        taken=["1", "4"], added=["1", "4"], reclaimed=["1"], owner=other.pid
    )
    with pytest.raises(AttributeError):
        result.taken = []  # frozen


def test_a_claim_says_each_event_once_in_the_cores_notices_and_logs_them(path, caplog):
    """The core writes what a claim has to say where it decides (csrc/coordination/claims.cpp); Python logs the
    notices at their level, as they are."""
    dead = dead_pid()
    path.write_text(f"garbage\n1 {dead}\n")
    got = flink_gpu._native.coordination_claim(path, 5.0, os.getpid(), ["1"], 1)
    assert [(n.level, n.text) for n in got.notices] == [
        (
            "warning",
            f"Line 1 of the coordination file {path} cannot be parsed and is left as it is (its GPU is never "
            "reclaimed): 'garbage'",
        ),
        ("info", f"Reclaimed GPU(s) 1 of dead owners in {path} for pid {os.getpid()}."),
    ]
    with caplog.at_level(logging.INFO, logger="flink_gpu.coordination"):
        coordination.log_notices(got.notices)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, got.notices[0].text),
        (logging.INFO, got.notices[1].text),
    ]
    coordination.release(path=path)


def test_the_files_beside_a_coordination_file_are_named_once_by_the_core(tmp_path):
    from flink_gpu.bindings_file import bindings_path

    path = str(tmp_path / "c")
    lease, bindings, bindings_lease, topology = coordination.companion_paths(path)
    assert (lease, bindings, bindings_lease, topology) == (
        f"{path}.lease",
        f"{path}.bindings",
        f"{path}.bindings.lease",
        f"{path}.topology",
    )
    assert bindings_path(path) == bindings and lease == path + coordination.LEASE_SUFFIX


def test_claimed_releases_what_the_block_added(path):
    coordination.claim(1, gpus(4), path=path)
    with coordination.claimed(3, gpus(4), path=path) as result:
        assert result.taken == ["0", "1", "2"]
        assert sorted(live_holders(path)) == ["0", "1", "2"]
    assert live_holders(path) == {"0": os.getpid()}  # held before the block, so still held


def test_not_enough_says_requested_existing_and_holders(path, owners):
    a, b = owners(), owners()
    coordination.claim(2, gpus(3), path=path, owner=a.pid)
    coordination.claim(1, gpus(3), path=path, owner=b.pid)
    before = path.read_text()
    with pytest.raises(FlinkException) as info:  # as Flink-style code catches it
        coordination.claim(1, gpus(3), path=path)
    # the failure by name, from the core's not-enough status: what the caller can act on
    assert type(info.value) is flink_gpu.NotEnoughGpusError
    message = str(info.value)
    assert message.startswith("Could not get enough GPU resources.")
    assert "Requested 1, the host has 3 GPUs (0, 1, 2)" in message
    assert f"pid {a.pid} holds 0, 1" in message and f"pid {b.pid} holds 2" in message
    assert str(path) in message
    assert path.read_text() == before


@pytest.mark.parametrize("owner", [0, -3, 2**32 + 1, 2**64])
def test_an_owner_that_is_no_pid_says_why(path, owner):
    """The core's one pid rule, in one sentence (csrc/base/process_id.hpp), with the value as given."""
    with pytest.raises(ValueError) as caught:
        coordination.claim(1, gpus(2), path=path, owner=owner)
    assert str(caught.value) == f"Invalid owner pid {owner}: it must be a positive process id, at most 2147483647."


@pytest.mark.parametrize("spelling", ["00:01", "0:01", "00", "0:", ":1", "0:1:2"])
def test_another_spelling_of_a_gpu_or_unit_is_refused_naming_it(path, owners, spelling):
    """'00:01' would be claimed beside another pid's GPU 0 (and '0:' beside it, '00' beside '0')."""
    coordination.claim(1, ["0"], path=path, owner=owners().pid)
    before = path.read_text()
    with pytest.raises(ValueError, match=f"Invalid GPU index '{spelling}'.*<gpu>:<slot>"):
        coordination.claim(1, [spelling], path=path)
    assert path.read_text() == before


def test_bad_arguments(path):
    with pytest.raises(ValueError, match="Invalid GPU index '0 1'"):
        coordination.claim(1, ["0 1"], path=path)
    with pytest.raises(ValueError, match="must not be negative"):
        coordination.claim(-1, gpus(2), path=path)
    with pytest.raises(TypeError):
        coordination.claim(True, gpus(2), path=path)
    with pytest.raises(TypeError):
        coordination.claim(1, [1.5], path=path)
    with pytest.raises(ValueError, match="does not exist"):
        coordination.claim(1, gpus(2), path=path, owner=dead_pid())
    with pytest.raises(ValueError, match="positive process id"):
        coordination.release(0, path=path)
    with pytest.raises(ValueError, match="timeout"):
        coordination.claim(1, gpus(2), path=path, timeout=-1)
    assert coordination.claim(0, gpus(2), path=path).taken == []
    assert not path.exists()


def test_a_forked_child_claims_for_itself(path):
    assert coordination.claim(2, gpus(4), path=path).taken == ["0", "1"]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            got = coordination.claim(2, gpus(4), path=path).taken
            with coordination.claimed(0, gpus(4), path=path):
                pass  # leaving a block in the child releases nothing of the parent's
            os.write(write_end, json.dumps(got).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    got = json.loads(os.read(read_end, 1000))
    os.waitpid(pid, 0)
    os.close(read_end)
    assert got == ["2", "3"]
    assert live_holders(path) == {"0": os.getpid(), "1": os.getpid()}  # the child is gone: 2, 3 are stale


def test_fork_inside_claimed_block_does_not_release_the_parents(path):
    with coordination.claimed(2, gpus(4), path=path) as result:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child leaves the block, then exits
            os._exit(0)
        os.waitpid(pid, 0)
        assert live_holders(path) == {index: os.getpid() for index in result.taken}
    assert live_holders(path) == {}


def test_threads_of_one_process_exclude_each_other(path, owners):
    procs = [owners() for _ in range(8)]
    table, table_lock = {}, threading.Lock()
    problems, claims = [], []
    rounds = 8  # claims per thread: a count, not a time, so a loaded machine does the same work

    def work(owner):
        done = 0
        while done < rounds:
            try:
                got = coordination.claim(1, gpus(3), path=path, owner=owner, timeout=30).taken
            except FlinkException:
                continue
            with table_lock:
                if table.get(got[0]) is not None:
                    problems.append((got[0], table[got[0]], owner))
                table[got[0]] = owner
            claims.append(got[0])
            done += 1
            time.sleep(0.0005)  # holding the GPU a moment: the overlap a double assignment would show
            with table_lock:
                table[got[0]] = None
            coordination.release(owner, path=path, timeout=30)

    threads = [threading.Thread(target=work, args=(p.pid,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    assert len(claims) == rounds * len(procs)
    assert path.read_text() == ""


# ---- the stock script's bugs, one regression test each (docs/design.md §5.1) ----------------------------------


def test_b1_reclaiming_1_leaves_11_alone(path, owners, stock_script, tmp_path):
    holder_of_11, holder_of_rest = owners(), owners()

    def prepare():  # 0..11 held, except 1 whose owner is dead
        lines = [f"{i} {holder_of_rest.pid}" for i in range(12) if i not in (1, 11)]
        path.write_text("\n".join(lines + [f"1 {dead_pid()}", f"11 {holder_of_11.pid}"]) + "\n")

    prepare()  # first the stock script: it does delete the line of 11 (so this test can tell)
    out = Stock(stock_script, tmp_path, path, 12).run(1)
    assert out.stdout.strip() == "1"
    assert f"11 {holder_of_11.pid}" not in path.read_text()

    prepare()
    assert coordination.claim(1, gpus(12), path=path).taken == ["1"]
    assert f"11 {holder_of_11.pid}\n" in path.read_text()
    assert live_holders(path)["11"] == holder_of_11.pid


def test_b1_stock_reclaim_keeps_our_lines(path, owners, stock_script, tmp_path):
    """Our third field follows a tab: the stock script's `sed "/<index> /d"` never matches inside it."""
    owner = owners()
    d = int(str(owner.pid)[-1])  # a space after the pid would make "<d> " appear in our line
    x = (d + 1) % 10
    assert coordination.claim(1, [str(x)], path=path, owner=owner.pid).taken == [str(x)]
    ours = path.read_text()
    me = os.getpid()
    with path.open("a") as f:
        for i in range(10):
            if i == d:
                f.write(f"{i} {dead_pid()}\n")
            elif i != x:
                f.write(f"{i} {me}\n")
    out = Stock(stock_script, tmp_path, path, 10).run(1)
    assert out.stdout.strip() == str(d)
    assert ours in path.read_text()
    assert live_holders(path)[str(x)] == owner.pid


def test_b2_rewritten_in_place_never_replaced(path):
    path.write_text(f"0 {dead_pid()}\n1 {dead_pid()}\n2 {dead_pid()}\n")
    inode = path.stat().st_ino
    assert coordination.claim(1, gpus(3), path=path).taken == ["0"]  # a reclaim: the file is rewritten
    assert path.stat().st_ino == inode
    assert len(coordination.clean_stale(path).removed) == 2
    assert coordination.release(path=path) == ["0"]
    assert path.stat().st_ino == inode
    assert path.read_text() == ""


LOCK_AND_REPLACE = textwrap.dedent("""\
    import fcntl, os, sys
    path = sys.argv[1]
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    with open(path + ".sed", "w") as f:  # what `sed -i` does, still holding the old inode's lock
        f.write(sys.argv[2])
    os.replace(path + ".sed", path)
    """)


def test_b2_replacement_by_someone_else_is_detected(path, owners):
    holder = owners()
    path.write_text("")
    old_inode = path.stat().st_ino
    replacer = subprocess.Popen(
        [sys.executable, "-c", LOCK_AND_REPLACE, str(path), f"0 {holder.pid}\n"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert replacer.stdout.readline() == "locked\n"
    result = {}
    claimer = threading.Thread(target=lambda: result.update(got=coordination.claim(1, gpus(2), path=path).taken))
    claimer.start()
    # the claim has opened the old file and waits for its lock
    wait_until(lambda: _has_open_fd_to_inode(old_inode), "the claim opened the coordination file", 10, 0.002)
    replacer.stdin.write("go\n")
    replacer.stdin.close()
    replacer.wait()
    claimer.join()
    assert result["got"] == ["1"]  # it read the replacement, where 0 is held
    assert path.read_text() == (
        f"0 {holder.pid}\n1 {os.getpid()}\t{proc_start_time(os.getpid())}\tns={own_ns()}{our_lease(path)}\n"
    )


def _has_open_fd_to_inode(inode):
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.stat(f"/proc/self/fd/{fd}").st_ino == inode and int(fd) > 2:
                return True
        except OSError:
            pass
    return False


RESTRICTED_TOOLS = ("bash", "sh", "grep", "awk", "sed", "flock", "dirname", "cat")


def test_b3_no_ps_needed(path, owners, stock_script, tmp_path):
    live = owners()
    bin_dir = tmp_path / "no-ps-bin"
    bin_dir.mkdir()
    for tool in RESTRICTED_TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)
    ps_log = tmp_path / "ps-was-called"
    (bin_dir / "ps").write_text(f'#!/bin/sh\necho "$@" >> {ps_log}\nexit 1\n')  # a broken ps, logging
    (bin_dir / "ps").chmod(0o755)
    content = f"0 {live.pid}\n1 {dead_pid()}\n"

    path.write_text(content)  # the stock script, without a working ps, takes the live owner's GPU
    out = Stock(stock_script, tmp_path, path, 2, path_env=str(bin_dir)).run(1)
    assert out.stdout.strip() == "0"
    assert ps_log.exists()
    ps_log.unlink()

    path.write_text(content)
    code = f"from flink_gpu import coordination; print(coordination.claim(1, ['0', '1'], path={str(path)!r}).taken)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PATH": str(bin_dir), "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['1']"
    assert not ps_log.exists()
    assert live_holders(path)["0"] == live.pid


def test_b4_pid_reuse_detected_by_start_time(path, owners):
    live = owners()
    start = proc_start_time(live.pid)
    path.write_text(f"0 {live.pid}\t{start + 1}\n")  # same pid, another process's start time
    (entry,) = coordination.snapshot(path).entries
    assert entry.pid == live.pid and entry.start_time == start + 1 and not entry.alive
    assert coordination.snapshot(path).stale == (entry,)
    assert coordination.claim(1, ["0"], path=path).taken == ["0"]

    path.write_text(f"0 {live.pid}\t{start}\n1 {live.pid}\n")  # right start time, or none (stock line)
    assert [e.alive for e in coordination.snapshot(path).entries] == [True, True]
    with pytest.raises(FlinkException):
        coordination.claim(1, ["0", "1"], path=path)


def test_b5_unparsable_lines_kept_reported_never_reclaimed(path, caplog):
    text = "2 not-a-pid\n\n0 12x\ngarbage\n"
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="flink_gpu.coordination"):
        with pytest.raises(FlinkException, match="blocked by lines that cannot be parsed"):
            coordination.claim(2, gpus(3), path=path)
        assert path.read_text() == text
        assert coordination.claim(1, gpus(3), path=path).taken == ["1"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Line 4" in w and str(path) in w and "'garbage'" in w for w in warnings)
    snap = coordination.snapshot(path)
    assert [(u.line_number, u.text) for u in snap.unparsable] == [(1, "2 not-a-pid"), (3, "0 12x"), (4, "garbage")]
    assert [e.index for e in snap.entries] == ["1"]
    assert len(coordination.clean_stale(path).unparsable) == 3
    assert path.read_text().startswith(text)


def test_b10_lock_wait_is_bounded(path):
    path.write_text("")
    # -o: the command does not inherit the lock, so killing flock(1) releases it
    holder = subprocess.Popen(
        ["flock", "-o", str(path), "-c", "echo locked; exec sleep 600"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            coordination.claim(1, gpus(2), path=path, timeout=0.3)
        elapsed = time.monotonic() - t0
        assert 0.29 <= elapsed < 3
        message = str(info.value)
        assert str(path) in message and "Timed out after 0.3 s" in message
        assert f"held by pid {holder.pid}" in message
        with pytest.raises(TimeoutError):
            coordination.snapshot(path, timeout=0)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert coordination.claim(1, gpus(2), path=path, timeout=0).taken == ["0"]


# ---- unusable files -----------------------------------------------------------------------------------


def test_symlink_refused_and_target_untouched(tmp_path):
    target = tmp_path / "precious"
    target.write_text("precious\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    for call in (
        lambda: coordination.claim(1, ["0"], path=link),
        lambda: coordination.release(path=link),
        lambda: coordination.snapshot(link),
        lambda: coordination.clean_stale(link),
    ):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.ELOOP and not str(info.value).endswith("'")  # the sentence names it
        assert "symbolic link" in str(info.value)
    assert target.read_text() == "precious\n"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OSError):
        coordination.claim(1, ["0"], path=dangling)
    assert not (tmp_path / "nowhere").exists()


def test_non_regular_files_refused(tmp_path):
    directory = tmp_path / "dir"
    directory.mkdir()
    with pytest.raises(IsADirectoryError, match="a directory"):
        coordination.claim(1, ["0"], path=directory)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO") as info:  # refused, without blocking on the open
        coordination.claim(1, ["0"], path=fifo)
    assert info.value.errno == errno.EINVAL and str(fifo) in str(info.value)
    with pytest.raises(OSError, match="character device"):
        coordination.snapshot("/dev/null")


def test_hard_linked_file_refused(tmp_path):
    other = tmp_path / "someone-elses"
    other.write_text("data\n")
    path = tmp_path / "coordination"
    os.link(other, path)
    with pytest.raises(OSError, match="2 hard links") as info:
        coordination.claim(1, ["0"], path=path)
    assert info.value.errno == errno.EMLINK
    assert other.read_text() == "data\n"


def test_unusable_path_names_path_and_errno_text(tmp_path):
    path = tmp_path / "no-such-dir" / "coordination"
    with pytest.raises(FileNotFoundError) as info:
        coordination.claim(1, ["0"], path=path)
    assert str(path) in str(info.value) and os.strerror(errno.ENOENT) in str(info.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_another_users_file_is_readable_not_claimable():
    """The file is created 0644: another user's worker can look but not claim (docs/design.md §5.2, permissions)."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="flink-gpu-shared-"))  # pytest's tmp_path is private (0700)
    shared.chmod(0o755)
    path = shared / "coordination"
    coordination.claim(1, gpus(2), path=path)
    code = textwrap.dedent(f"""\
        import os
        from flink_gpu import coordination  # before dropping root: the interpreter may live in /root
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        print(len(coordination.snapshot({str(path)!r}).entries))
        try:
            coordination.claim(1, ['0', '1'], path={str(path)!r})
        except PermissionError as e:
            print(e)
        """)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONPATH": SRC},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(shared)
    assert proc.returncode == 0, proc.stderr
    count, message = proc.stdout.splitlines()
    assert count == "1"
    assert str(path) in message and "owned by uid 0, mode 0644" in message and "group write" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_lease_files_are_readable_only_by_the_workers():
    """Whoever can open a lease file can read-lock a dying holder's byte, which other namespaces then read as
    held: a lease file gets the coordination file's bits for its owner and group only, and one of an older
    version, readable by all, is narrowed by the next claim that opens it."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="flink-gpu-shared-"))  # pytest's tmp_path is private (0700)
    shared.chmod(0o755)
    try:
        path, older = shared / "coordination", shared / "older"
        coordination.claim(1, gpus(2), path=path)
        coordination.release(path=path)
        assert (path.stat().st_mode & 0o777, Path(f"{path}.lease").stat().st_mode & 0o777) == (0o644, 0o640)
        refused = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, sys; os.setgroups([]); os.setgid(65534); os.setuid(65534); open(sys.argv[1], 'rb')",
                f"{path}.lease",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "PermissionError" in refused.stderr, refused.stderr
        Path(f"{older}.lease").touch(mode=0o644)
        os.chmod(f"{older}.lease", 0o644)
        run_python(f"from flink_gpu import coordination; coordination.claim(1, ['0'], path={str(older)!r})")
        assert Path(f"{older}.lease").stat().st_mode & 0o777 == 0o640
    finally:
        shutil.rmtree(shared)


# ---- the lease file beside it (docs/design.md §5.2, §9.4) --------------------------------------------


@pytest.mark.parametrize("cause", ["full", "flock held"])
def test_a_claim_whose_lease_file_gets_no_token_warns_and_says_so_in_its_lines(tmp_path, caplog, cause):
    """A lease on a lease file without a token proves nothing once that file is deleted and created again: the
    line says `lf=none` (never the bare `lease=N` of an older version) and the claim warns, naming why."""
    with small_tmpfs(tmp_path / "small") as small:
        path = small / "c"
        path.write_text("\n")  # its page: a line fits on the full filesystem
        with tokenless_lease_file(path, cause), caplog.at_level(logging.WARNING, logger="flink_gpu.coordination"):
            assert coordination.claim(1, gpus(2), path=path).taken == ["0"]
        try:
            me = os.getpid()
            assert path.read_text() == f"\n0 {me}\t{proc_start_time(me)}\tns={own_ns()}\tlease=0\tlf=none\n"
            (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            why = os.strerror(errno.ENOSPC) if cause == "full" else "flock"
            assert f"{path}.lease" in warning and why in warning and "cannot tell when" in warning, warning
            (entry,) = coordination.snapshot(path).entries
            assert (entry.lease, entry.lease_file, entry.state) == (0, None, "live") and lease_held(path, 0)
        finally:
            coordination.release(path=path)


def test_a_holder_whose_lease_file_had_no_token_records_it_when_it_claims_again(tmp_path):
    path = tmp_path / "c"
    with tokenless_lease_file(path, "flock held"):
        coordination.claim(1, gpus(2), path=path)
    assert "\tlf=none" in path.read_text()
    assert coordination.claim(2, gpus(2), path=path).taken == ["0", "1"]
    try:
        assert [(e.lease, e.lease_file) for e in coordination.snapshot(path).entries] == [(0, lease_token(path))] * 2
    finally:
        coordination.release(path=path)


CLAIMER = textwrap.dedent("""\
    import json, sys
    from flink_gpu import coordination
    path = sys.argv[1]
    print("[]", flush=True)
    for line in sys.stdin:  # "claim <index>" or "release"; it ends when the test closes its stdin
        op, *index = line.split()
        got = coordination.claim(1, index, path=path).taken if op == "claim" else coordination.release(path=path)
        print(json.dumps(got), flush=True)
    """)


class Claimer(Owner):
    """A process that claims and releases for itself when the test says so, keeping its lease between calls."""

    def __init__(self, path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(path)],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.ask(None) == []

    def ask(self, command):
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"claimer {self.pid} died"
        return json.loads(line)

    def exit(self):
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0


def test_a_holder_moves_only_its_own_lines_to_its_new_lease_never_another_holders_without_a_token(path):
    """A and B each leased byte 0 of a lease file without a token (its flock held by another process): both
    lines say `lease=0 lf=none`. When A's lease file is gone, A moves its own lines to its new lease, never
    B's: B's GPU stays taken after A ends."""
    a = Claimer(path)
    b = None
    try:
        with tokenless_lease_file(path, "flock held"):
            assert a.ask("claim 0") == ["0"]
        assert a.ask("release") == ["0"]  # its lease stays, idle, on byte 0 of that lease file
        Path(f"{path}.lease").unlink()
        b = Claimer(path)
        with tokenless_lease_file(path, "flock held"):
            assert b.ask("claim 1") == ["1"]
        b_line = f"1 {b.pid}\t{proc_start_time(b.pid)}\tns={own_ns()}\tlease=0\tlf=none\n"
        assert b_line in path.read_text()
        assert a.ask("claim 2") == ["2"]  # on a new lease: its old lease file is gone
        assert b_line in path.read_text()
        a.exit()
        with pytest.raises(flink_gpu.NotEnoughGpusError):
            coordination.claim(1, ["1"], path=path)
        assert b_line in path.read_text() and b.proc.poll() is None
    finally:
        for claimer in (a, b):
            if claimer is not None and claimer.proc.poll() is None:
                claimer.kill()


def test_a_holder_whose_lease_file_gets_its_token_records_it_in_its_own_lines_only(path, owners):
    """A leased byte 0 of a lease file without a token; B's line names byte 0 of an older lease file, also
    without a token (`lf=none`: B leased there before it was deleted). Once A's lease file has its token, A's
    lines record it, B's stay as they are: B's GPU stays taken after A ends."""
    a = Claimer(path)
    try:
        with tokenless_lease_file(path, "flock held"):
            assert a.ask("claim 0") == ["0"]
        b = owners()
        b_line = f"1 {b.pid}\t{proc_start_time(b.pid)}\tns={own_ns()}\tlease=0\tlf=none\n"
        with path.open("a") as f:
            f.write(b_line)
        assert a.ask("claim 2") == ["2"]  # its lease file has a token now
        a_lease = our_lease(path, 0)
        assert path.read_text() == f"0 {a.pid}\t{proc_start_time(a.pid)}\tns={own_ns()}{a_lease}\n" + b_line + (
            f"2 {a.pid}\t{proc_start_time(a.pid)}\tns={own_ns()}{a_lease}\n"
        )
        a.exit()
        with pytest.raises(flink_gpu.NotEnoughGpusError):
            coordination.claim(1, ["1"], path=path)
        assert b_line in path.read_text()
    finally:
        if a.proc.poll() is None:
            a.kill()


@pytest.mark.parametrize("version", ["this", "before the header"])
def test_a_lease_file_is_never_used_as_a_coordination_file(tmp_path, version):
    path = tmp_path / "X"
    coordination.claim(1, gpus(1), path=path)
    lease = Path(f"{path}.lease")
    if version == "before the header":  # its token line alone, for its own inode
        lease.write_text(f"{lease_token(path)} {lease.stat().st_ino}\n")
    before = lease.read_bytes()
    try:
        for call in (
            lambda: coordination.claim(1, gpus(1), path=lease),
            lambda: coordination.release(path=lease),
            lambda: coordination.snapshot(lease),
            lambda: coordination.clean_stale(lease),
        ):
            with pytest.raises(OSError) as info:
                call()
            message = str(info.value)
            assert f"{lease} " in message and f"coordination file {path} " in message, message
            assert "Choose another coordination file" in message, message
        assert lease.read_bytes() == before
    finally:
        coordination.release(path=path)


def test_a_coordination_file_is_never_used_as_a_lease_file(tmp_path, caplog):
    path = tmp_path / "X"
    other = Path(f"{path}.lease")  # another coordination file, named like X's lease file
    coordination.claim(1, gpus(1), owner=os.getppid(), path=other)  # no lease of ours in it
    before = other.read_bytes()
    with caplog.at_level(logging.WARNING, logger="flink_gpu.coordination"):
        assert coordination.claim(1, gpus(1), path=path).taken == ["0"]
    try:
        assert other.read_bytes() == before
        assert "\tlease=" not in path.read_text()
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert f"{other} as the lease file of the coordination file {path}" in warning, warning
        assert "not a lease file" in warning, warning
    finally:
        coordination.release(path=path)


def test_a_lease_file_of_the_version_before_the_header_keeps_its_token_and_gets_the_header(tmp_path):
    """Its holders' lines record its token: upgraded in place, their leases still prove what they did."""
    path = tmp_path / "X"
    lease = Path(f"{path}.lease")
    lease.touch()
    token = "0123456789abcdef"
    lease.write_text(f"{token} {lease.stat().st_ino}\n")
    coordination.claim(1, gpus(1), path=path)
    try:
        assert lease.read_text() == f"{token} {lease.stat().st_ino}\nflink-gpu lease file\n"
        assert path.read_text().endswith(f"\tlease=0\tlf={token}\n")
    finally:
        coordination.release(path=path)


def test_a_copy_of_a_lease_file_of_the_version_before_the_header_gets_a_new_token_and_the_header(tmp_path, caplog):
    """Copied to another inode (an image layer, a restored backup), its token names the original's inode: the
    copy has none of its locks, so the lines' leases on it prove nothing, and it gets a new token; never
    refused as no lease file, which would leave every claim without a lease."""
    path = tmp_path / "X"
    lease = Path(f"{path}.lease")
    lease.touch()
    old = "0123456789abcdef"
    lease.write_text(f"{old} {lease.stat().st_ino + 1}\n")
    with caplog.at_level(logging.WARNING, logger="flink_gpu.coordination"):
        assert coordination.claim(1, gpus(1), path=path).taken == ["0"]
    try:
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        token = lease_token(path)
        assert token != old and lease.read_text() == f"{token} {lease.stat().st_ino}\nflink-gpu lease file\n"
        assert path.read_text().endswith(f"\tlease=0\tlf={token}\n")
    finally:
        coordination.release(path=path)


# ---- with Flink's stock script, real processes -------------------------------------------------------


def test_stock_and_ours_concurrently_never_share_a_gpu(path, stock_script, tmp_path):
    stock = Stock(stock_script, tmp_path, path, 8)
    for _ in range(3):
        path.write_text("")
        started = [stock.start_owner(2) for _ in range(3)] + [OurOwner(path, 8, 1) for _ in range(2)]
        extra = [stock.start_owner(1), OurOwner(path, 8, 1)]  # demand 10 for 8 GPUs
        random.shuffle(started)
        try:
            got = {}
            for owner in started + extra:
                if isinstance(owner, StockOwner):
                    indices, output = owner.result()
                    assert indices is not None or output == ["Could not get enough GPU resources."]
                else:
                    indices, error = owner.result()
                    assert indices is not None or error.startswith("Could not get enough GPU resources.")
                if indices:
                    got[owner.pid] = indices
            taken = [i for indices in got.values() for i in indices]
            assert len(taken) == len(set(taken)) == 8, got  # everything handed out, nothing twice
            assert live_holders(path) == {i: pid for pid, indices in got.items() for i in indices}
        finally:
            for owner in started + extra:
                owner.kill()


def test_stock_and_ours_interleaved_with_reclaims(path, stock_script, tmp_path):
    stock = Stock(stock_script, tmp_path, path, 6)
    owners = []

    def claim_by(kind, amount):
        owner = stock.start_owner(amount) if kind == "stock" else OurOwner(path, 6, amount)
        owners.append(owner)
        result = owner.result()
        return owner, result[0]

    try:
        a, got_a = claim_by("stock", 2)
        b, got_b = claim_by("ours", 2)
        c, got_c = claim_by("stock", 2)
        assert (got_a, got_b, got_c) == (["0", "1"], ["2", "3"], ["4", "5"])
        a.kill()
        b.kill()
        d, got_d = claim_by("ours", 3)  # reclaims the lowest dead ones
        assert got_d == ["0", "1", "2"]
        inode = path.stat().st_ino
        e, got_e = claim_by("stock", 1)  # reclaims 3 with `sed -i`: a new file
        assert got_e == ["3"]
        assert path.stat().st_ino != inode
        assert live_holders(path) == {"0": d.pid, "1": d.pid, "2": d.pid, "3": e.pid, "4": c.pid, "5": c.pid}
        f, got_f = claim_by("ours", 1)
        assert got_f is None
        c.kill()
        g, got_g = claim_by("stock", 2)
        assert got_g == ["4", "5"]
        coordination.release(d.pid, path=path)  # d lets go: free again, for the stock script too
        h, got_h = claim_by("stock", 3)
        assert got_h == ["0", "1", "2"]
        assert live_holders(path) == {"0": h.pid, "1": h.pid, "2": h.pid, "3": e.pid, "4": g.pid, "5": g.pid}
    finally:
        for owner in owners:
            owner.kill()


# ---- stress: real processes, SIGKILL ------------------------------------------------------------------

STRESS_WORKER = textwrap.dedent("""\
    import fcntl, json, os, random, sys, time
    from flink_gpu import coordination
    from flink_gpu.errors import FlinkException
    path, marks, log, gpus, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    indices = [str(i) for i in range(gpus)]
    claims = doubles = short = 0
    with open(log, "a") as out:
        out.write("started\\n")
        out.flush()
        while rounds < 0 or claims < rounds:  # a victim (rounds -1) claims until it is killed
            amount = random.randint(1, 3)
            try:
                got = coordination.claim(amount, indices, path=path, timeout=30).taken
            except FlinkException:
                short += 1
                time.sleep(0.001)
                continue
            out.write(f"claim {got}\\n")
            out.flush()
            held = []
            for index in got:  # the kernel's view: a second live holder of this GPU's marker lock is a double
                fd = os.open(os.path.join(marks, index), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    doubles += 1
                    out.write(f"DOUBLE {index}\\n")
                held.append(fd)
            claims += 1
            time.sleep(random.uniform(0, 0.004))
            for fd in held:
                os.close(fd)
            assert sorted(coordination.release(path=path, timeout=30)) == sorted(got)
        out.write(json.dumps({"claims": claims, "doubles": doubles, "short": short}) + "\\n")
    """)


def test_stress_32_processes_8_gpus_with_sigkill(path, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    # A count of claims per survivor, not a time: the test asserts the same work however loaded the machine.
    rounds = 12
    env = {**os.environ, "PYTHONPATH": SRC}
    victim_numbers = set(random.sample(range(32), 8))
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                STRESS_WORKER,
                str(path),
                str(marks),
                str(logs / f"{n}.log"),
                "8",
                str(-1 if n in victim_numbers else rounds),
            ],
            env=env,
        )
        for n in range(32)
    ]
    victims = [workers[n] for n in sorted(victim_numbers)]

    def victims_started():
        assert all(v.poll() is None for v in victims), "a victim ended before it was killed"
        return all((logs / f"{n}.log").exists() and (logs / f"{n}.log").read_text() for n in victim_numbers)

    wait_until(victims_started, "the victims started", 120)
    for victim in victims:  # at random moments: holding GPUs, holding the lock, or between claims
        time.sleep(random.uniform(0, 0.4))
        victim.send_signal(signal.SIGKILL)
    for w in workers:
        w.wait(timeout=60)
    survivors = [w for w in workers if w not in victims]
    assert [w.returncode for w in survivors] == [0] * len(survivors)
    assert all(v.returncode == -signal.SIGKILL for v in victims)
    claims = doubles = 0
    for log in logs.iterdir():
        text = log.read_text()
        assert "DOUBLE" not in text, f"{log.name}: {text}"
        if workers[int(log.stem)] in survivors:
            summary = json.loads(text.splitlines()[-1])
            claims += summary["claims"]
            doubles += summary["doubles"]
    assert doubles == 0
    assert claims == rounds * len(survivors)
    # every GPU is claimable again: the victims' lines are reclaimed
    assert coordination.claim(8, gpus(8), path=path).taken == gpus(8)
    assert coordination.release(path=path) == gpus(8)


# ---- property: whatever the file holds, a claim keeps what is not its own to change ----------------------


@pytest.fixture(scope="module")
def module_owners():
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    yield [p.pid for p in procs] + [dead_pid()]
    for p in procs:
        p.kill()
        p.wait()


def _line(kind, index, owner_pids):
    if kind == "live":
        return f"{index} {owner_pids[0]}"
    if kind == "live2":
        return f"{index} {owner_pids[1]}\t{proc_start_time(owner_pids[1])}"
    if kind == "dead":
        return f"{index} {owner_pids[2]}"
    if kind == "reused":
        return f"{index} {owner_pids[0]}\t{proc_start_time(owner_pids[0]) + 7}"
    if kind == "bad":
        return f"{index} oops"
    return "   "


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.tuples(st.sampled_from(["live", "live2", "dead", "reused", "bad", "blank"]), st.integers(0, 7)), max_size=12
    ),
    count=st.integers(0, 8),
    amount=st.integers(1, 9),
    final_newline=st.booleans(),
)
def test_claim_changes_only_what_it_may(tmp_path, module_owners, lines, count, amount, final_newline):
    path = tmp_path / "prop"
    original = [_line(kind, index, module_owners) for kind, index in lines]
    text = "\n".join(original) + ("\n" if final_newline and original else "")
    path.write_text(text)
    before = {(e.index, e.pid, e.alive) for e in coordination.snapshot(path).entries}
    live_taken = {index for index, pid, alive in before if alive}
    blocked = {str(index) for kind, index in lines if kind == "bad"}
    try:
        got = coordination.claim(amount, gpus(count), path=path).taken
    except FlinkException:
        assert path.read_text() == text  # all or nothing
        return
    after = path.read_text().split("\n")
    assert after[-1] == ""  # always newline-terminated
    assert len(got) == amount and len(set(got)) == amount
    assert not set(got) & live_taken and not set(got) & blocked
    # every original line is still there, in order, except the dead owners' lines of reclaimed GPUs
    kept = iter(after)
    for line, (kind, index) in zip(original, lines, strict=True):
        if str(index) in got and kind in ("dead", "reused"):
            continue
        assert any(line == candidate for candidate in kept), (line, after)
    holders = coordination.snapshot(path).holders()  # the input may hold conflicts; ours must have none
    assert all(holders[index] == (os.getpid(),) for index in got)


# -- amounts the core cannot count, and amounts that are no int -------------------------------------


@pytest.mark.parametrize("amount", [2**64, 2**64 + 3, 10**20, 2**200])
def test_an_amount_beyond_what_the_core_counts_is_not_enough_gpus(path, amount):
    """Decided before the native call, whose size_t cannot hold it (was a raw OverflowError)."""
    for attempt in (
        lambda: coordination.claim(amount, gpus(3), path=path),
        lambda: coordination.claimed(amount, gpus(3), path=path).__enter__(),
    ):
        with pytest.raises(FlinkException) as info:
            attempt()
        assert str(info.value) == (
            f"Could not get enough GPU resources. Requested {amount}, the host "
            f"has 3 GPUs (0, 1, 2). Coordination file: {path}."
        )
    assert not path.exists()  # nothing to claim, nothing created


def test_not_enough_counts_the_gpus_left_out_among_the_hosts_and_names_each_with_why(path, owners):
    a = owners()
    left_out = [("1", "unknown: nvmlDeviceGetFieldValues did not return within 1 s"), (2, "busy: foreign process 7")]
    # never claimed: the left-out GPUs are no candidates
    assert coordination.claim(1, ["0", "3"], path=path, owner=a.pid, left_out=left_out).taken == ["0"]
    with pytest.raises(flink_gpu.NotEnoughGpusError) as info:
        coordination.claim(2, ["0", "3"], path=path, left_out=left_out)
    assert str(info.value) == (
        "Could not get enough GPU resources. Requested 2, the host has 4 GPUs (0, 1, 2, 3), of which GPU 1 is "
        "unknown (nvmlDeviceGetFieldValues did not return within 1 s), GPU 2 is left out (busy: foreign process "
        f"7); pid {a.pid} holds 0. Coordination file: {path}."
    )
    # more than the core counts: the same sentence, without holders (the file is not read)
    with pytest.raises(flink_gpu.NotEnoughGpusError) as info:
        coordination.claim(2**64, ["0", "3"], path=path, left_out=left_out)
    assert str(info.value).startswith(
        "Could not get enough GPU resources. Requested 18446744073709551616, the host has 4 GPUs (0, 1, 2, 3), of "
        "which GPU 1 is unknown ("
    )
    assert str(info.value).endswith(f"(busy: foreign process 7). Coordination file: {path}.")
    with pytest.raises(TypeError, match="why a GPU is left out must be a str"):
        coordination.claim(2, ["0"], path=path, left_out=[("1", None)])
    with pytest.raises(ValueError, match="Invalid GPU index '1 2'"):
        coordination.claim(2, ["0"], path=path, left_out=[("1 2", "unknown: x")])


def test_the_largest_amount_the_core_counts_is_its_own_not_enough_error(path):
    with pytest.raises(
        FlinkException,
        match=rf"^Could not get enough GPU resources. Requested {2**64 - 1}, "
        r"the host has 1 GPU \(0\)\. Coordination file: ",
    ):
        coordination.claim(2**64 - 1, ["0"], path=path)


@pytest.mark.parametrize(
    "amount, shown",
    [
        (True, "True (bool)"),
        (False, "False (bool)"),
        (2.0, "2.0 (float)"),
        ("2", "'2' (str)"),
        (None, "None (NoneType)"),
    ],
)
def test_an_amount_that_is_no_int_names_the_amount_and_the_value(path, amount, shown):
    with pytest.raises(TypeError) as info:
        coordination.claim(amount, gpus(2), path=path)
    assert str(info.value) == f"The amount of GPUs must be a whole number (an int), got {shown}."
    assert not path.exists()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    amount=st.one_of(
        st.integers(min_value=2**64),
        st.integers(max_value=-1),
        st.booleans(),
        st.floats(allow_nan=True),
        st.text(max_size=30),
    )
)
def test_every_bad_amount_gives_the_documented_error_naming_it(tmp_path, amount):
    path = tmp_path / "bad-amounts"
    with pytest.raises((FlinkException, ValueError, TypeError)) as info:
        coordination.claim(amount, gpus(2), path=path)
    error = info.value
    if isinstance(amount, bool) or not isinstance(amount, int):
        assert type(error) is TypeError and "The amount of GPUs" in str(error) and repr(amount) in str(error)
    elif amount < 0:
        assert type(error) is ValueError and f"must not be negative, got {amount}." in str(error)
    else:
        assert isinstance(error, FlinkException) and f"Requested {amount}," in str(error)
    assert not path.exists()


# ---- MIG units next to whole GPUs (docs/design.md §5.2, §9.2) ---------------------------------------------


def test_a_unit_line_starts_with_its_gpu_and_names_the_unit_in_mig(path):
    assert coordination.claim(1, ["0:2"], path=path).taken == ["0:2"]
    line = path.read_text()
    assert line.startswith(f"0 {os.getpid()}\t") and line.endswith("\tmig=0:2\n")
    [entry] = coordination.snapshot(path).entries
    assert entry.index == "0:2" and entry.alive
    assert coordination.release(path=path, indices=["0:2"]) == ["0:2"]
    assert path.read_text() == ""


def test_whole_gpu_and_unit_holders_exclude_each_other_in_every_direction(path, owners):
    whole, unit, other = owners(), owners(), owners()
    candidates = ["0:1", "0:2", "1"]
    assert coordination.claim(1, ["0"], path=path, owner=whole.pid).taken == ["0"]
    assert coordination.claim(1, candidates, path=path, owner=unit.pid).taken == ["1"]  # no unit of a held GPU
    coordination.release(whole.pid, path=path)
    coordination.release(unit.pid, path=path)
    assert coordination.claim(1, candidates, path=path, owner=unit.pid).taken == ["0:1"]
    with pytest.raises(FlinkException, match=f"pid {unit.pid} holds 0:1"):
        coordination.claim(1, ["0"], path=path, owner=whole.pid)  # no whole GPU with a unit held
    # two units of one GPU do not exclude each other; one unit has one holder
    assert coordination.claim(1, ["0:1", "0:2"], path=path, owner=other.pid).taken == ["0:2"]
    with pytest.raises(FlinkException):
        coordination.claim(1, ["0:1"], path=path, owner=whole.pid)
    assert live_holders(path) == {"0:1": unit.pid, "0:2": other.pid}


def test_a_stock_scripts_line_blocks_every_unit_of_its_gpu(path, owners):
    stock_owner = owners()
    path.write_text(f"0 {stock_owner.pid}\n")
    with pytest.raises(FlinkException):
        coordination.claim(1, ["0:0", "0:2"], path=path)
    assert coordination.claim(1, ["0:0", "1:0"], path=path).taken == ["1:0"]


def test_dead_lines_of_the_other_kind_are_reclaimed(path):
    path.write_text(f"0 {dead_pid()}\n")
    result = coordination.claim(1, ["0:2"], path=path)
    assert result.taken == ["0:2"] and result.reclaimed == ["0:2"]
    assert path.read_text().startswith(f"0 {os.getpid()}\t")  # the dead whole-GPU line is gone
    coordination.release(path=path)
    path.write_text(f"0 {dead_pid()}\t1\tmig=0:1\n0 {dead_pid()}\t1\tmig=0:3\n")
    assert coordination.claim(1, ["0"], path=path).taken == ["0"]
    assert [e.index for e in coordination.snapshot(path).entries] == ["0"]


def test_a_mig_field_of_another_gpu_or_not_a_unit_makes_the_line_unparsable(path):
    path.write_text(f"1 {os.getpid()}\t5\tmig=0:2\n2 {os.getpid()}\t5\tmig=x\n")
    snap = coordination.snapshot(path)
    assert snap.entries == () or list(snap.entries) == []
    assert len(snap.unparsable) == 2
    with pytest.raises(FlinkException, match="blocked by lines that cannot be parsed"):
        coordination.claim(1, ["1:0"], path=path)


# The real stock script on a file with unit lines: it knows only GPUs (`grep -c "^$i "`), takes the
# owner with `awk '{print $2}'` and deletes with the unanchored `sed -i "/$i /d"`.


def test_stock_script_never_gets_a_gpu_while_a_live_worker_holds_a_unit(path, owners, stock_script, tmp_path):
    holder = owners()
    assert coordination.claim(1, ["0:2"], path=path, owner=holder.pid).taken == ["0:2"]
    ours = path.read_text()
    stock = Stock(stock_script, tmp_path, path, 2)
    out = stock.run(1)
    assert out.stdout.strip() == "1"  # one line for GPU 0, its owner alive: not reclaimed
    assert ours in path.read_text()
    out = stock.run(1)  # this test process already holds 1 through the script; asks again
    assert "Could not get enough GPU resources." in out.stdout
    assert ours in path.read_text()


def test_stock_script_reclaims_nothing_with_two_unit_lines_one_of_them_dead(path, owners, stock_script, tmp_path):
    holder = owners()
    path.write_text(f"0 {dead_pid()}\t1\tmig=0:1\n")
    assert coordination.claim(1, ["0:2"], path=path, owner=holder.pid).taken == ["0:2"]
    before = path.read_text()
    assert before.count("\n") == 2
    out = Stock(stock_script, tmp_path, path, 1).run(1)
    # `[ -n $owner ]` on two pids fails: GPU 0 is not reclaimed, nothing is deleted
    assert "Could not get enough GPU resources." in out.stdout
    assert path.read_text() == before
    assert live_holders(path) == {"0:2": holder.pid}


def test_stock_script_reclaims_a_gpu_whose_only_unit_holder_is_dead(path, stock_script, tmp_path):
    path.write_text(f"0 {dead_pid()}\t1\tmig=0:1\n")
    out = Stock(stock_script, tmp_path, path, 1).run(1)
    assert out.stdout.strip() == "0"
    assert path.read_text() == f"0 {os.getpid()}\n"
    with pytest.raises(FlinkException):  # the stock script's whole-GPU line blocks the units
        coordination.claim(1, ["0:1", "0:2"], path=path, owner=os.getppid())


def test_a_unit_claim_is_blocked_by_a_stock_script_holder(path, stock_script, tmp_path, owners):
    stock = Stock(stock_script, tmp_path, path, 2)
    owner = stock.start_owner(1)
    try:
        assert owner.result()[0] == ["0"]
        assert coordination.claim(1, ["0:0", "0:1", "1:0"], path=path).taken == ["1:0"]
    finally:
        owner.kill()


def test_a_line_naming_a_unit_first_holds_that_unit_of_its_gpu(path, owners):
    holder = owners()
    path.write_text(f"0:2 {holder.pid}\n")
    assert [e.index for e in coordination.snapshot(path).entries] == ["0:2"]
    with pytest.raises(FlinkException):
        coordination.claim(1, ["0"], path=path)
    assert coordination.claim(1, ["0:2", "0:3"], path=path).taken == ["0:3"]


def another_process_claims_gpu_0(path) -> str:
    """What another process gets claiming GPU 0 of ``path`` for itself: "['0']", or "refused"."""
    return run_python(f"""
        from flink_gpu import coordination, FlinkException
        try:
            print(coordination.claim(1, ["0"], path={str(path)!r}).taken)
        except FlinkException:
            print("refused")
        """).stdout.strip()


def test_a_path_that_comes_to_name_another_file_gets_a_lease_there_too(tmp_path):
    """A directory symlink retargeted between two claims of one process (a relative path after chdir()
    is the same): the second claim's line in the file the path names now must carry a lease held on
    that file's lease file, else another claimer judges it released and takes the GPU."""
    old, new, link = tmp_path / "old", tmp_path / "new", tmp_path / "current"
    old.mkdir()
    new.mkdir()
    new_file = new / "coordination"
    coordination.claim(1, ["0"], path=new_file)
    coordination.release(path=new_file)  # a holder came and went there: its lease file stays
    link.symlink_to(old)
    spelled = link / "coordination"
    coordination.claim(1, ["0"], path=spelled)
    link.unlink()
    link.symlink_to(new)
    try:
        assert coordination.claim(1, ["0"], path=spelled).taken == ["0"]
        assert another_process_claims_gpu_0(new_file) == "refused", new_file.read_text()
        assert lease_held(old / "coordination", 0)  # the old one stays
    finally:
        coordination.release(path=spelled)
        coordination.release(path=old / "coordination")


def test_releasing_at_a_path_that_names_another_file_keeps_the_old_files_lease(tmp_path):
    """A claim at a symlinked path, the link retargeted, then release() at that path: nothing of ours is
    in the file the path names now, so nothing is released, and the line still in the old file must
    keep its lease (the process lives and still holds that GPU), else another claimer takes it."""
    old, new, link = tmp_path / "old", tmp_path / "new", tmp_path / "current"
    old.mkdir()
    new.mkdir()
    link.symlink_to(old)
    spelled = link / "coordination"
    old_file = old / "coordination"
    coordination.claim(1, ["0"], path=spelled)
    link.unlink()
    link.symlink_to(new)
    try:
        assert coordination.release(path=spelled) == []
        (entry,) = coordination.snapshot(old_file).entries
        assert lease_held(old_file, entry.lease), old_file.read_text()
        assert another_process_claims_gpu_0(old_file) == "refused", old_file.read_text()
    finally:
        coordination.release(path=old_file)


def test_claims_after_a_stock_sed_replaced_the_file_keep_one_lease(path):
    """The stock script's ``sed -i`` replaces the file (a new inode at the same path, the lease file
    unchanged). The process's next claims take a lease for the new file once, then keep it: every later
    claim and release must not open another lease descriptor and lock another byte each time."""
    coordination.claim(1, ["0"], path=path)
    path = str(path)
    replaced = path + ".sed"
    shutil.copyfile(path, replaced)
    os.replace(replaced, path)  # what `sed -i` does
    lease_file = os.path.realpath(path + ".lease")

    def lease_fds():
        return sum(1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == lease_file)

    try:
        leases = set()
        for _ in range(4):
            coordination.claim(1, ["1"], path=path)
            leases.add(next(e.lease for e in coordination.snapshot(path).entries if e.index == "1"))
            coordination.release(path=path, indices=["1"])
        assert lease_fds() <= 2, f"{lease_fds()} descriptors of {lease_file} open; leases used: {sorted(leases)}"
        assert len(leases) == 1, f"each claim locked another byte of the lease file: {sorted(leases)}"
    finally:
        coordination.release(path=path)


READ_ONLY_CLEAN = textwrap.dedent("""\
    import json, sys
    from flink_gpu import coordination
    path, foreign = sys.argv[1], sys.argv[2] == "1"
    try:
        result = coordination.clean_stale(path, other_namespaces=foreign)
        print(json.dumps({"removed": len(result.removed), "unparsable": [u.text for u in result.unparsable]}))
    except OSError as error:
        print(json.dumps({"error": str(error)}))
    """)


@pytest.mark.parametrize(
    "lines, foreign, expected",
    [
        ("0 1\nbad\n", False, {"removed": 0, "unparsable": ["bad"]}),  # pid 1 lives: nothing to remove
        (f"0 {dead_pid()}\n", False, "error"),  # a dead owner's line, which cannot be removed: said so
        ("0 1\tns=1\n", True, "error"),  # another namespace's, to be removed with --foreign-namespaces
    ],
)
def test_cleaning_a_read_only_file_fails_only_when_there_is_something_to_remove(tmp_path, lines, foreign, expected):
    """A file on a read-only mount (its own mount namespace, so the host sees nothing of it)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root, for a read-only mount")
    mount = tmp_path / "ro"
    mount.mkdir()
    script = tmp_path / "clean.py"
    script.write_text(READ_ONLY_CLEAN)
    shell = (
        f'mount -t tmpfs tmpfs {mount} && printf "$0" > {mount}/c && mount -o remount,ro {mount} && '
        f'exec "$1" {script} {mount}/c "$2"'
    )
    env = {**os.environ, "PYTHONPATH": str(Path(flink_gpu.__file__).resolve().parent.parent)}
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", shell, lines, sys.executable, "1" if foreign else "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"no mount namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    if expected == "error":
        assert "Read-only file system" in got["error"], got
    else:
        assert got == expected
