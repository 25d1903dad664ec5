"""Coordination across PID namespaces (docs/design.md §9.4), with real namespaces (`unshare --pid --fork
--mount-proc`, as root): workers in containers that share one coordination file never get the same GPU.

Each test skips with the reason where the kernel or the sandbox refuses a new pid namespace."""

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import child_env
from flink_gpu import GPUInfo, binding, coordination
from flink_gpu.errors import FlinkException
from support.files import small_tmpfs
from support.interop import fake_nvidia_smi, stock_env
from support.leases import lease_token, tokenless_lease_file
from support.simulated import NOT_HOST_PIDS, pids_are_hosts
from support.waiting import SOURCE as WAITING_SOURCE
from support.waiting import wait_until

# A worker that obeys one JSON command per stdin line and answers one JSON line.
WORKER = (
    WAITING_SOURCE
    + r"""
import json, os, queue, signal, sys, threading, time
from flink_gpu import GPUInfo, coordination
from flink_gpu.binding import bind


def bind_slot(gpus, slot, bindings, ends=False, share=1):
    # a thread-mode subtask: a thread of this process binds for its slot and lives on, as a task thread;
    # `ends`: it ends without releasing, as a failed task's thread does
    answer = queue.Queue()

    def subtask():
        try:
            answer.put({"bound": list(bind([GPUInfo(i) for i in gpus], 1, share, slot=slot,
                                           taskmanager_pid=os.getpid(), path=bindings).indices)})
        except Exception as error:
            answer.put({"error": f"{type(error).__name__}: {error}"})
            return
        if not ends:
            threading.Event().wait()

    thread = threading.Thread(target=subtask, daemon=True)
    thread.start()
    out = answer.get(timeout=30)
    if ends:
        thread.join(30)
    return out


path = sys.argv[1]
handles = []  # the "bind" op's bindings, which "fork_bind_after" releases
taskmanagers = {}  # the "taskmanager" op's: pid -> (its Popen, its worker's pid)
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    try:
        if op == "hello":
            out = {"pid": os.getpid(), "ns": os.stat("/proc/self/ns/pid").st_ino}
        elif op == "claim":
            out = {"taken": coordination.claim(cmd["amount"], cmd["indices"], path=path).taken}
        elif op == "release":
            out = {"released": coordination.release(path=path)}
        elif op == "states":  # how this namespace judges each line of the coordination file (or of `file`)
            out = {e.index: [e.state, e.liveness] for e in coordination.snapshot(cmd.get("file", path)).entries}
        elif op == "fork":  # a child that outlives its parent, holding nothing of its own
            child = os.fork()
            if child == 0:
                time.sleep(600)
                os._exit(0)
            out = {"child": child}
        elif op == "bind_slot":
            out = bind_slot(cmd["gpus"], cmd["slot"], cmd["bindings"], cmd.get("ends", False), cmd.get("share", 1))
        elif op == "bind":  # a process holder: this process
            handles.append(bind([GPUInfo(i) for i in cmd["gpus"]], cmd["count"], path=cmd["bindings"]))
            out = {"bound": list(handles[-1].indices)}
        elif op == "bind_memory":  # a process holder with a memory request, on one simulated 80 GiB GPU (or `spec`'s)
            from flink_gpu import simulator
            from flink_gpu.errors import NotEnoughGpusError
            # before NVML first loads in this process
            os.environ.update(simulator.environment(**({"spec": cmd["spec"]} if "spec" in cmd else {"devices": 1})))
            try:
                handles.append(bind([GPUInfo("0")], 1, cmd["share"], path=cmd["bindings"], memory=cmd["memory"]))
                out = {"bound": list(handles[-1].indices), "memory_limit": handles[-1].memory_limit}
            except NotEnoughGpusError as error:
                out = {"error": str(error)}
        elif op == "fork_bind_after":  # a forked child binds once this process released its bindings or died
            parent, (gate_r, gate_w) = os.getpid(), os.pipe()
            child = os.fork()
            if child == 0:
                os.close(gate_w)
                os.read(gate_r, 1)
                try:
                    if cmd["after"] == "die":  # until the parent has died, not merely started to
                        wait_until(lambda: os.getppid() != parent, "the parent has died", 30)
                    got = bind([GPUInfo(i) for i in cmd["gpus"]], cmd["count"], path=cmd["bindings"])
                    got = {"bound": list(got.indices), "holder": got.holder, "pid": os.getpid()}
                except Exception as error:
                    got = {"error": f"{type(error).__name__}: {error}"}
                print(json.dumps(got), flush=True)  # the child's line, then the parent's
                os._exit(0)
            os.close(gate_r)
            if cmd["after"] == "die":
                print(json.dumps({"dying": parent}), flush=True)
                os.kill(parent, signal.SIGKILL)
            for handle in handles:
                handle.release()
            handles.clear()
            os.close(gate_w)
            os.waitpid(child, 0)
            out = {"released": True}
        elif op == "fork_bind":  # a forked child binds (it shares its parent's binding) and reports
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    got = {"bound": list(bind([GPUInfo(i) for i in cmd["gpus"]], cmd["count"],
                                              path=cmd["bindings"]).indices)}
                except Exception as error:
                    got = {"error": f"{type(error).__name__}: {error}"}
                os.write(w, json.dumps(got).encode())
                os._exit(0)
            os.close(w)
            with os.fdopen(r) as answer:
                out = json.loads(answer.read())
            os.waitpid(child, 0)
        elif op == "run":  # a child process of this one (a TaskManager's discovery or Python worker)
            import subprocess
            done = subprocess.run(cmd["argv"], env={**os.environ, **cmd.get("env", {})}, capture_output=True,
                                  text=True, timeout=60)
            out = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        elif op == "driver_claim":  # a coordinated driver's first claim on 4 simulated GPUs, and the GPUs it opened
            from flink_gpu import GPUDriver, simulator
            os.environ.update(simulator.environment(devices=4))  # before NVML first loads in this process
            args = f"--enable-coordination-mode --coordination-file {path}"
            with GPUDriver({"discovery-mode": "nvml", "discovery-script.args": args}) as driver:
                got = sorted(info.index for info in driver.retrieve_resource_info(cmd["amount"]))
                opened = sorted(simulator.counters()["calls"].get("nvmlDeviceGetHandleByIndex_v2", {}), key=int)
            out = {"got": got, "opened": opened}
        elif op == "driver_exclude":  # a driver under busy-gpus exclude on the GPUs of `spec`: what it hands out
            from flink_gpu import GPUDriver, simulator
            os.environ.update(simulator.environment(spec=cmd["spec"]))  # before NVML first loads in this process
            with GPUDriver({"discovery-mode": "nvml", "busy-gpus": "exclude"}) as driver:
                out = {"got": sorted(info.index for info in driver.retrieve_resource_info(cmd["amount"]))}
        elif op == "taskmanager":  # a process-mode TaskManager (a child) whose Python worker binds `gpus` for it
            import subprocess
            from flink_gpu import simulator
            argv = [sys.executable, "-c", cmd["taskmanager"], cmd["worker"], cmd["bindings"], ",".join(cmd["gpus"]),
                    "-"]
            tm = subprocess.Popen(argv, env={**os.environ, **simulator.environment(devices=2)}, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
            worker = json.loads(tm.stdout.readline())
            taskmanagers[tm.pid] = (tm, worker["pid"])
            out = {"taskmanager": tm.pid, "worker": worker["pid"], "bound": worker["bound"]}
        elif op == "orphan":  # that TaskManager SIGKILLed; its worker lives on, stopped (it cannot give its binding up)
            tm, worker = taskmanagers.pop(cmd["taskmanager"])
            os.kill(worker, signal.SIGSTOP)

            def stopped():
                with open(f"/proc/{worker}/stat") as stat:
                    return stat.read().rpartition(")")[2].split()[0] == "T"

            wait_until(stopped, f"pid {worker} has stopped", 10, 0.001)
            tm.kill()
            tm.wait()
            out = {"orphaned": worker}
        elif op == "die":
            print(json.dumps({"dying": os.getpid()}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    except Exception as error:
        out = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(out), flush=True)
"""
)


