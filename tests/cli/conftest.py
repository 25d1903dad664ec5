"""Fixtures of the command-line tests: processes that hold or bind GPUs, a simulated host whose GPUs have a state."""

import json
import subprocess
import sys

import pytest

from conftest import dead_pid


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
