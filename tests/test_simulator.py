"""flink_gpu.simulator's limits are the C++ simulator's (csrc/simulator): the Python side checks
them before the simulator runs, so each pair is held together by what the simulator does."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import child_env, run_python, simulated_env
from flink_gpu import simulator
from flink_gpu.base.regular_files import MAX_FILE_SIZE
from support.faults import _odd_path
from support.waiting import SOURCE as WAITING_SOURCE


def discover(discovery_exe, **env):
    """flink-gpu-discovery 1 against the simulator, configured by ``env`` alone (no Python check)."""
    environment = child_env(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), **env)
    return subprocess.run([discovery_exe, "1"], env=environment, capture_output=True, text=True, timeout=60)


def test_max_devices_is_the_most_the_simulator_takes(discovery_exe):
    proc = discover(discovery_exe, FLINK_GPU_SIM_DEVICES=str(simulator.MAX_DEVICES))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr
    proc = discover(discovery_exe, FLINK_GPU_SIM_DEVICES=str(simulator.MAX_DEVICES + 1))
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        f"FLINK_GPU_SIM_DEVICES={simulator.MAX_DEVICES + 1} is not a device count (0..{simulator.MAX_DEVICES})"
    ) in proc.stderr


def test_the_spec_size_limit_is_the_one_for_every_file(discovery_exe, tmp_path):
    spec = tmp_path / "spec.json"
    document = json.dumps({"devices": [{}, {}]}).encode()
    spec.write_bytes(document + b" " * (MAX_FILE_SIZE - len(document)))  # exactly the limit
    assert len(simulator.read_spec(spec)["devices"]) == 2
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr
    with open(spec, "ab") as handle:
        handle.write(b" ")
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"cannot use FLINK_GPU_SIM_SPEC={spec}: it is larger than 16 MiB" in proc.stderr
    assert MAX_FILE_SIZE == 16 * 2**20  # the size the simulator's message names


@pytest.mark.parametrize(
    "device, key, words",
    [
        ({"utilization": 101}, "utilization", "must be a whole number (0..100)"),
        ({"utilization": 2.5}, "utilization", "must be a whole number (0..100)"),
        ({"temperature": -1}, "temperature", "must be a whole number (0..200)"),
        ({"temperature": "hot"}, "temperature", "must be a whole number (0..200)"),
        ({"power": -0.001}, "power", "must be a number of watts (0..4294967.295)"),
        ({"power": 4294967.296}, "power", "must be a number of watts (0..4294967.295)"),
        ({"power": "250W"}, "power", "must be a number of watts (0..4294967.295)"),
        ({"power": True}, "power", "must be a number of watts (0..4294967.295)"),
        ({"not_supported": ["fan"]}, "not_supported", "utilization, temperature, power"),
        (
            {"health": {"state_error": "GPU_IS_LOST", "state_error_when_exists": 1}},
            "health.state_error_when_exists",
            "must be a string",
        ),
        ({"health": {"lost_handle_when_exists": ["/tmp/x"]}}, "health.lost_handle_when_exists", "must be a string"),
    ],
)
def test_a_bad_live_reading_is_rejected_naming_the_key_by_both_checkers(discovery_exe, tmp_path, device, key, words):
    with pytest.raises((TypeError, ValueError), match=re.escape(f"devices[0].{key}")) as raised:
        simulator.environment(spec={"devices": [device]})
    assert words in str(raised.value)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [device]}))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"devices[0].{key}" in proc.stderr and words in proc.stderr


def test_the_live_readings_at_their_limits_are_accepted_by_both(discovery_exe, tmp_path):
    spec = {
        "devices": [
            {
                "utilization": 100,
                "temperature": 200,
                "power": 4294967.295,
                "not_supported": ["utilization", "temperature", "power"],
            },
            {"utilization": 0, "temperature": 0, "power": 0, "no_permission": ["power"]},
        ]
    }
    simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr


def test_a_mig_instance_has_no_live_readings_to_pin():
    with pytest.raises(ValueError, match=re.escape("devices[0].mig.instances[0] has unknown keys ['power']")):
        simulator.environment(spec={"devices": [{"mig": {"mode": "enabled", "instances": [{"slot": 0, "power": 1}]}}]})


# --- the driver model: latency, the driver lock, hanging queries, persistence mode, counters -----

NVML_CHILD = (
    WAITING_SOURCE
    + """
import ctypes, json, os, sys, threading
from flink_gpu import simulator
nvml = ctypes.CDLL(os.environ["FLINK_GPU_NVML_LIBRARY"])
assert nvml.nvmlInit_v2() == 0

def handle(index):
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) == 0
    return h

def power(h):
    milliwatts = ctypes.c_uint()
    return nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(milliwatts))

def memory(h):
    info = (ctypes.c_ulonglong * 3)()
    return nvml.nvmlDeviceGetMemoryInfo(h, info)

def held():
    return simulator.counters()["driver_lock_held_ns"]

def wait_for_call(function, device):
    # the call has entered the driver once the simulator counted it
    wait_until(lambda: simulator.counters()["calls"].get(function, {}).get(device, 0) > 0,
               f"{function} of GPU {device} has entered the driver", 60, 0.001)
