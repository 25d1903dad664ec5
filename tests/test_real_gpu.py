"""Checks that need a real NVIDIA GPU and driver (marker ``real_gpu``; tools/real_gpu_check.sh runs them on a
machine with one). Elsewhere they skip, saying so: the simulator-backed tests cover the same paths."""

import shutil
import subprocess
import sys

import pytest

from conftest import child_env

pytestmark = pytest.mark.real_gpu


def _real_gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return done.stdout.count("\nGPU ") + done.stdout.startswith("GPU ") if done.returncode == 0 else 0


GPUS = _real_gpu_count()
needs_gpu = pytest.mark.skipif(
    GPUS == 0, reason="no NVIDIA GPU here (nvidia-smi -L lists none): run tools/real_gpu_check.sh on a machine with one"
)


def _run(code: str):
    """``code`` in a child interpreter on the driver's own libnvidia-ml.so.1 (no simulator variables): what
    it prints as JSON."""
    import json

    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_gpu
def test_the_native_enumeration_matches_pynvml():
    code = (
        "import json, pynvml\n"
        "from flink_gpu.nvml import open_library\n"
        "ours = [(d.gpu_index, d.uuid, d.name) for d in open_library().devices().devices if d.mig_slot is None]\n"
        "pynvml.nvmlInit()\n"
        "theirs = [(str(i), pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h))\n"
        "          for i in range(pynvml.nvmlDeviceGetCount()) for h in [pynvml.nvmlDeviceGetHandleByIndex(i)]]\n"
        "print(json.dumps([ours, theirs]))\n"
    )
    ours, theirs = _run(code)
    migless = {u for _, u, _ in ours}
    assert [tuple(t) for t in theirs if t[1] in migless] == [tuple(o) for o in ours]


# A retrieve of 1 GPU on the driver: its info's properties.
RETRIEVE_ONE = """
import json
from flink_gpu import GPUDriver
with GPUDriver({"discovery-mode": "nvml"}) as d:
    infos = d.retrieve_resource_info(1)
print(json.dumps([{k: i.get_property(k) for k in i.get_keys()} for i in infos]))
"""


@needs_gpu
def test_a_retrieval_on_the_real_driver_reads_each_gpus_state():
    (info,) = _run(RETRIEVE_ONE)
    assert info["health"] == "ok" or info["health"].startswith(("degraded: ", "unhealthy: ")), info
    assert int(info["memory.used"]) >= 0 and int(info["memory.free"]) > 0


@needs_gpu
def test_flink_gpu_discovery_answers_on_the_real_driver(discovery_exe):
    done = subprocess.run([str(discovery_exe), "1"], env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(",")[0].replace(":", "").isdigit()


# Holds a CUDA context on GPU 0 until its stdin closes.
CUDA_CONTEXT = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
device, context = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) == 0
print("held", flush=True)
sys.stdin.read()
"""


@needs_gpu
def test_a_cuda_context_shows_as_memory_in_use_so_that_a_claim_lists_its_process():
    """A claim reads a GPU's process lists only where its memory (v2) shows 1 MiB or more in use
    (docs/design.md §9.1, query plan): on the real driver a CUDA context must, or the GPU would look idle."""
    holder = subprocess.Popen(
        [sys.executable, "-c", CUDA_CONTEXT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
    )
    try:
        if holder.stdout.readline().strip() != "held":
            pytest.skip("no CUDA context could be created on GPU 0 (libcuda.so.1)")
        # the holder is this test's child, as is the claim: its process is own, GPU 0 handed out
        (info,) = _run(RETRIEVE_ONE)
    finally:
        holder.communicate("")
    if info["index"] != "0":
        pytest.skip(f"GPU 0 is not the GPU handed out ({info['index']}: MIG, or not healthy)")
    assert int(info["memory.used"]) >= 1 << 20, info
    assert int(info["processes"]) >= 1, info
