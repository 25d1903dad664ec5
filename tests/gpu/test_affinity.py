"""flink_gpu.pin_to_gpus: every thread pinned to the GPUs' local CPUs (docs/design.md §9.1).

Pinning changes the calling process, so each case runs in a child interpreter started through a
real ``taskset``, which restricts the CPUs that child may use before it pins.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import flink_gpu
from flink_gpu import GPUInfo
from flink_gpu.gpu.affinity import format_cpulist, parse_cpulist

SRC = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))
CPUS = sorted(os.sched_getaffinity(0))

# the child: start threads, pin, then read every task's mask as the kernel reports it
CHILD = textwrap.dedent("""
    import json, logging, os, sys, threading
    from flink_gpu import GPUInfo, pin_to_gpus

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    ready, done, tids = threading.Barrier(4), threading.Event(), []

    def worker():
        tids.append(threading.get_native_id())
        ready.wait()
        done.wait()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    ready.wait()
    affinities = json.loads(sys.argv[1])
    infos = [GPUInfo(str(i), {} if a is None else {"cpu.affinity": a})
             for i, a in enumerate(affinities)]
    for _ in range(int(sys.argv[2])):  # as every subtask's open() of one worker process pins
        applied = pin_to_gpus(infos)
    masks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as status:
            for line in status:
                if line.startswith("Cpus_allowed_list:"):
                    masks[tid] = line.split(":", 1)[1].strip()
    done.set()
    for thread in threads:
        thread.join()
    print(json.dumps({"applied": sorted(applied), "masks": masks, "threads": tids,
                      "main": threading.get_native_id()}))
""")


def pin_in_child(mask, affinities, times=1):
    """Run CHILD under ``taskset -c mask``, pinning ``times`` to GPUs with ``affinities`` (None: unknown)."""
    taskset = shutil.which("taskset")
    assert taskset, "taskset (util-linux) is needed to restrict the child's CPUs"
    result = subprocess.run(
        [taskset, "-c", mask, sys.executable, "-c", CHILD, json.dumps(affinities), str(times)],
        env=dict(os.environ, PYTHONPATH=SRC),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(result.stdout), result.stderr


@pytest.fixture
def two_cpus():
    if len(CPUS) < 2:
        pytest.skip("pinning needs at least two CPUs this process may use")
    return CPUS[0], CPUS[1]


def test_every_thread_is_pinned_to_the_gpus_cpus_within_the_allowed_mask(two_cpus):
    first, second = two_cpus
    # the GPU's local CPUs include ones taskset forbids and one it allows
    doc, stderr = pin_in_child(f"{first},{second}", [f"{second},{max(CPUS) + 1}-{max(CPUS) + 4}"])
    assert doc["applied"] == [second]
    # the main thread and the three started before pinning, each read from /proc/self/task
    assert set(doc["masks"]) == {str(tid) for tid in doc["threads"] + [doc["main"]]}
    assert set(doc["masks"].values()) == {str(second)}
    assert "WARNING" not in stderr


def test_the_set_is_the_union_of_the_gpus_cpus(two_cpus):
    first, second = two_cpus
    doc, _ = pin_in_child(f"{first},{second}", [str(first), str(second), None])
    assert doc["applied"] == [first, second]
    assert set(doc["masks"].values()) == {format_cpulist([first, second])}


def test_an_empty_intersection_changes_nothing_and_warns(two_cpus):
    first, second = two_cpus
    doc, stderr = pin_in_child(str(first), [str(second)])
    assert doc["applied"] == [first]  # the current set
    assert set(doc["masks"].values()) == {str(first)}
    assert (
        "WARNING Not pinning to the GPUs' CPUs: none of them (GPU Device(0): "
        f"{second}) is among the CPUs this process may use ({first}); the affinity is "
        "unchanged." in stderr
    )


def test_infos_without_cpu_affinity_change_nothing_and_say_so_once_per_process_without_a_warning(two_cpus):
    """A driver that reports no CPU affinity (the simulator, some VMs) is no fault: one INFO, however many
    subtasks of the process pin."""
    first, second = two_cpus
    doc, stderr = pin_in_child(f"{first},{second}", [None, None], times=3)
    assert doc["applied"] == [first, second]
    assert set(doc["masks"].values()) == {format_cpulist([first, second])}
    assert stderr.splitlines() == [
        "INFO Not pinning to the GPUs' CPUs: no GPU info has a cpu.affinity property (NVML reports none on the "
        "simulator and some VMs, a discovery script none at all); the affinity is unchanged."
    ]


def test_a_malformed_cpu_affinity_names_the_gpu_and_the_value():
    with pytest.raises(ValueError) as error:
        flink_gpu.pin_to_gpus([GPUInfo("3", {"cpu.affinity": "0-x"})])
    assert str(error.value) == (
        "The cpu.affinity of GPU Device(3) is not usable: '0-x' is not a CPU list such as '0-15,32-47'."
    )


@pytest.mark.parametrize(
    "text, cpus", [("0", {0}), ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("5-5", {5}), (" 2 , 4-5", {2, 4, 5})]
)
def test_cpulists_are_read_as_linux_writes_them(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1-", "1,,2"])
def test_a_malformed_cpulist_is_a_value_error_naming_it(text):
    with pytest.raises(ValueError, match="is not a CPU list such as '0-15,32-47'"):
        parse_cpulist(text)


def test_cpulists_are_written_as_linux_writes_them():
    assert format_cpulist([5, 0, 1, 2, 8, 9]) == "0-2,5,8-9"
    assert format_cpulist([]) == ""


def test_pin_to_gpus_is_public_and_loaded_on_first_use():
    code = (
        "import sys, flink_gpu\n"
        "assert 'flink_gpu.gpu.affinity' not in sys.modules\n"
        "from flink_gpu.gpu.affinity import pin_to_gpus\n"
        "assert flink_gpu.pin_to_gpus is pin_to_gpus and 'pin_to_gpus' in flink_gpu.__all__\n"
        "import flink_gpu.gpu\n"
        "assert flink_gpu.gpu.pin_to_gpus is pin_to_gpus\n"
    )
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC), check=True)