"""
)


def run_nvml_child(code, spec, **kwargs):
    """``code`` after NVML_CHILD in a process pointed at the simulator with ``spec``; its stdout as JSON."""
    proc = run_python(NVML_CHILD + textwrap.dedent(code), env=simulated_env(spec=spec, **kwargs))
    return json.loads(proc.stdout)


def test_each_query_spends_its_family_latency_holding_the_driver_lock():
    spec = {
        "devices": [{}, {"persistence_mode": "disabled"}],
        "latency_ms": {"power": 50, "handle": 5, "first_handle": 30, "first_handle_without_persistence": 200},
    }
    got = run_nvml_child(
        """
        before = held(); h0 = handle(0); first0 = held() - before
        before = held(); handle(0); again0 = held() - before
        before = held(); h1 = handle(1); first1 = held() - before
        before = held(); assert power(h0) == 0 and power(h1) == 0; powers = held() - before
        print(json.dumps({"first0": first0, "again0": again0, "first1": first1, "powers": powers,
                          "calls": simulator.counters()["calls"]}))
    """,
        spec,
    )
    assert got["first0"] >= 30e6  # a GPU's first handle in the process
    assert got["again0"] >= 5e6  # lower bounds only: a loaded machine may sleep longer than asked, never less
    assert got["first1"] >= 200e6  # the first handle of a GPU without persistence mode
    assert got["powers"] >= 2 * 50e6
    assert got["calls"]["nvmlDeviceGetHandleByIndex_v2"] == {"0": 2, "1": 1}
    assert got["calls"]["nvmlDeviceGetPowerUsage"] == {"0": 1, "1": 1}
    assert got["calls"]["nvmlInit_v2"] == {"host": 1}


def test_reset_counters_starts_the_counts_and_the_clock_again():
    got = run_nvml_child(
        """
        h = handle(0)
        power(h)
        simulator.reset_counters()
        after_reset = simulator.counters()
        power(h); power(h)
        print(json.dumps({"after_reset": after_reset, "now": simulator.counters()}))
    """,
        {"devices": [{}], "latency_ms": {"power": 10}},
    )
    assert got["after_reset"]["calls"] == {} and got["after_reset"]["driver_lock_held_ns"] == 0
    assert got["after_reset"]["elapsed_ns"] < got["now"]["elapsed_ns"]
    assert got["now"]["calls"] == {"nvmlDeviceGetPowerUsage": {"0": 2}}
    assert got["now"]["driver_lock_held_ns"] >= 2 * 10e6
    assert got["now"]["elapsed_ns"] >= got["now"]["driver_lock_held_ns"]


def test_counters_need_the_simulator_loaded_in_the_process():
    proc = run_python(
        """
        from flink_gpu import simulator
        try:
            simulator.counters()
        except RuntimeError as error:
            print(error)
    """,
        env=child_env(),
    )
    assert "The NVML simulator is not loaded in this process" in proc.stdout


@pytest.mark.parametrize("driver_lock", [True, False])
def test_a_hung_query_holds_the_driver_lock_until_its_file_is_removed(tmp_path, driver_lock):
    release = tmp_path / "hang"
    release.touch()
    spec = {
        "devices": [{}, {}],
        "driver_lock": driver_lock,
        "hang": [{"query": "power", "device": 0, "while_exists": str(release)}],
    }
    got = run_nvml_child(
        f"""
        release = {str(release)!r}
        h0, h1 = handle(0), handle(1)
        power(h1)  # the rule names GPU 0 only
        hung_done, other_done, seen = threading.Event(), threading.Event(), {{}}
        def hung():
            seen["rc"] = power(h0)
            seen["file_at_answer"] = os.path.exists(release)
            hung_done.set()
        def other():
            seen["other_rc"] = memory(h1)
            # the file, not the hung thread's event: that thread may resume after this one although its
            # call returned first (the other waits for the driver lock, which the hung call holds until
            # the file is gone)
            seen["file_at_other_answer"] = os.path.exists(release)
            other_done.set()
        threading.Thread(target=hung).start()
        wait_for_call("nvmlDeviceGetPowerUsage", "0")
        threading.Thread(target=other).start()
        # with the driver lock the other call waits for the hung one; without, it answers
        seen["other_answered_while_hung"] = other_done.wait(0.5 if {driver_lock} else 30)
        os.unlink(release)
        assert hung_done.wait(30) and other_done.wait(30)
        print(json.dumps(seen))
    """,
        spec,
    )
    assert got["rc"] == 0 and got["other_rc"] == 0
    assert got["file_at_answer"] is False  # it answered only once released
    assert got["other_answered_while_hung"] is not driver_lock
    assert got["file_at_other_answer"] is not driver_lock


def test_a_hang_is_released_by_another_process(tmp_path):
    release = tmp_path / "hang"
    spec = {"devices": [{}], "hang": [{"query": "handle", "while_exists": str(release)}]}
    code = NVML_CHILD + textwrap.dedent(f"""
        done = threading.Event()
        result = {{}}
        def call():
            result["rc"] = nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(ctypes.c_void_p()))
            result["file_at_answer"] = os.path.exists({str(release)!r})
            done.set()
        threading.Thread(target=call).start()
        wait_for_call("nvmlDeviceGetHandleByIndex_v2", "0")
        print("entered", flush=True)
        done.wait()
        print(json.dumps(result), flush=True)
    """)
    env = simulated_env(spec=spec)
    import flink_gpu

    env["PYTHONPATH"] = str(Path(flink_gpu.__file__).resolve().parent.parent)
    with simulator.hanging(release) as path:
        assert Path(path).exists()
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "entered\n"
        except BaseException:
            proc.kill()
            raise
    assert not release.exists()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert json.loads(out) == {"rc": 0, "file_at_answer": False}


def test_a_child_forked_while_another_thread_holds_the_driver_lock_can_call_nvml(tmp_path):
    # the real loader forks (a DataLoader worker) and initialises NVML again in the child, while a
    # thread of the parent may be inside a call: the child has no such thread to release the lock
    release = tmp_path / "hang"
    release.touch()
    spec = {"devices": [{}, {}], "hang": [{"query": "power", "while_exists": str(release)}]}
    got = run_nvml_child(
        f"""
        import select
        hung = threading.Thread(target=power, args=(handle(0),))
        hung.start()
        wait_for_call("nvmlDeviceGetPowerUsage", "0")
        answer, answer_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            count = ctypes.c_uint()
            rc = nvml.nvmlInit_v2(), nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
            os.write(answer_out, json.dumps([*rc, count.value]).encode())
            os._exit(0)
        os.close(answer_out)
        answered = select.select([answer], [], [], 30)[0]  # bounds a child stuck on the lock
        child = json.loads(os.read(answer, 100)) if answered else "no answer"
        if not answered:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.unlink({str(release)!r})
        hung.join()
        print(json.dumps(child))
    """,
        spec,
    )
    assert got == [0, 0, 2]


def test_the_driver_lock_time_is_counted_from_the_reset_on(tmp_path):
    release = tmp_path / "hang"
    release.touch()
    spec = {"devices": [{}], "hang": [{"query": "power", "while_exists": str(release)}]}
    got = run_nvml_child(
        f"""
        import time
        hung = threading.Thread(target=power, args=(handle(0),))
        hung.start()
        wait_for_call("nvmlDeviceGetPowerUsage", "0")
        time.sleep(0.3)  # lock time before the reset: the interval the counters must leave out
        simulator.reset_counters()
        os.unlink({str(release)!r})
        hung.join()
        print(json.dumps(simulator.counters()))
    """,
        spec,
    )
    assert 0 < got["driver_lock_held_ns"] <= got["elapsed_ns"]


def test_a_call_late_in_the_process_exit_does_not_crash_it():
    # a thread of the process (the metrics sampler, a sample of many slow calls) may still call NVML
    # while exit() runs; here a handler that exit() runs after the simulator's own exit work calls it
    proc = run_python(
        """
        import ctypes, os
        nvml = ctypes.CDLL(os.environ["FLINK_GPU_NVML_LIBRARY"])
        late = ctypes.cast(nvml.flinkgpuSimResetCounters, ctypes.c_void_p)
        # registered before the simulator's first call, so exit() runs it after the simulator's exit work
        assert ctypes.CDLL(None).__cxa_atexit(late, None, None) == 0
        assert nvml.nvmlInit_v2() == 0
        assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(ctypes.c_void_p())) == 0
    """,
        env=simulated_env(devices=1),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_persistence_mode_answers_as_the_spec_says():
    spec = {
        "devices": [
            {},
            {"persistence_mode": "disabled"},
            {"not_supported": ["persistence_mode"]},
            {"no_permission": ["persistence_mode"]},
        ]
    }
    got = run_nvml_child(
        """
        answers = []
        for i in range(4):
            mode = ctypes.c_int(-1)
            rc = nvml.nvmlDeviceGetPersistenceMode(handle(i), ctypes.byref(mode))
            answers.append([rc, mode.value])
        print(json.dumps(answers))
    """,
        spec,
    )
    # NVML_FEATURE_ENABLED 1, _DISABLED 0; NVML_ERROR_NOT_SUPPORTED 3, _NO_PERMISSION 4
    assert got == [[0, 1], [0, 0], [3, -1], [4, -1]]


def test_another_process_writes_its_counters_to_the_counters_file(discovery_exe, tmp_path):
    counters_file = tmp_path / "counters.json"
    proc = simulator.run(
        [discovery_exe, "2"], devices=2, counters_file=counters_file, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    got = simulator.counters(counters_file)
    assert got["calls"]["nvmlInit_v2"] == {"host": 1}
    assert set(got["calls"]["nvmlDeviceGetHandleByIndex_v2"]) == {"0", "1"}
    assert got["driver_lock_held_ns"] <= got["elapsed_ns"]


@pytest.mark.parametrize(
    "content, words",
    [("[1, 2]", "a JSON list, not an object"), ("{calls", "it is not JSON")],
)
def test_a_counters_file_without_counters_is_a_clear_error_naming_it(tmp_path, content, words):
    counters_file = tmp_path / "counters.json"
    counters_file.write_text(content)
    with pytest.raises(ValueError) as raised:
        simulator.counters(counters_file)
    assert str(counters_file) in str(raised.value)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    "spec, key, words",
    [
        ({"latency_ms": {"procesess": 4.5}}, "latency_ms.procesess", "is not a query family; use init, static"),
        ({"latency_ms": {"power": -0.5}}, "latency_ms.power", "must be a number of milliseconds (0..3600000)"),
        ({"latency_ms": {"power": "0.4"}}, "latency_ms.power", "must be a number of milliseconds (0..3600000)"),
        ({"latency_ms": [1]}, "latency_ms", "must be an object of query family: milliseconds"),
        ({"driver_lock": "yes"}, "driver_lock", "must be true or false"),
        ({"hang": [{"query": "fan", "while_exists": "/tmp/x"}]}, "hang[0].query", "must be one of init, static"),
        ({"hang": [{"query": "first_handle", "while_exists": "/tmp/x"}]}, "hang[0].query", "must be one of"),
        ({"hang": [{"query": "power"}]}, "hang[0].while_exists", "must name a file"),
        ({"hang": [{"query": "power", "device": -1, "while_exists": "/tmp/x"}]}, "hang[0].device", "must be"),
        ({"hang": [{"query": "power", "while": "/tmp/x"}]}, "hang[0]", "while"),
        (
            {"devices": [{}, {}], "hang": [{"query": "power", "device": 2, "while_exists": "/tmp/x"}]},
            "hang[0].device",
            "is not a GPU of this spec (it has 2)",
        ),
        ({"devices": [{"persistence_mode": "on"}]}, "devices[0].persistence_mode", "must be one of disabled, enabled"),
    ],
)
def test_a_bad_driver_model_key_is_rejected_naming_the_key_by_both_checkers(discovery_exe, tmp_path, spec, key, words):
    with pytest.raises((TypeError, ValueError), match=re.escape(key)) as raised:
        simulator.environment(spec=spec)
    assert words in str(raised.value)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert key in proc.stderr and words in proc.stderr


def test_every_query_family_is_one_the_simulator_takes(discovery_exe, tmp_path):
    spec = {
        "devices": [{}],
        "latency_ms": {
            family: 0.001 for family in simulator.QUERY_FAMILIES + ("first_handle", "first_handle_without_persistence")
        },
        "hang": [{"query": family, "while_exists": str(tmp_path / "absent")} for family in simulator.QUERY_FAMILIES],
    }
    simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr


# --- machine profiles (csrc/simulator/profiles: facts of real machines' nvidia-smi -q -x captures) -

ENUMERATE = """
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
class Memory2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
class Fabric(ctypes.Structure):
    _fields_ = [("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]
MIB = 1 << 20
text = ctypes.create_string_buffer(96)
assert nvml.nvmlSystemGetDriverVersion(text, 96) == 0
machine = {"driver": text.value.decode(), "gpus": []}
count = ctypes.c_uint()
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
for i in range(count.value):
    h = handle(i)
    gpu = {}
    assert nvml.nvmlDeviceGetName(h, text, 96) == 0
    gpu["name"] = text.value.decode()
    assert nvml.nvmlDeviceGetUUID(h, text, 96) == 0
    gpu["uuid"] = text.value.decode()
    pci = Pci()
    assert nvml.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0
    gpu["pci_bus_id"] = pci.busId.decode()
    memory = Memory2(version=ctypes.sizeof(Memory2) | 2 << 24)
    assert nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(memory)) == 0
    gpu["memory_mib"] = [memory.total // MIB, memory.reserved // MIB, memory.used // MIB]
    mode = ctypes.c_int()
    assert nvml.nvmlDeviceGetPersistenceMode(h, ctypes.byref(mode)) == 0
    gpu["persistence"] = mode.value
    fabric = Fabric()
    rc = nvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(fabric))
    gpu["fabric"] = [fabric.state, fabric.status] if rc == 0 else rc
    pending = ctypes.c_int()
    gpu["retired_pages"] = nvml.nvmlDeviceGetRetiredPagesPendingStatus(h, ctypes.byref(pending))
    current, pending_mig, slots = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    if nvml.nvmlDeviceGetMigMode(h, ctypes.byref(current), ctypes.byref(pending_mig)) == 0 and current.value == 1:
        assert nvml.nvmlDeviceGetMaxMigDeviceCount(h, ctypes.byref(slots)) == 0
        gpu["mig_mib"] = []
        for slot in range(slots.value):
            unit = ctypes.c_void_p()
            if nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot, ctypes.byref(unit)) == 0:
                total = (ctypes.c_ulonglong * 3)()
                assert nvml.nvmlDeviceGetMemoryInfo(unit, total) == 0
                gpu["mig_mib"].append(total[0] // MIB)
    machine["gpus"].append(gpu)
print(json.dumps(machine))
"""

# What the captures say (NVIDIA/k8s-test-infra tests/e2e/go/assertions/nvidiasmi/testdata/hardware/):
# NVML_GPU_FABRIC_STATE_COMPLETED 3, NVML_ERROR_NOT_SUPPORTED 3.
CAPTURES = {
    "h100-hgx-8": (
        "580.105.08",
        "NVIDIA H100 80GB HBM3",
        [81559, 480, 0],
        1,
        [3, 0],
        ["53", "64", "75", "86", "97", "A8", "B9", "CA"],
        None,
    ),
    "b200-8": (
        "580.105.08",
        "NVIDIA B200",
        [183359, 728, 0],
        0,
        [3, 0],
        ["8F", "90", "96", "97", "C4", "C5", "CB", "CC"],
        None,
    ),
    "a100-mig": ("570.148.08", "NVIDIA A100-SXM4-40GB", [40960, 518, 0], 1, 3, ["06"], [19968, 9856, 4864, 4864]),
}


def test_the_profiles_are_the_ones_shipped():
    assert simulator.profiles() == sorted({*CAPTURES, *TOPOLOGIES})


@pytest.mark.parametrize("profile", sorted(CAPTURES))
def test_a_profile_enumerates_as_its_capture_says(profile):
    driver, name, memory_mib, persistence, fabric, buses, mig_mib = CAPTURES[profile]
    proc = run_python(NVML_CHILD + ENUMERATE, env=simulated_env(profile=profile))
    machine = json.loads(proc.stdout)
    assert machine["driver"] == driver
    assert [gpu["pci_bus_id"] for gpu in machine["gpus"]] == [f"00000000:{bus}:00.0" for bus in buses]
    for i, gpu in enumerate(machine["gpus"]):
        assert gpu["name"] == name and gpu["memory_mib"] == memory_mib
        assert gpu["uuid"] == f"GPU-{i:08d}-0000-0000-0000-{i:012d}"  # the captures' scrubbed placeholders
        assert gpu["persistence"] == persistence and gpu["fabric"] == fabric
        assert gpu["retired_pages"] == 3  # N/A in every capture: these boards remap rows instead
        assert gpu.get("mig_mib") == mig_mib


def test_a_profile_carries_the_latencies_of_real_drivers(tmp_path):
    counters_file = tmp_path / "counters.json"
    proc = simulator.run(
        [sys.executable, "-c", NVML_CHILD + "handle(0); handle(1)"],
        profile="b200-8",
        counters_file=counters_file,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # B200 was captured with persistence mode disabled: each first handle initialises its GPU
    assert simulator.counters(counters_file)["driver_lock_held_ns"] >= 2 * 1000e6


@pytest.mark.parametrize("process_struct", ["v2", "r535"])
def test_both_builds_find_the_profiles_beside_themselves(discovery_exe, process_struct):
    proc = subprocess.run(
        [discovery_exe, "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(FLINK_GPU_NVML_LIBRARY=simulator.library_path(process_struct), FLINK_GPU_SIM_PROFILE="a100-mig"),
    )
    assert (proc.returncode, proc.stdout) == (0, "0:0\n"), proc.stderr  # the A100's first MIG device


def test_the_profiles_are_found_through_a_link_to_the_simulator(discovery_exe, tmp_path):
    # an image that links libnvidia-ml.so.1 into a library directory of its own
    link = tmp_path / "libnvidia-ml.so.1"
    link.symlink_to(simulator.library_path())
    proc = subprocess.run(
        [discovery_exe, "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(FLINK_GPU_NVML_LIBRARY=str(link), FLINK_GPU_SIM_PROFILE="a100-mig"),
    )
    assert (proc.returncode, proc.stdout) == (0, "0:0\n"), proc.stderr


@pytest.mark.parametrize("name", ["h100", "../profiles/h100-hgx-8", "H100-HGX-8"])
def test_an_unknown_profile_is_refused_naming_the_profiles(discovery_exe, name):
    names = ", ".join(sorted({*CAPTURES, *TOPOLOGIES}))
    with pytest.raises(ValueError, match=re.escape(f"Simulator profile {name!r} does not exist; use one of {names}")):
        simulator.environment(profile=name)
    proc = discover(discovery_exe, FLINK_GPU_SIM_PROFILE=name)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"FLINK_GPU_SIM_PROFILE={name} is not a profile of this simulator; use one of {names}" in proc.stderr


def test_a_profile_and_a_spec_together_are_refused(discovery_exe, tmp_path):
    with pytest.raises(ValueError, match="Give one of devices, spec and profile"):
        simulator.environment(profile="h100-hgx-8", spec={"devices": [{}]})
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    proc = discover(discovery_exe, FLINK_GPU_SIM_PROFILE="h100-hgx-8", FLINK_GPU_SIM_SPEC=str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"FLINK_GPU_SIM_PROFILE=h100-hgx-8 and FLINK_GPU_SIM_SPEC={spec} are both set: use one" in proc.stderr


def test_reserved_memory_is_apart_in_the_v2_query_and_used_in_v1():
    mib = 1 << 20
    got = run_nvml_child(
        """
        h = handle(0)
        v1 = (ctypes.c_ulonglong * 3)()  # total, free, used
        assert nvml.nvmlDeviceGetMemoryInfo(h, v1) == 0
        v2 = (ctypes.c_ulonglong * 5)()  # version (padded), total, reserved, free, used
        v2[0] = 40 | 2 << 24
        assert nvml.nvmlDeviceGetMemoryInfo_v2(h, v2) == 0
        print(json.dumps({"v1": list(v1), "v2": list(v2)[1:]}))
    """,
        {"devices": [{"memory_total": 100 * mib, "memory_reserved": 10 * mib, "memory_used": 20 * mib}]},
    )
    assert got["v1"] == [100 * mib, 70 * mib, 30 * mib]
    assert got["v2"] == [100 * mib, 10 * mib, 70 * mib, 20 * mib]


def test_reserved_and_used_memory_beyond_the_total_are_refused_by_both(discovery_exe, tmp_path):
    device = {"memory_total": 100, "memory_reserved": 10, "memory_used": 91}
    key = "devices[0].memory_used + memory_reserved must not exceed memory_total"
    with pytest.raises(ValueError, match=re.escape(key)):
        simulator.environment(spec={"devices": [device]})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"devices": [device]}))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1 and key in proc.stderr


def test_a_devices_used_memory_covers_its_processes_as_a_drivers_does():
    """NVML's used memory includes every process's (the process reads rely on it: docs/design.md §9.1): a
    device reads at least its processes' sum, a process whose own use is not available counting 1 MiB."""
    mib = 1 << 20
    got = run_nvml_child(
        """
        used = []
        for i in range(3):
            v2 = (ctypes.c_ulonglong * 5)()
            v2[0] = 40 | 2 << 24
            assert nvml.nvmlDeviceGetMemoryInfo_v2(handle(i), v2) == 0
            used.append(v2[4])
        print(json.dumps(used))
    """,
        {
            "devices": [
                # pid 7 compute and graphics (C+G): one process, counted once
                {
                    "processes": [
                        {"pid": 7, "used_memory": 300 * mib},
                        {"pid": 7, "used_memory": 300 * mib, "kind": "graphics"},
                        {"pid": 8, "kind": "graphics"},
                    ]
                },
                {"memory_used": 500 * mib, "processes": [{"pid": 7, "used_memory": 300 * mib}]},
                {},
            ]
        },
    )
    assert got == [301 * mib, 500 * mib, 0]


def test_processes_that_use_more_than_the_device_has_are_refused():
    device = {
        "memory_total": 100 << 20,
        "memory_reserved": 10 << 20,
        "processes": [{"pid": 7, "used_memory": 95 << 20}],
    }
    words = "devices[0].processes use more than memory_total - memory_reserved"
    with pytest.raises(ValueError, match=re.escape(words)):
        simulator.environment(spec={"devices": [device]})


def test_an_mps_client_without_its_server_among_the_compute_processes_is_refused(discovery_exe, tmp_path):
    spec = {"devices": [{"processes": [{"pid": 7, "kind": "mps"}, {"pid": 8, "kind": "graphics"}]}]}
    words = 'devices[0].processes has an "mps" process but no "compute" one'
    with pytest.raises(ValueError, match=re.escape(words)):
        simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1 and words in proc.stderr
    simulator.environment(spec={"devices": [{"processes": [{"pid": 6}, {"pid": 7, "kind": "mps"}]}]})


def test_a_state_error_and_a_lost_handle_hold_while_their_files_exist(tmp_path):
    state_error, lost_handle = tmp_path / "state-error", tmp_path / "lost-handle"
    spec = {
        "devices": [
            {
                "health": {
                    "state_error": "GPU_IS_LOST",
                    "state_error_when_exists": str(state_error),
                    "lost_handle_when_exists": str(lost_handle),
                }
            }
        ]
    }
    got = run_nvml_child(
        f"""
        h = handle(0)
        def handle_rc():
            return nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(ctypes.c_void_p()))
        answers = [[power(h), handle_rc()]]
        for path in ({str(state_error)!r}, {str(lost_handle)!r}):
            open(path, "x").close()
            answers.append([power(h), handle_rc()])
        os.unlink({str(state_error)!r})
        os.unlink({str(lost_handle)!r})
        answers.append([power(h), handle_rc()])
        print(json.dumps(answers))
    """,
        spec,
    )
    # NVML_ERROR_GPU_IS_LOST 15
    assert got == [[0, 0], [15, 0], [15, 15], [0, 0]]


@pytest.mark.parametrize(
    "old, new", [("state_error_after_s", "state_error_when_exists"), ("lost_handle_after_s", "lost_handle_when_exists")]
)
def test_the_clock_triggers_are_gone_for_file_triggers(discovery_exe, tmp_path, old, new):
    spec = {"devices": [{"health": {"state_error": "GPU_IS_LOST", old: 1}}]}
    words = f"devices[0].health.{old} is no longer a key: create a file named by {new} instead"
    with pytest.raises(ValueError, match=re.escape(words)):
        simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1
    assert words in proc.stderr


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"devcies": []}, "Simulator spec: the top level has unknown keys ['devcies']; use init_error,"),
        ({"devices": [{"nmae": "x"}]}, "Simulator spec: devices[0] has unknown keys ['nmae']; use uuid, name,"),
        ({"devices": [{"fabric": {"sate": "completed"}}]}, "devices[0].fabric has unknown keys ['sate']"),
        (
            {"devices": [{"processes": [{"pid": 1, "memory": 2}]}]},
            "devices[0].processes[0] has unknown keys ['memory']",
        ),
        ({"devices": [{"mig": {"mod": "enabled"}}]}, "devices[0].mig has unknown keys ['mod']"),
        ({"process_struct": "r600"}, "Simulator spec: process_struct must be one of v2, r535"),
    ],
)
def test_an_unknown_key_is_refused_by_the_one_checker_from_python_and_at_load(discovery_exe, tmp_path, spec, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        simulator.environment(spec=spec)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=re.escape(words.replace("Simulator spec", str(path)))):
        simulator.read_spec(path)
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1 and words.replace("Simulator spec", str(path)) in proc.stderr


