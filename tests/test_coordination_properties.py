"""A hypothesis state machine over real processes and the real coordination file (docs/design.md §5.2).

Owners are real processes; rules claim, release, kill them (SIGKILL), clean stale lines, race several
claims in threads, and SIGKILL a real `flink-gpu-discovery` worker at a random moment of its claim. A
model predicts every sequential claim exactly (free GPUs first, then dead owners' ones, lowest first;
an owner asking again keeps what it holds). After every step, read independently of the code under
test: no GPU is held by two live owners, every live owner still holds what it was given, and the file
holds nothing unparsable.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from flink_gpu import coordination, simulator
from flink_gpu.errors import FlinkException

HOST = ["0", "1", "2", "3", "10", "11"]  # "10"/"11": natural order, and no prefix matching of "1"


def natural(indices):
    return sorted(indices, key=int)


def start_time(pid):
    """Field 22 of /proc/<pid>/stat; None once the process is gone or a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def read_lines(path):
    """The file as [(index, pid, start time)], parsed here, not by the code under test (the namespace and
    lease fields after the start time are left out)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        index, rest = line.split(" ", 1)
        pid, start = rest.split("\t")[:2]
        out.append((index, int(pid), int(start)))
    return out


class CoordinationMachine(RuleBasedStateMachine):
    owners = Bundle("owners")

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="flink-gpu-props-")
        self.path = os.path.join(self.dir, "coordination")
        self.procs = []
        self.live = {}  # pid -> start time of our live owners
        self.lines = []  # the model of the file: [(index, pid, start time)] in file order
        self.discovery = None

    def teardown(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- owners ---------------------------------------------------------------------------------

    def start_owner(self):
        proc = subprocess.Popen(["sleep", "600"])
        self.procs.append(proc)
        start = start_time(proc.pid)
        self.live[proc.pid] = start
        return (proc, start)

    @initialize(target=owners)
    def first_owners(self):
        return multiple(self.start_owner(), self.start_owner())

    @rule(target=owners)
    def spawn(self):
        return self.start_owner()

    @rule(owner=consumes(owners))
    def kill(self, owner):
        proc, start = owner
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.live.pop(proc.pid, None)

    # ---- sequential operations, predicted exactly -------------------------------------------------

    def alive(self, pid, start):
        return self.live.get(pid) == start

    @rule(owner=owners, amount=st.integers(0, 5))
    def claim(self, owner, amount):
        proc, start = owner
        pid = proc.pid
        held = natural({i for i, p, s in self.lines if p == pid and s == start})
        if amount == 0 or len(held) >= amount:
            expected, take, reclaimed = held[:amount], [], set()
        else:
            need = amount - len(held)
            mentioned = {i for i, _, _ in self.lines}
            taken = {i for i, p, s in self.lines if self.alive(p, s)}
            free = [i for i in HOST if i not in mentioned]
            reclaimable = [i for i in HOST if i in mentioned and i not in taken]
            take = (free + reclaimable)[:need]
            reclaimed = set(take) - set(free)
            expected = natural(held + take) if len(take) == need else None
        before = Path(self.path).read_bytes() if os.path.exists(self.path) else None
        if expected is None:
            with pytest.raises(FlinkException, match="Could not get enough GPU resources"):
                coordination.claim(amount, HOST, path=self.path, owner=pid)
            after = Path(self.path).read_bytes() if os.path.exists(self.path) else None
            assert after == before  # all or nothing
            return
        assert coordination.claim(amount, HOST, path=self.path, owner=pid).taken == expected
        self.lines = [line for line in self.lines if line[0] not in reclaimed]
        self.lines += [(i, pid, start) for i in take]

    @rule(owner=owners, only=st.none() | st.lists(st.sampled_from(HOST), max_size=3))
    def release(self, owner, only):
        proc, _ = owner
        pid = proc.pid
        gone = [line for line in self.lines if line[1] == pid and (only is None or line[0] in only)]
        assert natural(coordination.release(pid, path=self.path, indices=only)) == natural({i for i, _, _ in gone})
        self.lines = [line for line in self.lines if line not in gone]

    @rule()
    def clean_stale(self):
        stale = [line for line in self.lines if not self.alive(line[1], line[2])]
        removed = coordination.clean_stale(self.path).removed
        assert [(e.index, e.pid, e.start_time) for e in removed] == stale
        self.lines = [line for line in self.lines if line not in stale]

    # ---- real interleavings ---------------------------------------------------------------------------

    def resync(self):
        """After a nondeterministic step: take the file as the model (the invariants check it)."""
        self.lines = read_lines(self.path)

    @precondition(lambda self: len(self.live) >= 2)
    @rule(data=st.data())
    def race(self, data):
        pids = data.draw(st.lists(st.sampled_from(sorted(self.live)), min_size=2, max_size=4, unique=True))
        amounts = [data.draw(st.integers(1, 3)) for _ in pids]
        results = {}
        barrier = threading.Barrier(len(pids))

        def worker(pid, amount):
            barrier.wait()
            try:
                results[pid] = coordination.claim(amount, HOST, path=self.path, owner=pid, timeout=30).taken
            except FlinkException:
                results[pid] = None

        threads = [threading.Thread(target=worker, args=(p, a)) for p, a in zip(pids, amounts, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.resync()
        for pid, got in results.items():
            if got is not None:
                mine = {i for i, p, s in self.lines if p == pid and s == self.live[pid]}
                assert set(got) <= mine, (pid, got, self.lines)

    @rule(delay=st.floats(0, 0.03))
    def worker_killed_mid_claim(self, delay):
        """A real `flink-gpu-discovery` worker (owner: its shell) SIGKILLed at a random moment."""
        if self.discovery is None:
            from conftest import find_discovery_executable

            self.discovery = find_discovery_executable()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
        env.update(simulator.environment(spec={"devices": [{} for _ in range(12)]}))
        proc = subprocess.Popen(
            [
                "sh",
                "-c",
                f'"{self.discovery}" 2 --enable-coordination-mode '
                f'--coordination-file "{self.path}" >/dev/null 2>&1; exec sleep 600',
            ],
            env=env,
            start_new_session=True,
        )
        self.procs.append(proc)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # the lock is free again as soon as the killed worker has finished dying (killpg does not wait
        # for the reparented discovery process): a wait that ends, never the hang of a stuck lock (a
        # stuck one raises TimeoutError; the bound is loose, for 2 loaded cores)
        coordination.snapshot(self.path, timeout=30)
        self.resync()

    # ---- invariants -----------------------------------------------------------------------------

    @invariant()
    def file_matches_the_model_and_no_gpu_has_two_live_owners(self):
        lines = read_lines(self.path)
        assert lines == self.lines
        live_holders = {}
        for index, pid, start in lines:
            if start_time(pid) == start:  # alive, independently of the code under test
                live_holders.setdefault(index, set()).add(pid)
        doubles = {i: p for i, p in live_holders.items() if len(p) > 1}
        assert not doubles, doubles
        snap = coordination.snapshot(self.path)
        assert snap.unparsable == ()
        assert {i: set(p) for i, p in snap.holders().items()} == live_holders

    @invariant()
    def live_owners_keep_their_gpus(self):
        for _index, pid, start in self.lines:
            if self.alive(pid, start):
                assert start_time(pid) == start


CoordinationMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("FLINK_GPU_PROPERTY_EXAMPLES", "30")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_coordination_state_machine = CoordinationMachine.TestCase
