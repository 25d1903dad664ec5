"""A process-mode TaskManager whose Python worker binds GPUs for it, and the TaskManager SIGKILLed (as the OOM
killer does) while the worker lives on, reparented: an orphan (docs/design.md §9.3)."""

import json
import os
import select
import signal
import subprocess
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from conftest import child_env
from support.waiting import wait_until

# A worker: binds GPU(s) argv[2] (comma-separated) in the bindings file argv[1] for its parent, the
# TaskManager, as bind_gpus does in process mode, with the memory request argv[3] ("-": none) on the simulator;
# prints {"pid", "bound"} and holds until stdin closes.
WORKER = """
import json, os, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
from flink_gpu.nvml import open_library
path, gpus, memory = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
binding = bind([GPUInfo(i) for i in gpus], path=path, taskmanager_pid=os.getppid(),
               library_path=open_library().library_path, memory=None if memory == "-" else memory)
print(json.dumps({"pid": os.getpid(), "bound": list(binding.indices)}), flush=True)
sys.stdin.read()
"""

# A process-mode TaskManager: runs the worker argv[1] (with argv[2:]) on its own stdin, stdout and stderr.
TASKMANAGER = """
import subprocess, sys
subprocess.run([sys.executable, "-c", *sys.argv[1:]])
"""


def process_state(pid: int) -> "str | None":
    """The state letter of /proc/<pid>/stat; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


def stop(pid: int) -> None:
    """SIGSTOPs ``pid`` and waits until it is stopped (at most 10 s): a worker that cannot give its binding up
    itself (hung, or of a version that does not watch its TaskManager)."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: process_state(pid) == "T", f"pid {pid} has stopped", 10, 0.001)


def read_until(pipe: Any, read: str, until: str, timeout: float = 30) -> str:
    """``read`` (what was read of ``pipe`` so far) and what ``pipe`` gives next, read raw (its text wrapper's buffer
    is never used), until it holds ``until`` (at most ``timeout`` s) or the pipe ends."""
    fd = pipe.fileno()
    got = [read, False]  # what was read, whether the pipe ended

    def holds_it() -> bool:
        if until not in got[0] and select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 65536)
            got[0] += chunk.decode()
            got[1] = not chunk
        return until in got[0] or got[1]

    try:
        wait_until(holds_it, f"{until!r} was read", timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; read {got[0]!r}") from None
    return got[0]


class Orphan:
    """The worker (``pid``) and its dead TaskManager (``taskmanager``); ``bound``: the GPUs it bound."""

    def __init__(self, taskmanager: subprocess.Popen, report: "dict[str, Any]") -> None:
        self._taskmanager = taskmanager
        self.taskmanager = taskmanager.pid
        self.pid: int = report["pid"]
        self.bound: "list[str]" = report["bound"]
        self.stderr = ""  # what the worker wrote to stderr so far (read_stderr)

    def read_stderr(self, until: str, timeout: float = 30) -> str:
        """What the worker wrote to stderr, once it holds ``until`` (at most ``timeout`` s), or the worker ended."""
        assert self._taskmanager.stderr is not None
        self.stderr = read_until(self._taskmanager.stderr, self.stderr, until, timeout)
        return self.stderr

    def finish(self) -> str:
        """Ends the worker (its stdin closes, or SIGKILL where it is stopped) and returns what it wrote to
        stderr, read to its end: once the worker is gone."""
        assert self._taskmanager.stdin is not None
        if process_state(self.pid) == "T":
            os.kill(self.pid, signal.SIGKILL)
        if not self._taskmanager.stdin.closed:
            self._taskmanager.stdin.close()
        return self.read_stderr(until="\0")  # nothing writes a NUL: to the end


@contextmanager
def orphaned_worker(
    bindings: "str | os.PathLike[str]",
    spec: "str | os.PathLike[str]",
    gpus: str = "0",
    memory: "str | None" = None,
    stopped: bool = False,
) -> "Iterator[Orphan]":
    """A TaskManager starts a worker that binds ``gpus`` of the simulated host ``spec`` in ``bindings`` for it
    with ``memory``; the TaskManager is then SIGKILLed and reaped (the worker, ``stopped`` first where asked,
    lives on). The worker ends with the block."""
    from flink_gpu import simulator

    taskmanager = subprocess.Popen(
        [sys.executable, "-c", TASKMANAGER, WORKER, os.fspath(bindings), gpus, memory or "-"],
        env=child_env(**simulator.environment(spec=spec)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert taskmanager.stdout is not None
    line = taskmanager.stdout.readline()
    if not line:
        taskmanager.kill()
        raise AssertionError(f"the worker did not bind: {taskmanager.communicate()[1]}")
    orphan = Orphan(taskmanager, json.loads(line))
    try:
        if stopped:
            stop(orphan.pid)
        taskmanager.kill()
        taskmanager.wait(30)  # reaped: its pid names no process now, and the worker is reparented
        yield orphan
    finally:
        if process_state(orphan.pid) not in (None, "Z"):
            os.kill(orphan.pid, signal.SIGKILL)
        orphan.finish()
        for stream in (taskmanager.stdin, taskmanager.stdout, taskmanager.stderr):
            if stream is not None:
                stream.close()