def test_a_spec_of_either_build_is_checked_by_the_one_checker():
    simulator.environment(spec={"process_struct": "r535", "devices": [{}]})
    with pytest.raises(ValueError, match=re.escape("devices[0].memory_used must not exceed memory_total")):
        simulator.environment(spec={"process_struct": "r535", "devices": [{"memory_total": 1, "memory_used": 2}]})


def test_checking_a_spec_leaves_the_process_libnvidia_ml_its_own(tmp_path):
    # a test run or a job that checks a spec and then opens the host's driver by name must get the driver,
    # never the simulator: the checker is a library of its own soname
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"devices": [{}]}))
    env = {k: v for k, v in child_env().items() if not k.startswith("FLINK_GPU_") and k != "LD_LIBRARY_PATH"}
    proc = run_python(
        f"""
        import ctypes, os
        from flink_gpu import simulator
        simulator.environment(spec={{"devices": [{{}}, {{}}]}})
        simulator.read_spec({str(path)!r})
        mapped = [line.split()[-1] for line in open("/proc/self/maps") if "nvidia-ml" in line]
        try:
            ctypes.CDLL("libnvidia-ml.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            loaded = False
        else:
            loaded = True
        print(sorted(set(mapped)), loaded)
        """,
        env=env,
    )
    assert proc.stdout.split() == ["[]", "False"], proc.stdout


