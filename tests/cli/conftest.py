"""Fixtures of the command-line tests: processes that hold or bind GPUs, a simulated host whose GPUs have a state."""

import json
import subprocess
import sys

import pytest

from conftest import child_env, dead_pid
from flink_gpu import simulator


@pytest.fixture
def holder():
    """A live process that can own GPUs (it waits on stdin)."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield process
    process.stdin.close()
    process.wait(10)


# a holder that runs a child of its own (say a DataLoader worker) and prints that child's pid
HOLDER_WITH_CHILD = (
    "import subprocess, sys\n"
    "child = subprocess.Popen(['sleep', '600'])\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "child.kill()\n"
)


@pytest.fixture
def state_host(tmp_path):
    """A 4-GPU simulated host: GPU 0 degraded, GPU 1 unhealthy, GPU 2 claimed by a holder whose
    child runs on it, GPU 3 running an unrelated process and a pid no one here can see."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_WITH_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    stranger = subprocess.Popen(["sleep", "600"])
    gone = dead_pid()
    try:
        child = int(holder.stdout.readline())
        spec = tmp_path / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "devices": [
                        {"health": {"row_remap_pending": True}, "memory_used": 3 * 2**30},
                        {"health": {"row_remap_failure": True}},
                        {"processes": [{"pid": child, "used_memory": 2**30, "kind": "compute"}]},
                        {
                            "processes": [
                                {"pid": stranger.pid, "used_memory": 2**29, "kind": "graphics"},
                                {"pid": gone, "kind": "compute"},
                            ]
                        },
                    ]
                }
            )
        )
        coord = tmp_path / "coord"
        coord.write_text(f"2 {holder.pid}\n")  # the holder holds GPU 2, as the stock script writes
        yield {
            "spec": spec,
            "coord": coord,
            "holder": holder.pid,
            "child": child,
            "stranger": stranger.pid,
            "gone": gone,
        }
    finally:
        stranger.kill()
        stranger.wait()
        holder.stdin.close()
        holder.wait(10)


# Binds with a memory request and holds until its stdin closes; prints the bound indices, its pid and the pid of
# the child it runs ("-": none). ``tm`` "self": a thread-mode slot, the process itself its TaskManager.
MEMORY_BINDER = """\
import os, subprocess, sys
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
path, gpus, count, share, memory, slot, tm, child = sys.argv[1:9]
binding = bind([GPUInfo(i) for i in gpus.split(",")], int(count), int(share), path=path,
               slot=None if slot == "-" else slot, taskmanager_pid=os.getpid() if tm == "self" else None,
               memory=None if memory == "-" else memory)
worker = subprocess.Popen(["sleep", "600"]) if child == "child" else None
print(",".join(binding.indices), os.getpid(), worker.pid if worker else "-", flush=True)
sys.stdin.read()
if worker:
    worker.kill()
"""


@pytest.fixture
def memory_binders(tmp_path):
    """``bind(path, spec, gpus, memory, count=1, share=1, slot=None, child=False)``: a live process that binds
    ``gpus`` of the simulated host ``spec`` (a spec file) with the memory request ``memory`` (Flink's size text,
    or None) through the real core, and holds until the test ends; a ``slot`` is a thread-mode slot whose
    TaskManager is that process; ``child``: it runs a child (its CUDA worker, say). Gives (process, bound
    indices, its pid, its child's pid or None)."""
    script = tmp_path / "memory_binder.py"
    script.write_text(MEMORY_BINDER)
    processes = []

    def bind(path, spec, gpus, memory, count=1, share=1, slot=None, child=False):
        process = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(path),
                ",".join(gpus),
                str(count),
                str(share),
                "-" if memory is None else memory,
                slot or "-",
                "self" if slot else "-",
                "child" if child else "-",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(**simulator.environment(spec=spec)),
        )
        processes.append(process)
        line = process.stdout.readline()
        assert line, f"the binder of {gpus} failed"
        indices, pid, worker = line.split()
        return process, indices.split(","), int(pid), None if worker == "-" else int(worker)

    yield bind
    for process in processes:
        process.stdin.close()
        process.wait(10)