def _skip_unless_unshare():
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")


class NsWorker:
    """A WORKER in a new pid namespace: pid 1 there (`init=True`), or pid 2 under a shell (so that it can
    SIGKILL itself: a namespace's init ignores signals from inside). Ends with the namespace. With
    `container=False` it runs in ours instead (its pid a host pid where ours is the initial namespace)."""

    def __init__(self, path, init=True, container=True):
        argv = [sys.executable, "-c", WORKER, str(path)]
        if not init:
            argv = ["sh", "-c", '"$@"; sleep 600', "sh", *argv]
        if container:
            _skip_unless_unshare()
            argv = ["unshare", "--pid", "--mount-proc", "--kill-child", *argv]
        self.proc = subprocess.Popen(
            argv,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        hello = self.ask(op="hello", allow_eof=True)
        if hello is None:
            error = self.proc.stderr.read().strip()
            self.close()
            pytest.skip(f"cannot create a pid namespace here: {error}")
        self.pid, self.ns = hello["pid"], hello["ns"]

    def ask(self, allow_eof=False, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            assert allow_eof, f"the worker died: {self.proc.stderr.read()}"
            return None
        return json.loads(line)

    def claim(self, amount, indices):
        return self.ask(op="claim", amount=amount, indices=indices)

    def die(self, path):
        """SIGKILLs the worker itself (the namespace lives on while the shell above it does), and waits
        until every entry of the file in its namespace with a lease has it released (unless the lease
        file was deleted: then nothing can show the release)."""
        assert self.ask(op="die") == {"dying": self.pid}

        def released():
            entries = coordination.snapshot(path).entries
            ours = [e for e in entries if e.lease is not None and e.namespace == self.ns]
            return not os.path.exists(f"{path}.lease") or all(e.state == "lease released" for e in ours)

        wait_until(released, f"the leases of pid {self.pid} in namespace {self.ns} are released", 10)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()  # --kill-child: the namespace's init, and with it everything in it, dies
        self.proc.wait(30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.fixture
def workers():
    started = []

    def start(path, init=True, container=True):
        worker = NsWorker(path, init, container)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


@pytest.fixture
def path(tmp_path):
    return tmp_path / "coordination"


def gpus(n):
    return [str(i) for i in range(n)]


def own_ns():
    return os.stat("/proc/self/ns/pid").st_ino


# ---- the scenario --------------------------------------------------------------------------


def test_two_namespaces_with_pid_1_never_share_a_gpu(path, workers):
    a = workers(path)
    b = workers(path)
    assert a.pid == b.pid == 1 and a.ns != b.ns
    assert a.claim(2, gpus(2)) == {"taken": ["0", "1"]}
    # B sees pid 1 (itself) with another start time, but the line says namespace A and A's lease is held
    answer = b.claim(2, gpus(2))
    assert answer["error"].startswith("NotEnoughGpusError: Could not get enough GPU resources. Requested 2")
    assert "pid 1 holds 0, 1" in answer["error"]
    assert b.claim(2, gpus(4)) == {"taken": ["2", "3"]}  # more GPUs: disjoint ones
    entries = coordination.snapshot(path).entries
    assert [(e.index, e.pid, e.namespace, e.lease, e.state) for e in entries] == [
        ("0", 1, a.ns, 0, "lease held"),
        ("1", 1, a.ns, 0, "lease held"),
        ("2", 1, b.ns, 1, "lease held"),
        ("3", 1, b.ns, 1, "lease held"),
    ]
    # the host (a third namespace) takes none of them either
    with pytest.raises(FlinkException, match="Could not get enough GPU resources"):
        coordination.claim(1, gpus(4), path=path)
    assert b.ask(op="release") == {"released": ["2", "3"]}
    assert coordination.claim(1, gpus(4), path=path).taken == ["2"]
    coordination.release(path=path)


def test_a_claim_never_reads_the_gpu_pid_1_of_another_namespace_holds_as_its_own(path, workers):
    """Both sides are pid 1: B's driver must not take A's line for its own (which it would read and could
    take back); it reads only the free GPU it claims."""
    a = workers(path)
    b = workers(path)
    assert a.pid == b.pid == 1 and a.ns != b.ns
    assert a.claim(1, gpus(4)) == {"taken": ["0"]}
    assert b.ask(op="driver_claim", amount=1) == {"got": ["1"], "opened": ["1"]}
    assert [(e.index, e.namespace) for e in coordination.snapshot(path).entries] == [("0", a.ns)]


def test_a_sigkilled_lease_holder_is_reclaimed_from_another_namespace(path, workers):
    a = workers(path, init=False)
    assert a.pid == 2
    assert a.claim(2, gpus(3)) == {"taken": ["0", "1"]}
    b = workers(path)
    assert b.claim(2, gpus(3))["error"].startswith("NotEnoughGpusError: Could not get enough GPU resources")
    a.die(path)  # the kernel drops A's lease; pid 2 means nothing in B
    assert b.claim(3, gpus(3)) == {"taken": ["0", "1", "2"]}  # 2 was free, 0 and 1 are reclaimed
    assert {e.index: (e.namespace, e.state) for e in coordination.snapshot(path).entries} == {
        "0": (b.ns, "lease held"),
        "1": (b.ns, "lease held"),
        "2": (b.ns, "lease held"),
    }


def test_a_holder_moves_only_its_own_lines_to_its_new_lease_never_those_of_pid_1_of_another_namespace(path, workers):
    """A and B, pid 1 of two namespaces, each leased byte 0 of a lease file without a token (its flock held by
    another process): both lines say `1 lease=0 lf=none`. When A's lease file is gone, A moves its own lines
    to its new lease, never B's: B's GPU stays taken after A dies."""
    a = workers(path)
    with tokenless_lease_file(path, "flock held"):
        assert a.claim(1, ["0"]) == {"taken": ["0"]}
    assert a.ask(op="release") == {"released": ["0"]}  # its lease stays, idle, on byte 0 of that lease file
    Path(f"{path}.lease").unlink()
    b = workers(path)
    assert a.pid == b.pid == 1 and a.ns != b.ns
    with tokenless_lease_file(path, "flock held"):
        assert b.claim(1, ["1"]) == {"taken": ["1"]}
    b_line = next(line for line in path.read_text().splitlines() if line.startswith("1 1\t"))
    assert b_line.endswith(f"\tns={b.ns}\tlease=0\tlf=none")
    assert a.claim(1, ["2"]) == {"taken": ["2"]}  # on a new lease: its old lease file is gone
    assert b_line in path.read_text().splitlines()
    a.close()  # the namespace ends, and with it A
    wait_until(
        lambda: {e.index: e.state for e in coordination.snapshot(path).entries}.get("2") == "lease released",
        f"A's GPU 2 is 'lease released' in {path.read_text()}",
        30,
    )
    with pytest.raises(FlinkException, match="Could not get enough GPU resources"):
        coordination.claim(1, ["1"], path=path)
    assert b_line in path.read_text().splitlines()
    assert {e.index: (e.namespace, e.state) for e in coordination.snapshot(path).entries}["1"] == (b.ns, "lease held")


REUSE = r"""
import json, os, signal, subprocess, sys, time
from flink_gpu import coordination
path = sys.argv[1]
r, w = os.pipe()
holder = os.fork()
if holder == 0:
    os.close(r)
    coordination.claim(1, ["0", "1"], path=path)
    os.write(w, b"x")
    time.sleep(600)
    os._exit(0)
os.close(w)
os.read(r, 1)
os.kill(holder, signal.SIGKILL)
os.waitpid(holder, 0)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the next process of this namespace gets its pid
    f.write(str(holder - 1))
impostor = subprocess.Popen(["sleep", "600"])
print(json.dumps({"holder": holder, "impostor": impostor.pid}), flush=True)
sys.stdin.readline()
print(json.dumps({"taken": coordination.claim(2, ["0", "1"], path=path).taken}), flush=True)
sys.stdin.readline()
"""


def test_a_lease_decides_over_a_reused_pid(path):
    """A dead holder's pid given to a new process of its namespace: the released lease frees its GPU,
    seen from outside and from inside."""
    _skip_unless_unshare()
    proc = subprocess.Popen(
        ["unshare", "--pid", "--mount-proc", "--kill-child", sys.executable, "-c", REUSE, str(path)],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        if not first:
            pytest.skip(f"cannot create a pid namespace or set ns_last_pid here: {proc.stderr.read().strip()}")
        pids = json.loads(first)
        if pids["impostor"] != pids["holder"]:
            pytest.skip(f"ns_last_pid did not give pid {pids['holder']} again (got {pids['impostor']})")
        (entry,) = coordination.snapshot(path).entries
        assert (entry.pid, entry.lease) == (pids["holder"], 0)
        assert entry.state == "lease released" and not entry.alive  # from outside: the lease decides
        proc.stdin.write("\n")
        proc.stdin.flush()
        # inside, where the pid is alive again: reclaimed all the same
        assert json.loads(proc.stdout.readline()) == {"taken": ["0", "1"]}
    finally:
        proc.kill()
        proc.wait(30)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


def test_a_forked_child_does_not_keep_its_parents_lease(path, workers):
    a = workers(path, init=False)
    assert a.claim(2, gpus(2)) == {"taken": ["0", "1"]}
    assert "child" in a.ask(op="fork")  # shares the parent's open files, but closed the lease's at fork
    a.die(path)  # the child lives on in A's namespace
    (entry, _) = coordination.snapshot(path).entries
    assert entry.state == "lease released"
    assert coordination.claim(2, gpus(2), path=path).taken == ["0", "1"]
    coordination.release(path=path)


# ---- bindings (docs/design.md §9.3): a TaskManager container's slots ---------------------------------


def test_a_thread_mode_slot_of_a_taskmanager_that_died_in_another_namespace_frees_its_gpu(path, workers):
    """A thread's id means nothing outside its namespace: the TaskManager process's lease, written on its
    slot threads' lines, is what tells another container that the slot is gone (no clean needed)."""
    bindings = binding.bindings_path(path)
    taskmanager = workers(path, init=False)
    assert taskmanager.ask(op="bind_slot", gpus=["0"], slot="alloc-a", bindings=bindings) == {"bound": ["0"]}
    [line] = binding.snapshot(bindings).entries
    # the lease proves the TaskManager process, not the thread, whose liveness only its namespace knows
    assert (line.slot, line.namespace, line.lease, line.state, line.alive) == (
        "alloc-a",
        taskmanager.ns,
        0,
        "other namespace",
        True,
    )
    with pytest.raises(binding.BindingError, match=r"GPU 0 is bound by slot alloc-a of pid 2 \(1 of at most 1\)"):
        binding.bind([GPUInfo("0")], slot="alloc-b", taskmanager_pid=os.getpid(), path=bindings)
    taskmanager.die(bindings)
    with binding.bind([GPUInfo("0")], slot="alloc-b", taskmanager_pid=os.getpid(), path=bindings) as ours:
        assert ours.indices == ("0",)
        [line] = binding.snapshot(bindings).entries  # the dead slot's line went with this bind
        assert (line.slot, line.namespace, line.state) == ("alloc-b", own_ns(), "live")


def test_a_slot_thread_that_ended_in_a_live_taskmanager_of_another_namespace_is_cleaned_on_request(path, workers):
    """A failed thread-mode task's thread ends without releasing while its TaskManager lives on: the lease
    proves the process only, so from another namespace the line is one of unknown liveness, shown as such
    and removed by `clean --foreign-namespaces`, the remedy for every such line (docs/design.md §9.4)."""
    bindings = binding.bindings_path(path)
    taskmanager = workers(path, init=False)
    assert taskmanager.ask(op="bind_slot", gpus=["0"], slot="alloc-a", bindings=bindings, ends=True) == {"bound": ["0"]}
    [line] = binding.snapshot(bindings).entries
    assert (line.slot, line.namespace, line.lease, line.state, line.alive) == (
        "alloc-a",
        taskmanager.ns,
        0,
        "other namespace",
        True,
    )
    shown = json.loads(_cli("coordination", "show", "--json", "--file", bindings).stdout)
    assert [(e["state"], e["liveness_known"]) for e in shown["entries"]] == [("other namespace", False)]
    [listed] = json.loads(_cli("--simulate", "1", "list", "--json", "--file", path).stdout)["bindings"]["taskmanagers"]
    assert [(h["holder"], h["liveness_known"]) for h in listed["holders"]] == [("slot alloc-a", False)]
    forced = _cli("coordination", "clean", "--foreign-namespaces", "--file", bindings)
    assert forced.returncode == 0, forced.stderr
    assert "Removed 1 entry held in another PID namespace, liveness unknown" in forced.stdout
    with binding.bind([GPUInfo("0")], slot="alloc-b", taskmanager_pid=os.getpid(), path=bindings) as ours:
        assert ours.indices == ("0",)


def test_a_worker_whose_taskmanager_died_in_a_container_is_stale_there_and_taken_with_liveness_unknown_elsewhere(
    path, workers, tmp_path
):
    """Two containers, each a process-mode TaskManager (pid 2 there) whose Python worker (pid 3) binds a GPU for
    it. The first TaskManager is SIGKILLed; its worker lives on (stopped: it cannot give its binding up itself).
    Only its own namespace can prove it orphaned: there its line is stale and its GPU free; elsewhere (the other
    container, where pid 2 and 3 live, and ours) its held lease keeps it taken, with liveness unknown, and list
    and doctor say that they cannot tell."""
    from flink_gpu.cli.doctor_command.findings import Checkup
    from flink_gpu.cli.doctor_command.gpu_state import check_orphans
    from support.orphans import TASKMANAGER
    from support.orphans import WORKER as BINDER

    bindings = binding.bindings_path(path)
    a, b = workers(path), workers(path)
    started = [
        w.ask(op="taskmanager", taskmanager=TASKMANAGER, worker=BINDER, bindings=bindings, gpus=[gpu])
        for w, gpu in ((a, "0"), (b, "1"))
    ]
    assert [(s["taskmanager"], s["worker"], s["bound"]) for s in started] == [(2, 3, ["0"]), (2, 3, ["1"])], started
    assert a.ask(op="orphan", taskmanager=2) == {"orphaned": 3}
    # each namespace judges its own lines by pid, the other's by lease: never by its own pid 2 or 3
    assert a.ask(op="states", file=bindings) == {"0": ["taskmanager gone", "dead"], "1": ["lease held", "unknown"]}
    assert b.ask(op="states", file=bindings) == {"0": ["lease held", "unknown"], "1": ["live", "alive"]}
    assert {e.index: (e.state, e.liveness) for e in binding.snapshot(bindings).entries} == {
        "0": ("lease held", "unknown"),
        "1": ("lease held", "unknown"),
    }
    # in its own namespace list names the orphan and how to end it
    listed = a.ask(
        op="run", argv=[sys.executable, "-m", "flink_gpu.cli", "--simulate", "2", "list", "--json", "--file", str(path)]
    )
    assert [(o["pid"], o["taskmanager"], o["gpus"]) for o in json.loads(listed["stdout"])["bindings"]["orphans"]] == [
        (3, 2, ["0"])
    ], listed
    # ours cannot tell, and says so
    view = json.loads(_cli("--simulate", "2", "list", "--json", "--file", path).stdout)["bindings"]
    assert view["orphans"] == []
    assert [
        (t["pid"], t["namespace"], [(h["holder"], h["orphaned"]) for h in t["holders"]]) for t in view["taskmanagers"]
    ] == [(2, ns, [("pid 3", None)]) for ns in sorted((a.ns, b.ns))]
    human = _cli("--simulate", "2", "list", "--file", path).stdout
    for ns in (a.ns, b.ns):
        assert (
            "    pid 3: orphaned? cannot tell from this PID namespace; it keeps its GPU while it holds its lease, "
            f"even once TaskManager pid 2 is gone (`flink-gpu list` in PID namespace {ns} tells)."
        ) in human, human
    checkup = Checkup(None, str(tmp_path / "flink-conf.yaml"), str(tmp_path), None, None)
    check_orphans(checkup, "gpu", binding.snapshot(bindings))
    [note] = checkup.findings
    assert note.level == "note" and "orphaned? cannot tell from this PID namespace" in note.message
    assert f"pid 3 of PID namespace {a.ns} (GPU 0) for TaskManager pid 2" in note.message
    assert f"pid 3 of PID namespace {b.ns} (GPU 1) for TaskManager pid 2" in note.message
    # taken where it cannot be proven orphaned, free where it can
    refused = b.ask(op="bind", gpus=["0"], count=1, bindings=bindings)
    assert "GPU 0 is bound by pid 3 (1 of at most 1)" in refused.get("error", ""), refused
    assert a.ask(op="bind", gpus=["0"], count=1, bindings=bindings) == {"bound": ["0"]}


# ---- the stock script, without namespaces of its own ----------------------------------------------


def test_the_stock_script_in_one_namespace_and_ours_in_another(path, workers, stock_script, tmp_path):
    _skip_unless_unshare()
    env = {**child_env(), **stock_env(fake_nvidia_smi(tmp_path / "smi", 4))}
    stock_args = ["bash", str(stock_script), "2", "--enable-coordination-mode", "--coordination-file", str(path)]

    def stock_in_new_namespace():
        # the shell is the TaskManager stand-in, pid 1 of its namespace: the script records `<index> 1`
        return subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--mount-proc",
                "--kill-child",
                "sh",
                "-c",
                '"$@"; echo "rc=$?"; exec sleep 600',
                "sh",
                *stock_args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    stock_a = stock_in_new_namespace()
    stock_c = None
    try:
        got_a = [stock_a.stdout.readline().strip(), stock_a.stdout.readline().strip()]
        if got_a[0] == "":
            pytest.skip(f"cannot create a pid namespace here: {stock_a.stderr.read().strip()}")
        assert got_a == ["0,1", "rc=0"]
        assert path.read_text() == "0 1\n1 1\n"
        # Ours, pid 1 of namespace B: the bare `0 1` is not its own line, and pid 1 is alive here
        b = workers(path)
        assert b.pid == 1
        assert b.claim(2, gpus(4)) == {"taken": ["2", "3"]}
        # the stock script in namespace C: `ps -p 1` is alive for every line, ours included
        stock_c = stock_in_new_namespace()
        assert stock_c.stdout.readline().strip() == "Could not get enough GPU resources."
        assert stock_c.stdout.readline().strip() == "rc=1"
        assert path.read_text().splitlines()[:2] == ["0 1", "1 1"]
    finally:
        for proc in (stock_a, stock_c):
            if proc is not None:
                proc.kill()
                proc.wait(30)
                proc.stdout.close()
                proc.stderr.close()


# ---- what cannot be proven stays taken, shown, and removable on request ----------------------------


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", *map(str, args)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unleased_entry_of_another_namespace_is_shown_kept_and_cleaned_on_request(path, tmp_path):
    """`flink-gpu claim` in a container claims for its parent, without a lease: nobody outside can tell
    when that parent dies."""
    _skip_unless_unshare()
    inner = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            '"$@" >/dev/null; echo "rc=$?"; exec sleep 600',
            "sh",
            sys.executable,
            "-m",
            "flink_gpu.cli",
            "--simulate",
            "2",
            "claim",
            "1",
            "--file",
            str(path),
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rc = inner.stdout.readline().strip()
        if rc == "":
            pytest.skip(f"cannot create a pid namespace here: {inner.stderr.read().strip()}")
        assert rc == "rc=0", inner.stderr.read()
        (entry,) = coordination.snapshot(path).entries
        assert (entry.index, entry.pid, entry.lease, entry.state) == ("0", 1, None, "other namespace")
        assert entry.alive and not entry.liveness_known and entry.namespace != own_ns()
        # taken for every claimer here, whatever pid 1 is in this namespace
        with pytest.raises(FlinkException, match="pid 1 holds 0"):
            coordination.claim(2, gpus(2), path=path)
        assert coordination.claim(1, gpus(2), path=path).taken == ["1"]
        assert coordination.release(path=path) == ["1"]

        listed = json.loads(_cli("--simulate", "2", "list", "--json", "--file", path).stdout)
        (holder,) = listed["gpus"][0]["holders"]
        assert holder == {
            "pid": 1,
            "cmdline": None,
            "command": None,
            "liveness_known": False,
            "ours": False,
            "namespace": entry.namespace,
        }
        human = _cli("--simulate", "2", "list", "--file", path).stdout
        assert "pid 1: held in another PID namespace, liveness unknown" in human
        assert "clean --foreign-namespaces" in human
        shown = json.loads(_cli("coordination", "show", "--json", "--file", path).stdout)
        assert [(e["state"], e["liveness_known"], e["lease"]) for e in shown["entries"]] == [
            ("other namespace", False, None)
        ]
        show = _cli("coordination", "show", "--file", path).stdout
        assert "1 entry (0 live, 0 stale, 1 of other PID namespaces with liveness unknown)" in show

        plain = _cli("coordination", "clean", "--file", path)
        assert plain.returncode == 0 and "No stale entry" in plain.stdout
        assert len(coordination.snapshot(path).entries) == 1  # plain clean never removes it
        forced = _cli("coordination", "clean", "--foreign-namespaces", "--file", path)
        assert forced.returncode == 0
        assert "Removed 1 entry held in another PID namespace, liveness unknown" in forced.stdout
        assert "GPU 0 may be claimed again" in forced.stdout
        assert coordination.snapshot(path).entries == ()
    finally:
        inner.kill()
        inner.wait(30)
        inner.stdout.close()
        inner.stderr.close()


def test_doctor_counts_entries_of_unknown_liveness(path, tmp_path):
    from flink_gpu.cli.doctor_command.coordination import check_coordination_file
    from flink_gpu.cli.doctor_command.findings import Checkup

    other = own_ns() + 1  # a namespace that is not ours: what a container's worker writes
    path.write_text(f"0 1\t5\tns={other}\n1 1\t5\tns={other}\n")
    checkup = Checkup(None, str(tmp_path / "flink-conf.yaml"), str(tmp_path), None, None)
    check_coordination_file(checkup, "gpu", str(path))
    (finding,) = [f for f in checkup.findings if "PID namespace" in f.message]
    assert finding.level == "note" and "2 entries" in finding.message and "GPU 0, 1" in finding.message
    assert "clean --foreign-namespaces" in finding.fix


# ---- stress: 3 namespaces, SIGKILLs, a ledger ------------------------------------------------------

STRESS_WORKER = r"""
import os, random, sys, time
from flink_gpu import coordination
path, ledger, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def note(*words):
    os.write(out, (" ".join(map(str, words)) + "\n").encode())
rng = random.Random()
indices = [str(i) for i in range(count)]
while True:
    try:
        taken = coordination.claim(rng.choice((1, 2)), indices, path=path, timeout=30).taken
    except Exception as error:
        if "Could not get enough" not in str(error):
            note("error", repr(str(error)))
        time.sleep(0.002)  # none free: the next try, paced
        continue
    note("got", time.monotonic_ns(), *taken)
    time.sleep(rng.uniform(0, 0.02))  # holding for a random while: the overlap a double would show
    note("drop", time.monotonic_ns())
    coordination.release(path=path, timeout=30)
"""

# Runs 3 workers and SIGKILLs one at a time, `kills` times, starting another each time, then the last 3.
# Each dies once it has taken GPUs 1 to 3 times and, about half of them, while it holds them: conditions on
# its ledger, never a time, so that every worker takes part whatever the load (a Python worker may take
# seconds to start on a busy machine; a kill on a timer then lands before most of them claim anything).
SUPERVISOR = r"""
import os, random, signal, subprocess, sys, time
path, ledgers, count, name, kills_wanted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
deadline = time.monotonic() + float(sys.argv[6])  # an upper bound on the waits below, never a schedule
rng = random.Random()
kills = open(os.path.join(ledgers, f"kills-{name}"), "w")
n = 0
def start():
    global n
    n += 1
    ledger = os.path.join(ledgers, f"worker-{name}-{n}")
    return ledger, subprocess.Popen([sys.executable, "-c", os.environ["STRESS_WORKER"], path, ledger, count])
def has_claimed(ledger, times, holding):
    try:
        with open(ledger) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:  # still starting
        return False
    got = sum(line.startswith("got ") for line in lines)
    return got >= times and (not holding or lines[-1].startswith("got "))
def kill(ledger, proc):
    times, holding = rng.randint(1, 3), rng.random() < 0.5
    while not has_claimed(ledger, times, holding):
        if proc.poll() is not None:
            sys.exit(f"{os.path.basename(ledger)} ended with {proc.returncode} before it was killed")
        if time.monotonic() > deadline:
            sys.exit(f"{os.path.basename(ledger)} did not claim {times} times" + " (holding)" * holding
                     + f" before the deadline: {open(ledger).read() if os.path.exists(ledger) else 'no ledger'}")
        time.sleep(0.001)
    kills.write(f"{os.path.basename(ledger)} {time.monotonic_ns()}\n")  # alive until this instant
    kills.flush()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
running = [start() for _ in range(3)]
for _ in range(kills_wanted):
    i = rng.randrange(len(running))
    kill(*running[i])
    running[i] = start()
for ledger, proc in running:
    kill(ledger, proc)
print("done", n, flush=True)
"""


def _holdings(ledgers):
    """[(worker, gpu, from ns, until ns)]: intervals in which a worker surely held a GPU (from after its
    claim returned to before it released it or was killed)."""
    killed = {}
    for kills in ledgers.glob("kills-*"):
        for line in kills.read_text().splitlines():
            worker, at = line.split()
            killed[worker] = int(at)
    out, errors = [], []
    for ledger in ledgers.glob("worker-*"):
        held = None
        for line in ledger.read_text().splitlines():
            words = line.split()
            if words and words[0] == "error":
                errors.append((ledger.name, line))
            elif len(words) >= 3 and words[0] == "got":
                held = (int(words[1]), words[2:])
            elif len(words) == 2 and words[0] == "drop" and held is not None:
                out += [(ledger.name, gpu, held[0], int(words[1])) for gpu in held[1]]
                held = None
        if held is not None:  # killed while holding
            out += [(ledger.name, gpu, held[0], killed[ledger.name]) for gpu in held[1]]
    return out, errors


def test_workers_in_three_namespaces_with_sigkills_never_share_a_gpu(path, tmp_path):
    _skip_unless_unshare()
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    env = {**child_env(), "STRESS_WORKER": STRESS_WORKER}
    supervisors = [
        subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--mount-proc",
                "--kill-child",
                sys.executable,
                "-c",
                SUPERVISOR,
                str(path),
                str(ledgers),
                "4",
                f"ns{i}",
                "10",
                "480",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        outputs = [s.communicate(timeout=600) for s in supervisors]
    finally:
        for s in supervisors:
            s.kill()
            s.wait(30)
    for (stdout, stderr), s in zip(outputs, supervisors, strict=True):
        if s.returncode != 0 and "unshare" in stderr:
            pytest.skip(f"cannot create a pid namespace here: {stderr.strip()}")
        assert s.returncode == 0 and stdout.startswith("done"), stderr
    holdings, errors = _holdings(ledgers)
    assert not errors
    namespaces = {worker.split("-")[1] for worker, *_ in holdings}
    assert len(namespaces) == 3 and len(holdings) > 20, (namespaces, len(holdings))
    reclaims = 0
    by_gpu = {}
    for worker, gpu, start, end in holdings:
        by_gpu.setdefault(gpu, []).append((start, end, worker))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, e1, w1), (s2, _, w2) in itertools.pairwise(spans):
            assert s2 >= e1, f"GPU {gpu} given to {w2} at {s2} while {w1} held it until {e1}"
            reclaims += w1.split("-")[1] != w2.split("-")[1]
    assert reclaims > 0  # GPUs did pass between namespaces


# ---- one holder identity: equal pids of two namespaces are two holders, for every consumer ----------

LOOKUP = r"""
import json
from flink_gpu.pyflink import lookup_external_resource_infos
lookup = lookup_external_resource_infos(None, "gpu")
print(json.dumps({"indices": sorted(i.get_property("index") for i in lookup.infos), "reason": lookup.reason}))
"""


def test_process_mode_workers_of_two_taskmanagers_with_pid_1_get_their_own_gpus(path, workers, discovery_exe, tmp_path):
    """Two containers share the coordination file; each TaskManager is pid 1 of its own and runs the
    discovery: each container's Python worker gets its TaskManager's GPU, not both."""
    from test_pyflink import write_conf

    from flink_gpu import simulator

    conf_dir = write_conf(tmp_path / "conf", f"--enable-coordination-mode --coordination-file {path}")
    taskmanagers = [workers(path), workers(path)]
    discovered = []
    for tm in taskmanagers:
        done = tm.ask(
            op="run",
            argv=[str(discovery_exe), "1", "--enable-coordination-mode", "--coordination-file", str(path)],
            env=simulator.environment(devices=2),
        )
        assert done["rc"] == 0, done
        discovered.append(done["stdout"].strip())
    assert sorted(discovered) == ["0", "1"] and all(tm.pid == 1 for tm in taskmanagers)
    for tm, gpu in zip(taskmanagers, discovered, strict=True):
        done = tm.ask(
            op="run",
            argv=[sys.executable, "-c", LOOKUP],
            env={"FLINK_CONF_DIR": str(conf_dir), **simulator.environment(devices=2)},
        )
        assert done["rc"] == 0, done
        assert json.loads(done["stdout"])["indices"] == [gpu], done


def test_the_sharing_limit_counts_equal_slots_of_equal_pids_in_two_namespaces_apart(path, workers):
    """Slot 'worker-0' of TaskManager pid 1 in five containers, at most two holders per GPU: five holders,
    never three on one GPU."""
    bindings = binding.bindings_path(path)
    bound = [
        workers(path).ask(op="bind_slot", gpus=["0", "1"], slot="worker-0", bindings=bindings, share=2)
        for _ in range(5)
    ]
    assert [b.get("bound") for b in bound[:4]] == [["0"], ["1"], ["0"], ["1"]], bound
    assert bound[4]["error"].startswith("NotEnoughGpusError: Could not bind 1 GPU"), bound[4]
    assert "(2 of at most 2)" in bound[4]["error"]


def test_two_containers_with_equal_pids_cannot_both_put_50_gib_on_one_80_gib_gpu(path, workers):
    """Pid 1 of two containers, each asking 50 GiB of the one 80 GiB GPU that two may share: the second
    counts the first's request though it cannot see its process, and gets the GPU once the first died."""
    bindings = binding.bindings_path(path)
    first, second = workers(path), workers(path)
    assert first.pid == second.pid == 1
    assert first.ask(op="bind_memory", share=2, memory="50 gb", bindings=bindings) == {
        "bound": ["0"],
        "memory_limit": 50 * 2**30,
    }
    refused = second.ask(op="bind_memory", share=2, memory="50 gb", bindings=bindings)
    assert "GPU 0 is bound by pid 1 (1 of at most 2), 50 GiB of its 80 GiB requested" in refused["error"], refused
    first.close()  # the container ends: its lease goes, and the request with it
    # the kernel drops the lease when pid 1 there has exited, a moment later
    wait_until(lambda: not any(e.alive for e in binding.snapshot(bindings).entries), "the first's binding is dead", 10)
    again = second.ask(op="bind_memory", share=2, memory="50 gb", bindings=bindings)
    assert again.get("bound") == ["0"], again


# ---- NVML's pids are host pids (docs/design.md §9.1) --------------------------------------------------


def _nvml_worker(path, workers, where):
    """A worker in a container (pid 1 there, a number the host's init has), or in our namespace where
    that is the host's: the one whose pids NVML lists, as the simulator lists its spec's."""
    if where == "host" and not pids_are_hosts():
        pytest.skip(NOT_HOST_PIDS)
    worker = workers(path, container=where == "container")
    assert (worker.pid == 1) == (where == "container")
    return worker


@pytest.mark.parametrize("where", ["container", "host"])
def test_busy_gpus_exclude_takes_a_listed_pid_for_the_workers_own_only_where_nvmls_pids_are_its(path, workers, where):
    """NVML lists GPU 0's process as pid <worker's pid>. In a container that is the host's process with the
    number the worker has there (pid 1: the host's init), foreign: exclude never hands GPU 0 out. In the
    host's namespace it is the worker itself: GPU 0 is busy only with its own work and is handed out."""
    worker = _nvml_worker(path, workers, where)
    spec = {"devices": [{"processes": [{"pid": worker.pid, "used_memory": 2**30}]}, {}]}
    assert worker.ask(op="driver_exclude", amount=1, spec=spec) == {"got": ["1" if where == "container" else "0"]}


@pytest.mark.parametrize("where", ["container", "host"])
def test_a_memory_request_counts_a_listed_pids_memory_as_the_binders_own_only_where_nvmls_pids_are_its(
    path, workers, where
):
    """60 GiB of an 80 GiB GPU used by pid <binder's pid>, 20 GiB free, 30 GiB asked: in the host's namespace
    that process is the binder, whose use is its holders' to reuse (bound); in a container it is the host's
    process with the binder's number there, whose memory is not free (refused)."""
    worker = _nvml_worker(path, workers, where)
    spec = {"devices": [{"memory_total": 80 * 2**30, "processes": [{"pid": worker.pid, "used_memory": 60 * 2**30}]}]}
    bindings = binding.bindings_path(path)
    answer = worker.ask(op="bind_memory", share=1, memory="30 gb", bindings=bindings, spec=spec)
    if where == "host":
        assert answer == {"bound": ["0"], "memory_limit": 30 * 2**30}
    else:
        assert answer.get("error", "").startswith("Could not bind 1 GPU"), answer
        assert "20 GiB free" in answer["error"], answer


def test_a_forked_child_inherits_its_parents_binding_not_that_of_pid_1_of_another_namespace(path, workers):
    bindings = binding.bindings_path(path)
    a, b = workers(path), workers(path)
    assert a.ask(op="bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["0"]}
    assert b.ask(op="bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["1"]}
    assert b.ask(op="fork_bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["1"]}
    assert a.ask(op="fork_bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["0"]}


@pytest.mark.parametrize("after", ["release", "die"])
def test_a_forked_child_whose_parent_ended_binds_as_its_own_holder_never_as_an_equal_pid_of_another_namespace(
    path, workers, after
):
    """The parent is pid 2 in its namespace, as an unrelated holder is in another; once the parent released
    or died, its child binds as a holder of its own: a free GPU, never the other holder's GPU 0 as if it
    were its parent's."""
    bindings = binding.bindings_path(path)
    other, parent = workers(path, init=False), workers(path, init=False)
    assert other.pid == parent.pid == 2
    assert other.ask(op="bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["0"]}
    assert parent.ask(op="bind", gpus=["0", "1"], count=1, bindings=bindings) == {"bound": ["1"]}
    first = parent.ask(op="fork_bind_after", after=after, gpus=["0", "1"], count=1, bindings=bindings)
    child = json.loads(parent.proc.stdout.readline()) if after == "die" else first
    if after == "release":
        assert json.loads(parent.proc.stdout.readline()) == {"released": True}
    else:
        assert first == {"dying": 2}
    assert child.get("bound") == ["1"] and child["holder"] == f"pid {child['pid']}", child
    assert [(e.index, e.holder, e.namespace) for e in binding.snapshot(bindings).entries if e.index == "0"] == [
        ("0", "pid 2", other.ns)
    ], "the other holder's binding changed"


# A holder forks a child into a new pid namespace (unshare(CLONE_NEWPID), then fork: the child is pid 1
# there): the parent's lines are of the parent's namespace, not the child's, and still its parent's.
FORK_INTO_A_NEW_NAMESPACE = r"""
import ctypes, json, os, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
path = sys.argv[1]
gpus = [GPUInfo("0"), GPUInfo("1")]
parent, me = bind(gpus, path=path), os.getpid()
CLONE_NEWPID = 0x20000000
if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWPID) != 0:
    print(json.dumps({"skip": os.strerror(ctypes.get_errno())}))
    sys.exit(0)
(gate_r, gate_w), (shared_r, shared_w) = os.pipe(), os.pipe()
child = os.fork()
if child == 0:
    got = {"pid": os.getpid(), "parent": me}
    try:
        os.close(gate_w)
        shared = bind(gpus, path=path)
        got["shared"] = [list(shared.indices), shared.holder]
        os.close(shared_w)
        os.read(gate_r, 1)  # the parent released
        own = bind(gpus, path=path)
        got["own"] = [list(own.indices), own.holder]
    except Exception as error:
        got["error"] = f"{type(error).__name__}: {error}"
    finally:
        print(json.dumps(got), flush=True)
        os._exit(0)
for fd in (gate_r, shared_w):
    os.close(fd)
os.read(shared_r, 1)  # the child has bound (or failed)
parent.release()
os.close(gate_w)
os.waitpid(child, 0)
"""


def test_a_child_forked_into_a_new_pid_namespace_shares_its_parents_binding_while_the_parent_binds(path):
    bindings = binding.bindings_path(path)
    done = subprocess.run(
        [sys.executable, "-c", FORK_INTO_A_NEW_NAMESPACE, bindings],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    if "skip" in got:
        pytest.skip(f"cannot create a pid namespace here: {got['skip']}")
    assert got["pid"] == 1 and "error" not in got, got
    assert got["shared"] == [["0"], f"pid {got['parent']} (inherited)"]
    assert got["own"] == [["0"], "pid 1"]


# ---- the lease file deleted while its holders live (an age-based cleaner, docs/SECURITY.md) -----------


@pytest.mark.parametrize("kind", ["claim", "bind"])
def test_a_deleted_lease_file_never_turns_live_holders_into_dead_ones(path, workers, kind):
    """Holders A, B, C (each pid 1 of a container) take GPUs 0, 1, 2; a cleaner deletes the lease file; C
    dies and its successor creates a new one: A's and B's GPUs stay theirs, for another namespace and for
    ours (the old leases prove nothing on the new file, and our namespace judges the pids)."""
    target = binding.bindings_path(path) if kind == "bind" else str(path)

    def take(worker, count=1):
        if kind == "bind":
            return worker.ask(op="bind", gpus=gpus(4), count=count, bindings=target)
        answer = worker.claim(count, gpus(4))
        return {"bound": answer["taken"]} if "taken" in answer else answer

    a, b, c = workers(path), workers(path), workers(path, init=False)
    assert [take(w) for w in (a, b, c)] == [{"bound": ["0"]}, {"bound": ["1"]}, {"bound": ["2"]}]
    old_token = Path(f"{target}.lease").read_bytes()
    os.unlink(f"{target}.lease")
    c.die(target)
    successor = workers(path)
    assert take(successor) == {"bound": ["3"]}  # C's GPU 2 is of unknown liveness now: never handed out
    late = workers(path)
    answer = take(late)
    assert "error" in answer and "Could not" in answer["error"], answer
    assert Path(f"{target}.lease").read_bytes() != old_token  # a new lease file, with a token of its own
    entries = {
        e.index: e for e in (binding.snapshot(target) if kind == "bind" else coordination.snapshot(target)).entries
    }
    assert all(entries[i].alive for i in "013"), entries
    assert entries["0"].liveness == "unknown" and entries["0"].lease_file is not None  # not "lease released"
    if kind == "claim":  # ours too: the host's own claim takes nothing of theirs
        with pytest.raises(FlinkException, match="Could not get enough GPU resources"):
            coordination.claim(1, gpus(4), path=path)


def _delete_the_lease_file(path):
    os.unlink(f"{path}.lease")  # the next claim creates another


def _put_a_copy_in_its_place(path):  # cp + mv: a sed -i over the files, an editor, a restore
    lease = Path(f"{path}.lease")
    copy = lease.with_name("copy")
    shutil.copyfile(lease, copy)
    os.replace(copy, lease)


@pytest.mark.parametrize("replace", [_delete_the_lease_file, _put_a_copy_in_its_place])
def test_our_namespace_judges_a_holder_whose_lease_file_was_replaced_by_its_pid(path, replace):
    """A holder of our namespace keeps its GPU when the lease file is deleted and created again, or a copy is
    put in its place (the token, written for another inode, but none of the locks): its free byte there
    proves nothing, its pid and start time do."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from flink_gpu import coordination; "
            f"coordination.claim(1, ['0', '1'], path={str(path)!r}); print('ok', flush=True); "
            "sys.stdin.read()",
        ],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "ok\n"
        replace(path)
        assert coordination.claim(1, gpus(2), path=path).taken == ["1"]
        (first, _) = coordination.snapshot(path).entries
        assert (first.pid, first.alive, first.state) == (holder.pid, True, "live")
        with pytest.raises(FlinkException, match="Could not get enough GPU resources"):
            coordination.claim(2, gpus(2), path=path)
    finally:
        holder.kill()
        holder.wait(30)
        holder.stdin.close()
        holder.stdout.close()
    # once it is gone, its GPU comes back
    assert coordination.claim(2, gpus(2), path=path).taken == ["0", "1"]
    coordination.release(path=path)


def test_holders_keep_the_lease_files_times_fresh_for_age_based_cleaners(path):
    """systemd-tmpfiles deletes what has not been touched for its age (30 days in /var/tmp): a claimer
    refreshes the lease file's times, which nothing else writes."""
    coordination.claim(1, gpus(2), path=path)
    try:
        month_ago = time.time() - 31 * 86400
        os.utime(f"{path}.lease", (month_ago, month_ago))
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from flink_gpu import coordination; coordination.claim(1, ['0', '1'], path={str(path)!r})",
            ],
            env=child_env(),
        )
        assert done.returncode == 0
        st = os.stat(f"{path}.lease")
        assert st.st_mtime > time.time() - 3600 and st.st_atime > time.time() - 3600
    finally:
        coordination.release(path=path)


def test_list_and_doctor_never_take_pid_1_of_another_namespace_for_the_ancestor_of_our_processes(
    path, workers, tmp_path
):
    """A container's pid 1 holds GPU 0 (its lease proves it alive everywhere) while a process of ours runs
    on it: that process belongs to no holder here — our pid 1, the ancestor of every process of ours, is
    not the container's."""
    holder = workers(path)
    assert holder.pid == 1 and holder.claim(1, gpus(1)) == {"taken": ["0"]}
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"devices": [{"processes": [{"pid": stranger.pid, "kind": "compute"}]}]}))
        listed = json.loads(_cli("--simulate-spec", spec, "list", "--json", "--file", path).stdout)
        (gpu,) = listed["gpus"]
        assert [(p["pid"], p["holder"]) for p in gpu["processes"]] == [(stranger.pid, None)]
        assert [h["ours"] for h in gpu["holders"]] == [False]
        conf = tmp_path / "flink-conf.yaml"
        conf.write_text(
            "external-resources: gpu\nexternal-resource.gpu.amount: 1\n"
            "external-resource.gpu.driver-factory.class: flink_gpu.GPUDriverFactory\n"
            "external-resource.gpu.param.discovery-mode: nvml\n"
            "external-resource.gpu.param.discovery-script.args: --enable-coordination-mode "
            f"--coordination-file {path}\n"
        )
        doctor = json.loads(
            _cli("doctor", conf, "--simulate-spec", spec, "--json", "--taskmanagers-per-host", "1").stdout
        )
        busy = [f["message"] for f in doctor["findings"] if f["check"] == "gpu-state"]
        assert any(m.startswith("GPU 0 runs 1 process of no flink-gpu holder") for m in busy), busy
    finally:
        stranger.kill()
        stranger.wait()


def test_a_holder_that_claims_again_after_its_lease_file_was_deleted_moves_all_its_lines_to_the_new_lease(
    path, workers
):
    """Its older lines get the new lease too: when it dies, every GPU it held comes back in other namespaces,
    not only those it claimed last."""
    holder = workers(path, init=False)
    assert holder.claim(1, gpus(3)) == {"taken": ["0"]}
    os.unlink(f"{path}.lease")
    assert holder.claim(2, gpus(3)) == {"taken": ["0", "1"]}
    tokens = {e.lease_file for e in coordination.snapshot(path).entries}
    assert len(tokens) == 1, tokens
    holder.die(path)
    other = workers(path)
    assert other.claim(3, gpus(3)) == {"taken": ["0", "1", "2"]}


FORK_FROM_C = r"""
import ctypes, json, os, sys
from flink_gpu import coordination
path = sys.argv[1]
coordination.claim(1, ["0", "1"], path=path)
child = ctypes.CDLL(None, use_errno=True).fork()  # fork() from C: no os.register_at_fork hook runs
if child == 0:
    got = coordination.claim(1, ["0", "1"], path=path)
    released = coordination.release(path=path)
    os.write(1, json.dumps({"pid": os.getpid(), "owner": got.owner, "taken": got.taken,
                            "released": released}).encode() + b"\n")
    os._exit(0)
os.waitpid(child, 0)
print(json.dumps({"parent": os.getpid(), "file": open(path).read()}), flush=True)
"""


def test_a_child_forked_from_c_claims_for_itself_and_never_releases_its_parents_gpus(path):
    done = subprocess.run(
        [sys.executable, "-c", FORK_FROM_C, str(path)], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    child, parent = map(json.loads, done.stdout.splitlines())
    assert child["owner"] == child["pid"] != parent["parent"]
    assert child["taken"] == ["1"] and child["released"] == ["1"]
    assert parent["file"].startswith(f"0 {parent['parent']}\t")


def test_deleting_the_lease_file_while_holding_leaks_no_descriptor(path):
    for held in range(1, 6):  # each claim tops up, so it writes, and so takes a lease on the new file
        coordination.claim(held, gpus(6), path=path)
        os.unlink(f"{path}.lease")
    coordination.claim(6, gpus(6), path=path)
    assert len({e.lease_file for e in coordination.snapshot(path).entries}) == 1
    coordination.release(path=path)

    def target(fd):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            return ""

    leases = [t for t in map(target, os.listdir("/proc/self/fd")) if t.startswith(f"{path}.lease")]
    assert len(leases) <= 1, leases  # the one idle lease, of the file the path names now


# ---- a lease that cannot be proven (docs/design.md §5.2, §9.4) ----------------------------------------


@pytest.mark.parametrize("cause", ["full", "flock held"])
def test_a_lease_whose_token_could_not_be_written_never_frees_a_gpu_in_another_namespace(tmp_path, workers, cause):
    """Holder A (pid 1 of its namespace) claims GPU 0 while its lease file cannot get a token; the lease file is
    deleted and created again by a later claim: B (pid 1 of another namespace) must not take A's GPU, whose
    lease proves nothing on the new file. A's line says so (`lf=none`), and it stays visible and cleanable."""
    with small_tmpfs(tmp_path / "small") as small:
        path = small / "c"
        path.write_text("\n")  # the coordination file has its page: a line fits on the full filesystem
        a = workers(path)
        with tokenless_lease_file(path, cause):
            assert a.claim(1, gpus(1)) == {"taken": ["0"]}
        assert "\tlease=0\tlf=none" in path.read_text()
        os.unlink(f"{path}.lease")
        assert coordination.claim(1, gpus(2), path=path).taken == ["1"]  # creates a lease file, with a token
        b = workers(path)
        assert a.pid == b.pid == 1 and a.ns != b.ns
        answer = b.claim(1, gpus(1))
        assert answer.get("error", "").startswith("NotEnoughGpusError: Could not get enough GPU resources"), answer
        (held,) = [e for e in coordination.snapshot(path).entries if e.index == "0"]
        assert (held.namespace, held.alive, held.liveness, held.lease_file) == (a.ns, True, "unknown", None)
        assert [e.index for e in coordination.clean_stale(path, other_namespaces=True).removed] == ["0"]
        assert b.claim(1, gpus(1)) == {"taken": ["0"]}
        coordination.release(path=path)


def test_an_older_versions_line_without_a_token_never_frees_a_gpu_in_another_namespace(path, workers):
    """A line of a version before the lease file's token (`lease=N`, no `lf`) whose byte reads free on the
    lease file the path names now: that lease file may have been created after it, so B (pid 1 of another
    namespace) takes nothing of A's (pid 1 too), whose lease is on a deleted lease file."""
    a = workers(path)
    assert a.claim(1, gpus(1)) == {"taken": ["0"]}
    text = path.read_text()
    path.write_text(re.sub(r"\tlf=[0-9a-f]{16}", "", text))  # as the older version wrote it
    os.unlink(f"{path}.lease")
    assert coordination.claim(1, gpus(2), path=path).taken == ["1"]
    b = workers(path)
    assert a.pid == b.pid == 1 and a.ns != b.ns
    answer = b.claim(1, gpus(1))
    assert answer.get("error", "").startswith("NotEnoughGpusError: Could not get enough GPU resources"), answer
    coordination.release(path=path)


# ---- a coordination file named like another's lease file --------------------------------------------


def test_a_coordination_file_named_like_anothers_lease_file_keeps_its_owners(tmp_path, workers):
    """`X.lease` is the lease file of `X` and a valid coordination file name: a claim on `X` must never write
    its token over the owner record of `X.lease`, and a claim on `X.lease` never takes that GPU again."""
    x = tmp_path / "X"
    x_lease = tmp_path / "X.lease"
    a = workers(x_lease)
    assert a.claim(1, gpus(1)) == {"taken": ["0"]}
    before = x_lease.read_bytes()
    b = workers(x)
    assert a.pid == b.pid == 1 and a.ns != b.ns
    assert b.claim(1, gpus(1)) == {"taken": ["0"]}  # X's GPU 0, without a lease (X.lease is no lease file)
    assert x_lease.read_bytes() == before
    assert "\tlease=" not in x.read_text()
    c = workers(x_lease)
    answer = c.claim(1, gpus(1))
    assert answer.get("error", "").startswith("NotEnoughGpusError: Could not get enough GPU resources"), answer


# ---- other local users and lease bytes (docs/SECURITY.md) -------------------------------------------------


@pytest.fixture
def shared_path():
    """A coordination file in a directory where every local user may create names, sticky as /var/tmp is
    (pytest's tmp_path is private to root)."""
    directory = Path(tempfile.mkdtemp(prefix="flink-gpu-shared-", dir="/tmp"))
    directory.chmod(0o1777)
    yield directory / "coordination"
    shutil.rmtree(directory)


def as_another_user(code, *args):
    """Runs ``code`` as uid and gid 65534: a local user who is none of the workers."""
    drop = "import os, sys\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    return subprocess.run(
        [sys.executable, "-c", drop + textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
@pytest.mark.parametrize("kind", ["claim", "bind"])
def test_a_lease_file_another_user_forges_never_frees_a_live_holders_gpu(shared_path, workers, caplog, kind):
    """Holder A (pid 1 of a container) takes GPU 0; a cleaner deletes the lease file, and another local user puts
    one at its path that carries the old token for her inode, every byte free. B (pid 1 of another container)
    and the host must not take A's GPU, nor clean its line: her file is refused, and the warning names it."""
    target = Path(binding.bindings_path(shared_path)) if kind == "bind" else shared_path
    lease = f"{target}.lease"

    def take(worker, count):
        if kind == "bind":
            return worker.ask(op="bind", gpus=gpus(3), count=count, bindings=str(target))
        answer = worker.claim(count, gpus(3))
        return {"bound": answer["taken"]} if "taken" in answer else answer

    a, b = workers(shared_path), workers(shared_path)
    assert take(a, 1) == {"bound": ["0"]}
    token = lease_token(target)
    os.unlink(lease)
    forged = as_another_user(
        """
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, f"{sys.argv[2]} {os.fstat(fd).st_ino}\\nflink-gpu lease file\\n".encode())
        """,
        lease,
        token,
    )
    assert forged.returncode == 0 and os.stat(lease).st_uid == 65534, forged.stderr
    answer = take(b, 3)
    assert "error" in answer and "Could not" in answer["error"], answer
    assert take(b, 1) == {"bound": ["1"]}
    snapshot = binding.snapshot(target) if kind == "bind" else coordination.snapshot(target)
    assert {e.index: (e.pid, e.alive) for e in snapshot.entries} == {"0": (1, True), "1": (1, True)}
    if kind == "claim":
        assert coordination.clean_stale(target).removed == ()
        with caplog.at_level("WARNING", logger="flink_gpu.coordination"):
            assert coordination.claim(1, gpus(3), path=target).taken == ["2"]
        coordination.release(path=target)
        assert (
            f"Refusing to use the lease file {lease}: it is owned by uid 65534, not by root (mode 0644)" in caplog.text
        )
        assert "Remove it" in caplog.text and "docs/SECURITY.md" in caplog.text


def _read_lock_as_it_dies(lease, slot):
    """A process that opened ``lease`` and waits to read-lock byte ``slot``: it gets it the moment the byte's
    holder dies, and keeps it."""
    code = (
        "import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, int(sys.argv[2]), 1, 0)); "
        "print('locked', flush=True); sys.stdin.readline()"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, lease, str(slot)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_read_lock_on_a_dying_holders_lease_byte_never_keeps_its_gpu_where_its_pid_tells(path, workers):
    """Holder H of our namespace (GPU 0) and A, pid 2 of a container (GPU 1), die while another process
    read-locks their lease bytes. Here H's missing pid is death whatever its byte says: `clean` removes its line
    and a claim takes its GPU. A's line, of a namespace nobody here can probe, says "lease held" with liveness
    unknown (never "alive") to us and to B, pid 2 of another container: taken until the reader lets go."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from flink_gpu import coordination; "
            f"coordination.claim(1, ['0'], path={str(path)!r}); print('ok', flush=True); sys.stdin.read()",
        ],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    readers = []
    try:
        assert holder.stdout.readline() == "ok\n"
        a, b = workers(path, init=False), workers(path, init=False)  # pid 2 each: it can kill itself
        assert a.claim(1, gpus(3)) == {"taken": ["1"]}
        leases = {e.index: e.lease for e in coordination.snapshot(path).entries}
        readers = [_read_lock_as_it_dies(f"{path}.lease", leases[i]) for i in "01"]
        holder.kill()
        assert a.ask(op="die") == {"dying": 2}
        assert [r.stdout.readline() for r in readers] == ["locked\n", "locked\n"]
        assert b.ask(op="states") == {"0": ["lease held", "unknown"], "1": ["lease held", "unknown"]}
        assert "error" in b.claim(2, gpus(3))
        assert [(e.index, e.state) for e in coordination.clean_stale(path).removed] == [("0", "gone")]
        assert coordination.snapshot(path).entries[0].state == "lease held"
        assert coordination.claim(2, gpus(3), path=path).taken == ["0", "2"]
        coordination.release(path=path)
        readers[1].stdin.close()
        readers[1].wait(10)
        assert b.claim(1, ["1"]) == {"taken": ["1"]}  # once the reader let go, A's death shows
    finally:
        holder.kill()
        holder.wait(10)
        for stream in (holder.stdin, holder.stdout):
            stream.close()
        for reader in readers:
            reader.kill()
            reader.wait(10)
            reader.stdout.close()