# ---- spec files the simulator refuses ------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_the_simulator_refuses_a_spec_path_that_is_not_a_regular_file(discovery_exe, tmp_path, kind):
    path, description = _odd_path(tmp_path, kind)
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        f"flink-gpu NVML simulator: cannot use FLINK_GPU_SIM_SPEC={path}: it is {description}, not a regular file"
    ) in proc.stderr


@pytest.mark.usefixtures("no_leaks")
def test_the_simulator_refuses_a_spec_larger_than_16_mib(discovery_exe, tmp_path):
    path = tmp_path / "spec.json"
    with open(path, "wb") as handle:
        handle.truncate(16 * 2**20 + 1)
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "it is larger than 16 MiB, the most the simulator reads" in proc.stderr


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    "spec, message",
    [
        ({"devices": [{"name": 5}]}, "devices[0].name must be a string"),
        ({"devices": [{"uuid": ["x"]}]}, "devices[0].uuid must be a string"),
        ({"devices": [{"pci_bus_id": True}]}, "devices[0].pci_bus_id must be a string"),
        ({"devices": [{"memory_total": "abc"}]}, "devices[0].memory_total must be a whole number of bytes"),
        ({"devices": [{"minor_number": "1"}]}, "devices[0].minor_number must be a whole number"),
        ({"devices": [{"fault": 5}]}, 'devices[0].fault must be "NO_PERMISSION" or "GPU_IS_LOST"'),
        ({"driver_version": 5}, "driver_version must be a string"),
        ({"init_error": "x"}, "init_error must be an NVML error code (0..999)"),
    ],
)
def test_the_simulator_rejects_spec_values_of_the_wrong_type_naming_the_key(discovery_exe, tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = child_env()
    env.update(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(path))
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"flink-gpu NVML simulator: {path}: {message}" in proc.stderr
    with pytest.raises(ValueError, match=re.escape(str(path))):  # the Python check agrees
        simulator.read_spec(path)


# ---- topology: PCIe common ancestors, NVLinks, P2P status (issue 46) -------------------------------

TOPOLOGY = """
NVML_TOPOLOGY = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVML_FI_DEV_NVLINK_LINK_COUNT, NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_CAPS_INDEX_READ = 91, 2, 0
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]

def link_count(h):
    field = FieldValue(fieldId=NVML_FI_DEV_NVLINK_LINK_COUNT)
    assert nvml.nvmlDeviceGetFieldValues(h, 1, ctypes.byref(field)) == 0
    return [field.nvmlReturn, field.value & 0xFFFFFFFF]

def links(h):
    # each link: [state rc, active, remote type rc, type, remote PCI rc, bus id]
    rc, count = link_count(h)
    out = []
    for link in range(count if rc == 0 else 0):
        active, kind, pci = ctypes.c_int(), ctypes.c_int(), Pci()
        state_rc = nvml.nvmlDeviceGetNvLinkState(h, link, ctypes.byref(active))
        type_rc = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link, ctypes.byref(kind))
        pci_rc = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, ctypes.byref(pci))
        out.append([state_rc, active.value, type_rc, kind.value, pci_rc, pci.busId.decode()])
    return out

def topology():
    count = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    gpus = [handle(i) for i in range(count.value)]
    buses = []
    for h in gpus:
        pci = Pci()
        assert nvml.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0
        buses.append(pci.busId.decode())
    walked = [links(h) for h in gpus]
    # what each GPU reaches over its active links: peer GPUs by bus id, NVSwitches by bus id
    reach = [[(l[3], l[5]) for l in w if l[0] == 0 and l[1] == 1 and l[2] == 0 and l[4] == 0] for w in walked]
    matrix, p2p = [], []
    for a in range(len(gpus)):
        row, p2p_row = [], []
        for b in range(len(gpus)):
            if a == b:
                row.append("X")
                p2p_row.append("X")
                continue
            switches_b = {bus for kind, bus in reach[b] if kind == 2}
            nv = sum(1 for kind, bus in reach[a] if (kind, bus) == (0, buses[b]) or (kind == 2 and bus in switches_b))
            level = ctypes.c_int()
            assert nvml.nvmlDeviceGetTopologyCommonAncestor(gpus[a], gpus[b], ctypes.byref(level)) == 0
            row.append(f"NV{nv}" if nv else NVML_TOPOLOGY[level.value])
            status = [ctypes.c_int(), ctypes.c_int()]
            for caps, into in ((NVML_P2P_CAPS_INDEX_NVLINK, status[0]), (NVML_P2P_CAPS_INDEX_READ, status[1])):
                assert nvml.nvmlDeviceGetP2PStatus(gpus[a], gpus[b], caps, ctypes.byref(into)) == 0
            p2p_row.append([status[0].value, status[1].value])
        matrix.append(row)
        p2p.append(p2p_row)
    return {"matrix": matrix, "p2p": p2p, "links": walked, "counts": [link_count(h) for h in gpus]}
"""

# What `nvidia-smi topo -m` shows on each profile's host (the GPU columns), from the public outputs
# csrc/simulator/profiles/README.md names; the link-down variants are those hosts with links taken down.
NV18 = ["NV18"] * 8
TOPOLOGIES = {
    "h100-hgx-8": [NV18[:i] + ["X"] + NV18[i + 1 :] for i in range(8)],
    "h100-hgx-8-linkdown": [
        [("X" if a == b else "NV14" if 5 in (a, b) else "NV18") for b in range(8)] for a in range(8)
    ],
    "rtx3090-bridged-4": [
        ["X", "PHB", "NV4", "NODE"],
        ["PHB", "X", "NODE", "NV4"],
        ["NV4", "NODE", "X", "PHB"],
        ["NODE", "NV4", "PHB", "X"],
    ],
    "rtx3090-bridged-4-linkdown": [
        ["X", "PHB", "NV2", "NODE"],
        ["PHB", "X", "NODE", "NODE"],
        ["NV2", "NODE", "X", "PHB"],
        ["NODE", "NODE", "PHB", "X"],
    ],
    "a100-nvlink-pairs-4": [
        ["X", "NV12", "SYS", "SYS"],
        ["NV12", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NODE"],
        ["SYS", "SYS", "NODE", "X"],
    ],
    "l40s-2socket-4": [
        ["X", "NODE", "SYS", "SYS"],
        ["NODE", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NODE"],
        ["SYS", "SYS", "NODE", "X"],
    ],
}
NVML_P2P_STATUS_OK, NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, NVML_P2P_STATUS_NOT_SUPPORTED = 0, 3, 5


def read_topology(**env):
    return json.loads(
        run_python(NVML_CHILD + TOPOLOGY + "print(json.dumps(topology()))", env=simulated_env(**env)).stdout
    )


@pytest.mark.parametrize("profile", sorted(TOPOLOGIES))
def test_a_profile_reads_as_its_public_topology_matrix(profile):
    got = read_topology(profile=profile)
    assert got["matrix"] == TOPOLOGIES[profile]
    for a, row in enumerate(TOPOLOGIES[profile]):
        for b, cell in enumerate(row):
            if a != b:  # NVLink peer access exactly where an active NVLink joins them; PCIe peers below one CPU
                nvlink = NVML_P2P_STATUS_OK if cell.startswith("NV") else NVML_P2P_STATUS_NOT_SUPPORTED
                read = NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED if cell == "SYS" else NVML_P2P_STATUS_OK
                assert got["p2p"][a][b] == [nvlink, read], (a, b)


def test_an_hgx_gpu_reaches_four_nvswitches_by_their_bus_ids():
    got = read_topology(profile="h100-hgx-8")
    assert got["counts"] == [[0, 18]] * 8
    # NVML_NVLINK_DEVICE_TYPE_SWITCH (2), active, on every link of every GPU
    per_switch = {}
    for link in got["links"][3]:
        assert link[:5] == [0, 1, 0, 2, 0]
        per_switch[link[5]] = per_switch.get(link[5], 0) + 1
    assert per_switch == {"0000:05:00.0": 4, "0000:06:00.0": 5, "0000:07:00.0": 5, "0000:08:00.0": 4}
    down = read_topology(profile="h100-hgx-8-linkdown")
    assert [link[1] for link in down["links"][5]] == [0] * 4 + [1] * 14  # 4 of 18 inactive
    assert all(link[1] == 1 for gpu in (0, 4, 6) for link in down["links"][gpu])


def test_a_bridge_names_its_peer_gpu_and_an_untrained_one_its_far_end_unknown():
    bridged = read_topology(profile="rtx3090-bridged-4")
    # NVML_NVLINK_DEVICE_TYPE_GPU (0), the peer's bus id: GPU 0 to GPU 2
    assert bridged["links"][0] == [[0, 1, 0, 0, 0, "00000000:03:00.0"]] * 4
    pairs = read_topology(profile="a100-nvlink-pairs-4")
    assert pairs["counts"] == [[0, 12]] * 4
    # inactive, NVML_NVLINK_DEVICE_TYPE_UNKNOWN (0xFF), remote PCI info NOT_SUPPORTED (3)
    assert pairs["links"][2] == [[0, 0, 0, 255, 3, ""]] * 12


def test_a_host_without_topology_keys_is_one_switch_per_gpu_under_one_host_bridge():
    got = read_topology(devices=3)
    assert got["matrix"] == [["X", "PHB", "PHB"], ["PHB", "X", "PHB"], ["PHB", "PHB", "X"]]
    assert got["counts"] == [[0, 0]] * 3  # no NVLink: a link count of 0
    assert got["p2p"][0][1] == [NVML_P2P_STATUS_NOT_SUPPORTED, NVML_P2P_STATUS_OK]


@pytest.mark.parametrize(
    "pcie, levels",
    [
        # two GPUs: their places in the tree, and the common ancestor NVML answers
        (({"board": "K", "switches": ["s"]}, {"board": "K", "switches": ["s"]}), "INTERNAL"),
        (({"switches": ["up", "s"]}, {"switches": ["up", "s"]}), "PIX"),
        (({"switches": ["up", "s1"]}, {"switches": ["up", "s2"]}), "PXB"),
        (({"switches": ["up"]}, {"switches": ["up", "s2"]}), "PXB"),
        (({"switches": ["s1"]}, {"switches": ["s2"]}), "PHB"),
        (({"host_bridge": "a"}, {"host_bridge": "b"}), "NODE"),
        (({"host_bridge": "a"}, {"host_bridge": "b", "numa_node": 1}), "SYS"),
    ],
)
def test_the_common_ancestor_follows_the_pcie_tree(pcie, levels):
    got = read_topology(spec={"devices": [{"pcie": pcie[0]}, {"pcie": pcie[1]}]})
    assert got["matrix"] == [["X", levels], [levels, "X"]]


LINK_CALLS = """
NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED = 2, 3
def calls(h, link, other):
    active, kind, level, status = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    pci = (ctypes.c_char * 128)()
    field = (ctypes.c_uint * 10)(91)  # an nvmlFieldValue_t (40 bytes): fieldId first, nvmlReturn at byte 28
    assert nvml.nvmlDeviceGetFieldValues(h, 1, field) == 0
    return [nvml.nvmlDeviceGetNvLinkState(h, link, ctypes.byref(active)),
            nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link, ctypes.byref(kind)),
            nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, pci),
            nvml.nvmlDeviceGetTopologyCommonAncestor(h, other, ctypes.byref(level)),
            nvml.nvmlDeviceGetP2PStatus(h, other, 2, ctypes.byref(status)),
            field[7]]
"""


def test_each_topology_query_answers_not_supported_where_the_spec_says_on_that_gpu_only():
    names = ["nvlink", "nvlink_remote_type", "nvlink_remote_pci", "topology", "p2p_status"]
    spec = {
        "devices": [
            {"nvlinks": [{"to": {"gpu": 1}}], "not_supported": names},
            {"nvlinks": [{"to": {"gpu": 0}}]},
        ]
    }
    got = run_nvml_child(
        LINK_CALLS + "h0, h1 = handle(0), handle(1); print(json.dumps([calls(h0, 0, h1), calls(h1, 0, h0)]))", spec
    )
    assert got == [[3, 3, 3, 3, 3, 3], [0, 0, 0, 3, 3, 0]]  # a pair query: either GPU refusing refuses it


def test_a_link_the_gpu_lacks_and_bad_arguments_are_invalid_arguments():
    spec = {"devices": [{"nvlinks": [{"to": {"gpu": 1}}] * 2}, {"nvlinks": [{"to": {"gpu": 0}}] * 2}]}
    got = run_nvml_child(
        LINK_CALLS
        + """
h0, h1 = handle(0), handle(1)
level, status = ctypes.c_int(), ctypes.c_int()
print(json.dumps({
    "link 1": calls(h0, 1, h1)[:3], "link 2": calls(h0, 2, h1)[:3],
    "null": [nvml.nvmlDeviceGetNvLinkState(h0, 0, None), nvml.nvmlDeviceGetTopologyCommonAncestor(h0, h1, None),
             nvml.nvmlDeviceGetP2PStatus(h0, h1, 2, None)],
    "itself": [nvml.nvmlDeviceGetTopologyCommonAncestor(h0, h0, ctypes.byref(level)),
               nvml.nvmlDeviceGetP2PStatus(h0, h0, 2, ctypes.byref(status))],
    "caps index 5": nvml.nvmlDeviceGetP2PStatus(h0, h1, 5, ctypes.byref(status)),
    "no handle": nvml.nvmlDeviceGetNvLinkState(None, 0, ctypes.byref(status)),
}))
""",
        spec,
    )
    assert got == {
        "link 1": [0, 0, 0],
        "link 2": [2, 2, 2],  # NVML_ERROR_INVALID_ARGUMENT: link >= the GPU's links
        "null": [2, 2, 2],
        "itself": [2, 2],
        "caps index 5": 2,  # NVML_P2P_CAPS_INDEX_UNKNOWN
        "no handle": 2,
    }


def test_the_topology_queries_need_nvml_initialised():
    proc = run_python(
        """
        import ctypes, os
        nvml = ctypes.CDLL(os.environ["FLINK_GPU_NVML_LIBRARY"])
        level = ctypes.c_int()
        print(nvml.nvmlDeviceGetNvLinkState(ctypes.c_void_p(8), 0, ctypes.byref(level)),
              nvml.nvmlDeviceGetTopologyCommonAncestor(ctypes.c_void_p(8), ctypes.c_void_p(16), ctypes.byref(level)))
        """,
        env=simulated_env(devices=2),
    )
    assert proc.stdout.split() == ["1", "1"]  # NVML_ERROR_UNINITIALIZED


@pytest.mark.parametrize("process_struct", ["v2", "r535"])
def test_both_builds_export_the_topology_queries(process_struct):
    # all five predate R535 (NVLink remote device type and P2P status long before it); looked up in a
    # child, so that this process never maps a libnvidia-ml.so.1
    names = [
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlDeviceGetNvLinkRemoteDeviceType",
        "nvmlDeviceGetP2PStatus",
    ]
    proc = run_python(
        f"""
        import ctypes
        library = ctypes.CDLL({simulator.library_path(process_struct)!r})
        print([name for name in {names!r} if not hasattr(library, name)])
        """
    )
    assert proc.stdout.split() == ["[]"]


@pytest.mark.parametrize(
    "devices, words",
    [
        ([{"pcie": {"switch": ["s"]}}], "devices[0].pcie has unknown keys ['switch']"),
        ([{"pcie": {"switches": "s"}}], "devices[0].pcie.switches must be a list of switch names"),
        ([{"pcie": {"switches": ["s", "s"]}}], 'devices[0].pcie.switches names "s" twice'),
        ([{"pcie": {"numa_node": -1}}], "devices[0].pcie.numa_node must be a whole number (0..4095)"),
        ([{"pcie": {"host_bridge": ""}}], "devices[0].pcie.host_bridge must not be empty"),
        (
            [{"pcie": {"switches": ["up", "s"]}}, {"pcie": {"switches": ["s"]}}],
            'devices[1].pcie.switches puts switch "s" below another path than devices[0].pcie does',
        ),
        (
            [{"pcie": {"host_bridge": "a"}}, {"pcie": {"host_bridge": "a", "numa_node": 1}}],
            'devices[1].pcie.numa_node differs from devices[0]\'s under the same host bridge "a"',
        ),
        (
            [{"pcie": {"board": "K", "switches": ["s1"]}}, {"pcie": {"board": "K", "switches": ["s2"]}}],
            'devices[1].pcie.board "K" sits elsewhere in devices[0].pcie',
        ),
        ([{"nvlinks": {"to": {"gpu": 0}}}], "devices[0].nvlinks must be a list, one entry per link"),
        ([{"nvlinks": [{"actve": True}]}], "devices[0].nvlinks[0] has unknown keys ['actve']"),
        ([{"nvlinks": [{"active": 1}]}], "devices[0].nvlinks[0].active must be true or false"),
        ([{"nvlinks": [{"to": {"nvswitch": "x"}}]}], 'devices[0].nvlinks[0].to must be {"gpu": index}'),
        ([{"nvlinks": [{"to": {"switch": "05:00"}}]}], "devices[0].nvlinks[0].to.switch must be an NVSwitch's PCI"),
        ([{"nvlinks": [{"to": {"gpu": 1}}]}], "devices[0].nvlinks[0].to.gpu is 1, not a GPU of this spec (it has 1)"),
        ([{"nvlinks": [{"to": {"gpu": 0}}]}], "devices[0].nvlinks[0].to.gpu is the GPU itself"),
        (
            [{"nvlinks": [{"to": {"gpu": 1}}] * 2}, {"nvlinks": [{"to": {"gpu": 0}}]}],
            "devices[0].nvlinks has 2 links to GPU 1 but devices[1].nvlinks has 1 back",
        ),
        ([{"nvlinks": [{}] * 37}], "devices[0].nvlinks has 37 links; a GPU has at most 36"),
    ],
)
def test_a_bad_topology_key_is_refused_naming_the_key_by_both_checkers(discovery_exe, tmp_path, devices, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        simulator.environment(spec={"devices": devices})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"devices": devices}))
    proc = discover(discovery_exe, FLINK_GPU_SIM_SPEC=str(path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert words in proc.stderr
