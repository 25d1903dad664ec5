"""The NVML backend (docs/design.md §4.2) on the bundled NVML simulator, with injected faults.

NVML is initialised once per process, so every scenario runs in a fresh Python process whose
environment points at the simulator (``flink_gpu.simulator.environment``).
"""

import json
import os
import subprocess
import sys

import pytest

import flink_gpu
from conftest import child_env
from flink_gpu import coordination, simulator
from support.interop import find_discovery_executable
from support.simulated import NOT_HOST_PIDS, pids_are_hosts

# the directory holding the flink_gpu under test (installed, or src/ after tools/dev_build.sh)
SRC = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))


# Runs drivers in a child process and prints what they returned and logged, as JSON.
RUNNER = r"""
import json, logging, os, sys
records = []
class Collect(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.name, record.getMessage()])
root = logging.getLogger("flink_gpu")
root.addHandler(Collect())
root.setLevel(logging.DEBUG)
from flink_gpu import GPUDriverFactory, cuda_visible_devices
from flink_gpu.base.gpu_index import index_sort_order

def describe(infos):
    return [[[k, i.get_property(k)] for k in i.get_keys()] for i in index_sort_order(infos, lambda i: i.index)]

def run(config, amounts):
    result = {"retrievals": []}
    try:
        with GPUDriverFactory().create_external_resource_driver(config) as driver:
            result["mode"] = driver.mode
            result["reason"] = driver.reason
            for amount in amounts:
                infos = driver.retrieve_resource_info(amount)
                result["retrievals"].append(describe(infos))
                result["cuda_visible_devices"] = cuda_visible_devices(infos)
    except Exception as error:
        result["error"] = [type(error).__name__, str(error)]
    return result

scenarios = json.loads(sys.argv[1])
output = []
for config, amounts in scenarios:
    output.append(run(config, amounts))
print(json.dumps({"results": output, "logs": records}))
"""


def run_child(runner, argument, env, timeout=60):
    """What ``runner`` prints (one JSON document), run in a child process with ``argument`` as JSON, its
    environment ``env`` (os.environ's without flink-gpu's settings, importing the package under test)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    child_env.update(env, PYTHONPATH=SRC)
    done = subprocess.run(
        [sys.executable, "-c", runner, json.dumps(argument)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_scenarios(scenarios, *, devices=None, spec=None, init_error=None, env=None, runner=RUNNER):
    """Run ``[(config, amounts), ...]`` in one child process (``runner``) against a simulated host."""
    child_env = dict(env or {})
    if devices is not None or spec is not None or init_error is not None or env is None:
        child_env.update(simulator.environment(devices=devices, spec=spec, init_error=init_error))
    output = run_child(runner, scenarios, child_env, timeout=120)
    return output["results"], output["logs"]


def run_one(config, amounts, **kwargs):
    [result], logs = run_scenarios([(config, amounts)], **kwargs)
    return result, logs


def sim_uuid(i):
    return f"GPU-00000000-0000-4000-8000-{i:012x}"


def host_numa_node(bus):
    """numa.node as the host's sysfs gives it for a simulated bus id: a simulated GPU's bus id may
    name a real PCI device of this host, whose node the core then reads."""
    try:
        with open(f"/sys/bus/pci/devices/0000:{bus.lower()}:00.0/numa_node") as handle:
            node = int(handle.read())
    except (OSError, ValueError):
        return {}
    return {} if node < 0 else {"numa.node": str(node)}


def sim_properties(i, **overrides):
    props = {
        "index": str(i),
        "uuid": sim_uuid(i),
        "name": "NVIDIA Simulated GPU",
        "pci.bus-id": f"00000000:{i + 1:02X}:00.0",
        "memory.total": str(80 * 2**30),
        "minor-number": str(i),
        **host_numa_node(f"{i + 1:02X}"),
        "health": "ok",
        "memory.used": "0",
        "memory.free": str(80 * 2**30),
        "processes": "0",
    }
    props.update(overrides)
    return [[k, v] for k, v in props.items()]


def indices(retrieval):
    return [dict(props)["index"] for props in retrieval]


NVML = {"discovery-mode": "nvml"}


def test_first_devices_with_all_properties():
    result, logs = run_one(NVML, [2])
    assert result["mode"] == "nvml"
    assert result["retrievals"] == [[sim_properties(0), sim_properties(1)]]
    assert result["cuda_visible_devices"] == f"{sim_uuid(0)},{sim_uuid(1)}"
    assert ["INFO", "flink_gpu.gpu.nvml_discovery", "Discover GPU resources: [GPU Device(0), GPU Device(1)]."] in logs


def test_properties_follow_the_spec():
    spec = {
        "devices": [
            {
                "uuid": "GPU-aaaa",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total": 85520809984,
                "pci_bus_id": "00000000:17:00.0",
                "minor_number": 7,
            }
        ]
    }
    result, _ = run_one(NVML, [1], spec=spec)
    assert result["retrievals"] == [
        [
            [
                ["index", "0"],
                ["uuid", "GPU-aaaa"],
                ["name", "NVIDIA H100 80GB HBM3"],
                ["pci.bus-id", "00000000:17:00.0"],
                ["memory.total", "85520809984"],
                ["minor-number", "7"],
                *([k, v] for k, v in host_numa_node("17").items()),
                ["health", "ok"],
                ["memory.used", "0"],
                ["memory.free", "85520809984"],
                ["processes", "0"],
            ]
        ]
    ]


def test_all_devices_and_too_many():
    [exact, too_many], _ = run_scenarios([(NVML, [4]), (NVML, [5])], devices=4)
    assert indices(exact["retrievals"][0]) == ["0", "1", "2", "3"]
    name, message = too_many["error"]
    assert name == "FlinkException"
    assert "5 GPUs requested, but 4 of the 4 devices NVML (" in message and "lists are usable." in message
    assert simulator.library_path() in message


def test_no_device_at_all():
    result, _ = run_one(NVML, [1], devices=0)
    assert result["error"][0] == "FlinkException"
    assert "1 GPU requested, but 0 of the 0 devices NVML (" in result["error"][1]


FAULTY = {"devices": [{}, {"fault": "NO_PERMISSION"}, {"fault": "GPU_IS_LOST"}, {}]}


def test_faulty_devices_are_left_out_with_one_warn_each():
    """A GPU that refuses its handle or is lost is an unhealthy state: never handed out, WARNed once per
    process (its uuid unknown: it never answered), not at every retrieval."""
    # read in index order (topology: ignore), a claim of two reads GPUs 1 and 2 on its way to 3; with the
    # topology it reads 0 and 3 alone, whose pair is the only one NVML could say anything of
    result, logs = run_one({**NVML, "topology": "ignore"}, [2, 2], spec=FAULTY)
    assert [indices(r) for r in result["retrievals"]] == [["0", "3"], ["0", "3"]]
    warnings = [message for level, _, message in logs if level == "WARNING"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("GPU 1 is unhealthy: ") and "NO_PERMISSION" in warnings[0]
    assert warnings[1].startswith("GPU 2 is unhealthy: GPU is lost") and "GPU_IS_LOST" in warnings[1]
    assert all(w.endswith("; it is not handed out.") for w in warnings)


def test_too_few_after_faulty_devices_says_why():
    result, _ = run_one(NVML, [3], spec=FAULTY)
    name, message = result["error"]
    assert name == "FlinkException"
    assert "3 GPUs requested, but 2 of the 4 devices NVML (" in message
    assert "GPU 1 is left out (unhealthy: " in message and "NO_PERMISSION" in message
    assert "GPU 2 is left out (unhealthy: GPU is lost" in message


def test_nvml_init_failure_in_nvml_mode_is_clear():
    result, _ = run_one(NVML, [1], init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    name, message = result["error"]
    assert name == "NvmlError"
    assert simulator.library_path() in message


def test_library_path_option_is_used(tmp_path):
    # no FLINK_GPU_NVML_LIBRARY in the child: only the option can find the simulator
    env = {"FLINK_GPU_SIM_DEVICES": "3"}
    good = dict(NVML, **{"nvml.library-path": simulator.library_path()})
    missing = str(tmp_path / "libnvidia-ml.so.1")
    bad = dict(NVML, **{"nvml.library-path": missing})
    [ok, failed], _ = run_scenarios([(good, [3]), (bad, [1])], env=env)
    assert indices(ok["retrievals"][0]) == ["0", "1", "2"]
    assert failed["error"][0] == "NvmlError" and missing in failed["error"][1]


def test_auto_prefers_nvml_when_it_loads():
    result, logs = run_one({}, [1], devices=2)
    assert result["mode"] == "nvml"
    assert result["reason"] == (
        f"discovery-script.path is not set and NVML loaded from {simulator.library_path()} (driver 999.99.99)"
    )
    [line] = [m for level, name, m in logs if name == "flink_gpu.gpu.driver"]
    assert line.startswith("GPU discovery uses the nvml backend:")


def fake_flink_home(tmp_path, output="0,1"):
    plugin = tmp_path / "flink" / "plugins" / "external-resource-gpu"
    plugin.mkdir(parents=True)
    script = plugin / "nvidia-gpu-discovery.sh"
    script.write_text(f"#!/bin/sh\necho {output}\n")
    script.chmod(0o755)
    return str(tmp_path / "flink")


def test_auto_falls_back_to_the_default_script_when_nvml_fails(tmp_path):
    env = {"FLINK_HOME": fake_flink_home(tmp_path, "5,6")}
    env.update(simulator.environment(init_error=9))
    result, logs = run_one({}, [2], env=env)
    assert result["mode"] == "script"
    assert "NVML is not usable" in result["reason"]
    assert indices(result["retrievals"][0]) == ["5", "6"]
    assert sum(name == "flink_gpu.gpu.driver" for _, name, _ in logs) == 1


def test_auto_with_an_explicit_script_never_touches_nvml(tmp_path):
    home = fake_flink_home(tmp_path, "9")
    config = {"discovery-script.path": "plugins/external-resource-gpu/nvidia-gpu-discovery.sh"}
    env = {"FLINK_HOME": home, "FLINK_GPU_NVML_LIBRARY": str(tmp_path / "absent.so")}
    result, _ = run_one(config, [1], env=env)
    assert result["mode"] == "script" and result["reason"] == "discovery-script.path is set"
    assert indices(result["retrievals"][0]) == ["9"]


COORDINATED_WORKER = r"""
import json, sys
from flink_gpu import GPUDriver, FlinkException
driver = GPUDriver({"discovery-mode": "nvml",
                    "discovery-script.args": "--enable-coordination-mode --coordination-file " + sys.argv[1]})
try:
    got = sorted(i.index for i in driver.retrieve_resource_info(int(sys.argv[2])))
    again = sorted(i.index for i in driver.retrieve_resource_info(int(sys.argv[2])))
    print(json.dumps({"got": got, "again": again}), flush=True)
except FlinkException as e:
    print(json.dumps({"error": str(e)}), flush=True)
    sys.exit(0)
if sys.argv[3] == "wait":
    sys.stdin.readline()  # hold the GPUs until told to go
driver.close()
print(json.dumps({"closed": True}), flush=True)
"""


def _coordinated_worker(path, amount, hold):
    import json
    import sys

    proc = simulator.popen(
        [sys.executable, "-c", COORDINATED_WORKER, str(path), str(amount), "wait" if hold else "go"],
        devices=4,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    return proc, json.loads(proc.stdout.readline())


def test_coordinated_nvml_workers_never_share_a_gpu_and_release_on_close(tmp_path):
    path = tmp_path / "coordination"
    first, a = _coordinated_worker(path, 2, hold=True)
    second, b = _coordinated_worker(path, 2, hold=True)
    try:
        assert a == {"got": ["0", "1"], "again": ["0", "1"]}  # asking again returns what it holds
        assert b == {"got": ["2", "3"], "again": ["2", "3"]}
        lines = sorted(line.split()[:2] for line in path.read_text().splitlines())
        assert lines == [["0", str(first.pid)], ["1", str(first.pid)], ["2", str(second.pid)], ["3", str(second.pid)]]
        # a third worker finds nothing free and is told who holds what
        third, c = _coordinated_worker(path, 1, hold=False)
        third.wait(30)
        assert (
            "Requested 1, the host has 4 GPUs" in c["error"]
            and str(first.pid) in c["error"]
            and str(second.pid) in c["error"]
        )
        # close() releases: the first worker's GPUs go back to the pool, the second keeps its own
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == '{"closed": true}'
        first.wait(30)
        assert sorted(line.split()[:2] for line in path.read_text().splitlines()) == [
            ["2", str(second.pid)],
            ["3", str(second.pid)],
        ]
        fourth, d = _coordinated_worker(path, 2, hold=False)
        fourth.wait(30)
        assert d == {"got": ["0", "1"], "again": ["0", "1"]}
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_auto_with_coordination_flags_uses_nvml_when_it_loads(tmp_path):
    env = simulator.environment(devices=4)
    config = {"discovery-script.args": f"--enable-coordination-mode --coordination-file {tmp_path / 'c'}"}
    result, _ = run_one(config, [1], env=env)
    assert result["mode"] == "nvml"
    assert indices(result["retrievals"][0]) == ["0"]


# The enumeration's static reads (each device's UUID) counted by the simulator: once per process, once
# more in a forked child, never per retrieval.
CACHE_AND_FORK = r"""
import json, os, sys
from flink_gpu import GPUDriver, simulator
driver = GPUDriver({"discovery-mode": "nvml"})
first = driver.retrieve_resource_info(2)
simulator.reset_counters()
again = driver.retrieve_resource_info(2)
cached = again == first and "nvmlDeviceGetUUID" not in simulator.counters()["calls"]
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    simulator.reset_counters()
    child = driver.retrieve_resource_info(2)
    fresh = child == first and "nvmlDeviceGetUUID" in simulator.counters()["calls"]
    os.write(write_end, json.dumps(fresh).encode())
    os._exit(0)
os.close(write_end)
fresh = json.loads(os.read(read_end, 100))
os.waitpid(pid, 0)
driver.close()
print(json.dumps({"cached": cached, "fresh_in_child": fresh}))
"""


def test_enumeration_is_cached_but_not_across_fork():
    env = dict(os.environ, PYTHONPATH=SRC, **simulator.environment(devices=3))
    done = subprocess.run([sys.executable, "-c", CACHE_AND_FORK], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"cached": True, "fresh_in_child": True}


CLOSED_DISCOVERY = r"""
import json
from flink_gpu import FlinkException
from flink_gpu.gpu.nvml_discovery import NvmlDiscovery
from flink_gpu.gpu.settings import GPUDriverSettings
from flink_gpu.nvml import open_library
discovery = NvmlDiscovery(open_library(), GPUDriverSettings.from_config({"discovery-mode": "nvml"}))
before = sorted(info.index for info in discovery.retrieve(1))
discovery.close()
try:
    discovery.retrieve(1)
    after = None
except FlinkException as error:
    after = str(error)
print(json.dumps({"before": before, "after": after}))
"""


def test_a_closed_nvml_discovery_refuses_to_retrieve_with_a_clear_error():
    env = dict(os.environ, PYTHONPATH=SRC, **simulator.environment(devices=2))
    done = subprocess.run([sys.executable, "-c", CLOSED_DISCOVERY], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"before": ["0"], "after": "This NVML discovery has been closed."}


# Initialised in the parent; in a forked child NVML is initialised again, and that nvmlInit hangs.
FORKED_INIT_HANGS = r"""
import json, os, sys
from flink_gpu import NvmlError, nvml, policy, simulator
library = nvml.open_library()
answers = []
with simulator.hanging(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        for ask in (lambda: library.states(os.getpid(), timeout=0.3),
                    lambda: policy.discover(library, 1, ["0", "1"], owner=os.getpid(), busy_gpus="ignore",
                                            nvml_timeout=0.3)):
            try:
                ask()
                answers.append("answered")
            except NvmlError as error:
                answers.append([str(error), error.code, error.function])
        print(json.dumps(answers), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_a_state_read_in_a_forked_child_whose_nvml_init_hangs_fails_within_its_timeout(tmp_path):
    hang_file = tmp_path / "hang"
    spec = {"devices": [{}, {}], "hang": [{"query": "init", "while_exists": str(hang_file)}]}
    env = dict(os.environ, PYTHONPATH=SRC, **simulator.environment(spec=spec))
    # the subprocess timeout only guards the test: states and discover must answer by themselves
    try:
        done = subprocess.run(
            [sys.executable, "-c", FORKED_INIT_HANGS, str(hang_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        hang_file.unlink(missing_ok=True)  # a child left stuck by a failure ends
    assert done.returncode == 0, done.stderr
    path = os.path.join(SRC, "flink_gpu", "_simulator", "libnvidia-ml.so.1")
    first, second = json.loads(done.stdout)
    assert first == [
        f"NVML did not answer: nvmlInit_v2 did not return within 300 ms (library '{path}', timeout 300 ms). "
        "The NVIDIA driver may hang: check dmesg for Xid errors and nvidia-smi; this process calls NVML again "
        "only once the stalled call returns.",
        10,
        "nvmlInit_v2",
    ]
    # still stuck: no other nvmlInit is started, the second fails at once saying so
    assert second[0].startswith("NVML did not answer: nvmlInit_v2 has not returned for ") and second[1:] == [
        10,
        "nvmlInit_v2",
    ]


def test_a_property_nvml_does_not_answer_is_absent():
    from flink_gpu.gpu.nvml_discovery import gpu_info
    from flink_gpu.nvml import Device

    device = Device.__new__(Device)  # every query unanswered: all attributes None
    info = gpu_info(device)
    assert info.get_keys() == ("index",)
    assert info.get_property("index") == "0" and info.get_property("uuid") is None


# --- both backends see the same host ------------------------------------------------------------


def discovery_command(tmp_path):
    """The native drop-in flink-gpu-discovery installed with the flink_gpu under test."""
    return find_discovery_executable()


@pytest.mark.parametrize(
    "host",
    [{"devices": 4}, {"devices": 1}, {"spec": FAULTY}, {"spec": {"devices": [{"fault": "GPU_IS_LOST"}, {}, {}]}}],
)
def test_script_and_nvml_backends_agree(tmp_path, host):
    script = {"discovery-mode": "script", "discovery-script.path": discovery_command(tmp_path)}
    scenarios = [(config, [amount]) for amount in (1, 2, 3) for config in (NVML, script)]
    results, _ = run_scenarios(scenarios, **host)

    def outcome(result):
        return "too few" if "error" in result else indices(result["retrievals"][0])

    outcomes = [outcome(result) for result in results]
    assert outcomes[0::2] == outcomes[1::2]
    assert outcomes[0] != "too few"


def test_coordination_file_without_a_path_means_the_default_file_with_a_warn():
    # the stock script's reading, and flink-gpu-discovery's: no error, the default file, a WARN
    result, logs = run_one({**NVML, "discovery-script.args": "--coordination-file"}, [1])
    assert "error" not in result and indices(result["retrievals"][0]) == ["0"]
    assert [
        "WARNING",
        "flink_gpu.flink.script_protocol",
        "'--coordination-file' in 'discovery-script.args' ('--coordination-file') has no file path "
        f"after it; using the default coordination file {coordination.DEFAULT_PATH}, as the stock "
        "script does.",
    ] in logs


# --- a coordinated NVML driver releases on close only what it claimed itself ---------------------

KEEPS_EARLIER_CLAIMS = r"""
import json, os, sys
from flink_gpu import GPUDriver, coordination
path = sys.argv[1]
args = {"discovery-mode": "nvml",
        "discovery-script.args": "--enable-coordination-mode --coordination-file " + path}
mine = lambda: sorted(e.index for e in coordination.snapshot(path).entries if e.pid == os.getpid())
held = coordination.claim(2, ["0", "1", "2", "3"], path=path).taken   # the process's own, explicit claim
with GPUDriver(args) as driver:
    got = sorted(i.index for i in driver.retrieve_resource_info(2))
after_close = mine()
coordination.release(path=path)
with GPUDriver(args) as driver:                                  # nothing held before: all its own
    driver.retrieve_resource_info(1)
    topped_up = sorted(i.index for i in driver.retrieve_resource_info(2))
print(json.dumps({"held": held, "got": got, "after_close": after_close, "topped_up": topped_up,
                  "left": mine()}))
"""


def test_coordinated_driver_close_keeps_gpus_the_process_held_before(tmp_path):
    import json

    from flink_gpu import simulator

    env = child_env(**simulator.environment(devices=4))
    done = subprocess.run(
        [sys.executable, "-c", KEEPS_EARLIER_CLAIMS, str(tmp_path / "coord")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "held": ["0", "1"],
        "got": ["0", "1"],
        "after_close": ["0", "1"],
        "topped_up": ["0", "1"],
        "left": [],
    }


# --- two coordinated drivers of one process: the first close() does not free the other's GPUs ----

SHARED_IN_ONE_PROCESS = r"""
import json, os, sys, threading, time
from flink_gpu import GPUDriver, coordination
from flink_gpu.gpu import holders
path = sys.argv[1]
args = {"discovery-mode": "nvml",
        "discovery-script.args": "--enable-coordination-mode --coordination-file " + path}
mine = lambda: sorted(e.index for e in coordination.snapshot(path).entries if e.pid == os.getpid())
a, b = GPUDriver(args), GPUDriver(args)
got_a = sorted(i.index for i in a.retrieve_resource_info(2))
got_b = sorted(i.index for i in b.retrieve_resource_info(2))   # the process's GPUs again
a.close()
after_a = mine()                                                 # b still uses them
b.close()
after_b = mine()
# a child forked while another thread holds the drivers' lock can still claim and release
c = GPUDriver(args)
held, done = threading.Event(), threading.Event()
def hold():  # the lock the drivers of a process share (gpu/holders.py), held until the child is done
    with holders.driver_lock:
        held.set()
        done.wait(60)
threading.Thread(target=hold).start()
held.wait(10)
pid = os.fork()
if pid == 0:
    c.retrieve_resource_info(1)
    c.close()
    os._exit(0 if not mine() else 3)
_, status = os.waitpid(pid, 0)
done.set()
print(json.dumps({"a": got_a, "b": got_b, "after_a": after_a, "after_b": after_b,
                  "child": os.waitstatus_to_exitcode(status)}))
"""


def test_coordinated_drivers_of_one_process_release_when_the_last_closes(tmp_path):
    import json

    from flink_gpu import simulator

    env = child_env(**simulator.environment(devices=4))
    done = subprocess.run(
        [sys.executable, "-c", SHARED_IN_ONE_PROCESS, str(tmp_path / "coord")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "a": ["0", "1"],
        "b": ["0", "1"],
        "after_a": ["0", "1"],
        "after_b": [],
        "child": 0,
    }


# --- the GPU's state at assignment time (docs/design.md §9.1) ------------------------------------


def unhealthy_first(health, devices=3):
    """A host whose GPU 0 has the health readings ``health``; the others are fine."""
    return {"devices": [{"health": health}] + [{} for _ in range(devices - 1)]}


def props(retrieval, index):
    return dict(next(p for p in retrieval if dict(p)["index"] == index))


@pytest.mark.parametrize(
    "health, reason",
    [
        ({"inforom_corrupted": True}, "InfoROM"),
        ({"row_remap_failure": True}, "row remapping failed"),
        ({"ecc_uncorrected": 3}, "ECC"),
        ({"recovery_action": "gpu_reset"}, "recovery"),
        ({"recovery_action": "node_reboot"}, "recovery"),
        ({"state_error": "GPU_IS_LOST"}, "GPU_IS_LOST"),
        ({"state_error": "RESET_REQUIRED"}, "RESET_REQUIRED"),
    ],
)
def test_an_unhealthy_gpu_is_never_handed_out_and_warned_once_naming_the_check(health, reason):
    [two, three], logs = run_scenarios([(NVML, [2, 2]), (NVML, [3])], spec=unhealthy_first(health))
    assert [indices(r) for r in two["retrievals"]] == [["1", "2"], ["1", "2"]]
    assert all(props(r, i)["health"] == "ok" for r in two["retrievals"] for i in ("1", "2"))
    warnings = [m for level, _, m in logs if level == "WARNING"]
    assert len(warnings) == 1, warnings  # once per process, not per retrieval
    assert warnings[0].startswith(f"GPU 0 ({sim_uuid(0)}) is unhealthy: ")
    assert reason in warnings[0] and warnings[0].endswith("; it is not handed out.")
    name, message = three["error"]
    assert name == "FlinkException" and "3 GPUs requested" in message
    assert "GPU 0 is left out (unhealthy: " in message and reason in message


def test_a_gpu_lost_after_start_is_not_handed_out_by_the_next_retrieval(tmp_path):
    # the state is read when a choice is made, not once when NVML starts
    lost = tmp_path / "gpu0-lost"
    code = """
import json, sys
from flink_gpu import GPUDriver
def take():
    with GPUDriver({"discovery-mode": "nvml"}) as driver:
        return sorted(info.index for info in driver.retrieve_resource_info(2))
before = take()
open(sys.argv[1], "x").close()  # the spec's trigger: GPU 0 falls off the bus
print(json.dumps([before, take()]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env.update(
        simulator.environment(
            spec=unhealthy_first({"state_error": "GPU_IS_LOST", "state_error_when_exists": str(lost)})
        )
    )
    env["PYTHONPATH"] = SRC
    done = subprocess.run([sys.executable, "-c", code, str(lost)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["0", "1"], ["1", "2"]]


def test_a_gpu_whose_handle_is_lost_after_the_enumeration_is_warned_and_named_in_the_shortage(tmp_path):
    # NVML refuses a GPU gone from the bus its handle: it is an unhealthy state, never dropped silently
    lost = tmp_path / "gpu0-gone"
    code = """
import json, logging, sys
from flink_gpu import GPUDriver
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))
logging.getLogger("flink_gpu").addHandler(Keep())
logging.getLogger("flink_gpu").setLevel(logging.INFO)
def take(amount):
    with GPUDriver({"discovery-mode": "nvml"}) as driver:
        try:
            return sorted(info.index for info in driver.retrieve_resource_info(amount))
        except Exception as error:
            return str(error)
before = take(2)
open(sys.argv[1], "x").close()  # the spec's trigger: GPU 0 is gone from the bus
print(json.dumps([before, take(2), take(3), [m for level, m in records if level == "WARNING"]]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env.update(simulator.environment(spec=unhealthy_first({"lost_handle_when_exists": str(lost)})))
    env["PYTHONPATH"] = SRC
    done = subprocess.run([sys.executable, "-c", code, str(lost)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after, shortage, warnings = json.loads(done.stdout)
    assert before == ["0", "1"] and after == ["1", "2"]
    assert warnings == [
        f"GPU 0 ({sim_uuid(0)}) is unhealthy: GPU is lost (nvmlDeviceGetHandleByIndex_v2 returned "
        "NVML_ERROR_GPU_IS_LOST); it is not handed out."
    ]
    assert "3 GPUs requested" in shortage and "GPU 0 is left out (unhealthy: GPU is lost" in shortage


@pytest.mark.parametrize(
    "action, verdict, reason",
    [
        ("none", "ok", None),
        ("gpu_reset", "unhealthy", "reset the GPU"),
        ("node_reboot", "unhealthy", "reboot the node"),
        ("drain_p2p", "degraded", "drain peer-to-peer traffic"),
        ("drain_and_reset", "unhealthy", "drain peer-to-peer traffic and reset the GPU"),
        ("recover_imex_domain", "ok", "recover the IMEX domain (not a fault of this GPU)"),
        ("bus_reset", "unhealthy", "reset the GPU's PCIe bus"),
        ("system_reboot", "unhealthy", "reboot the system"),
        (42, "unhealthy", "GPU recovery action 42 (unknown to this build: treated as needing a reset)"),
    ],
)
def test_the_recovery_action_is_judged_by_its_class(action, verdict, reason):
    [three, two], logs = run_scenarios([(NVML, [3]), (NVML, [2])], spec=unhealthy_first({"recovery_action": action}))
    warnings = [m for level, _, m in logs if level == "WARNING"]
    if verdict == "unhealthy":
        assert three["error"][0] == "FlinkException" and reason in three["error"][1]
        assert indices(two["retrievals"][0]) == ["1", "2"]
        assert len(warnings) == 1 and reason in warnings[0] and "not handed out" in warnings[0]
        return
    health = props(three["retrievals"][0], "0")["health"]
    if verdict == "degraded":
        assert health == f"degraded: GPU recovery action: {reason}"
        assert indices(two["retrievals"][0]) == ["1", "2"]  # handed out last
        assert not warnings
    else:
        assert health == "ok" and indices(two["retrievals"][0]) == ["0", "1"]
        expected = (
            [] if reason is None else [f"GPU 0 ({sim_uuid(0)}): GPU recovery action: {reason}; it is handed out."]
        )
        assert warnings == expected  # once per process, not per retrieval


def test_a_driver_without_the_recovery_action_field_is_no_finding():
    spec = unhealthy_first({"recovery_action": "gpu_reset"})
    spec["devices"][0]["not_supported"] = ["field_values"]
    result, logs = run_one(NVML, [3], spec=spec)
    assert props(result["retrievals"][0], "0")["health"] == "ok"
    assert not [m for level, _, m in logs if level == "WARNING"]


def fabric_first(fabric, devices=3):
    """An NVSwitch host whose GPU 0 has the fabric registration ``fabric``; the others completed."""
    return {"devices": [{"fabric": fabric}] + [{"fabric": {}} for _ in range(devices - 1)]}


@pytest.mark.parametrize(
    "fabric, verdict, reason",
    [
        (
            {"state": "not_started"},
            "unhealthy",
            "NVLink fabric registration not started: CUDA would fail with error 802; is the Fabric Manager running?",
        ),
        ({"state": "not_started", "struct": "v2"}, "unhealthy", "registration not started"),
        ({"state": "not_started", "struct": "v1"}, "unhealthy", "registration not started"),
        ({"state": "in_progress"}, "unhealthy", "NVLink fabric registration in progress: transient"),
        (
            {"state": "completed", "status": 999},
            "degraded",
            "no NVLink peer-to-peer (fabric registration completed with NVML_ERROR_UNKNOWN)",
        ),
        ({"state": "completed", "status": 999, "struct": "v1"}, "degraded", "no NVLink peer-to-peer"),
        ({"health_summary": "unhealthy"}, "degraded", "no NVLink peer-to-peer (fabric health summary: unhealthy)"),
        # a healthy HGX H100 on R580: all-zero cluster UUID and no health summary
        ({}, "ok", None),
        ({"health_summary": "healthy"}, "ok", None),
        ({"state": "not_supported"}, "ok", None),
    ],
)
def test_the_nvlink_fabric_registration_is_judged(fabric, verdict, reason):
    [three, two], _ = run_scenarios([(NVML, [3]), (NVML, [2])], spec=fabric_first(fabric))
    if verdict == "unhealthy":
        assert three["error"][0] == "FlinkException" and reason in three["error"][1]
        assert indices(two["retrievals"][0]) == ["1", "2"]
    elif verdict == "degraded":
        assert props(three["retrievals"][0], "0")["health"].startswith("degraded: ")
        assert reason in props(three["retrievals"][0], "0")["health"]
        assert indices(two["retrievals"][0]) == ["1", "2"]
    else:
        assert props(three["retrievals"][0], "0")["health"] == "ok"
        assert indices(two["retrievals"][0]) == ["0", "1"]


def test_a_check_left_out_of_health_checks_does_not_keep_a_gpu_from_being_handed_out():
    spec = unhealthy_first({"inforom_corrupted": True, "row_remap_pending": True})
    [enforced, without], logs = run_scenarios(
        [(NVML, [3]), ({**NVML, "health-checks": "all,-inforom"}, [3])], spec=spec
    )
    assert enforced["error"][0] == "FlinkException"
    assert props(without["retrievals"][0], "0")["health"] == "degraded: row remapping pending"


def test_uncorrectable_ecc_errors_count_only_while_ecc_is_on():
    result, logs = run_one(NVML, [3], spec=unhealthy_first({"ecc_uncorrected": 3, "ecc_enabled": False}))
    assert indices(result["retrievals"][0]) == ["0", "1", "2"]
    assert props(result["retrievals"][0], "0")["health"] == "ok"
    assert not [m for level, _, m in logs if level == "WARNING"]


@pytest.mark.parametrize(
    "health, reason",
    [({"row_remap_pending": True}, "row remapping pending"), ({"retired_pages_pending": True}, "page retirement")],
)
def test_a_degraded_gpu_comes_after_every_healthy_one(health, reason):
    result, _ = run_one(NVML, [2, 3], spec=unhealthy_first(health))
    two, three = result["retrievals"]
    assert indices(two) == ["1", "2"]
    assert indices(three) == ["0", "1", "2"]
    assert props(three, "0")["health"].startswith("degraded: ") and reason in props(three, "0")["health"]


# every state query the core makes, answering NOT_SUPPORTED (older GPUs, consumer cards)
STATE_QUERIES = [
    "inforom",
    "remapped_rows",
    "ecc_mode",
    "ecc_errors",
    "field_values",
    "retired_pages",
    "memory",
    "memory_v2",
    "compute_mode",
    "cpu_affinity",
    "compute_processes",
    "graphics_processes",
    "mps_processes",
    "process_detail_list",
    "fabric",
]


def test_not_supported_everywhere_is_no_finding_and_no_property():
    bad = {
        "inforom_corrupted": True,
        "row_remap_failure": True,
        "ecc_uncorrected": 1,
        "recovery_action": "gpu_reset",
        "retired_pages_pending": True,
    }
    spec = {
        "devices": [
            {
                "health": bad,
                "not_supported": STATE_QUERIES,
                "processes": [{"pid": 1, "used_memory": 1, "kind": "compute"}],
            }
            for _ in range(2)
        ]
    }
    result, logs = run_one({**NVML, "busy-gpus": "exclude"}, [2], spec=spec)
    assert indices(result["retrievals"][0]) == ["0", "1"]
    info = props(result["retrievals"][0], "0")
    assert info["health"] == "ok"
    assert not {"memory.used", "memory.free", "cpu.affinity"} & set(info)
    assert not [m for level, _, m in logs if level == "WARNING"]


def test_every_info_carries_state_and_locality():
    spec = {"devices": [{"memory_used": 2**30, "cpu_affinity": "0-15,32-47"}, {}]}
    result, _ = run_one(NVML, [2], spec=spec)
    info = props(result["retrievals"][0], "0")
    assert info["health"] == "ok"
    assert info["memory.used"] == str(2**30)
    assert int(info["memory.free"]) == 80 * 2**30 - 2**30
    assert info["processes"] == "0"
    assert info["cpu.affinity"] == "0-15,32-47"


def test_no_permission_on_the_process_lists_is_not_busy_and_warns():
    spec = {
        "devices": [
            {
                "no_permission": ["compute_processes", "graphics_processes", "mps_processes", "process_detail_list"],
                "processes": [{"pid": 1, "kind": "compute"}],
            },
            {},
        ]
    }
    result, logs = run_one({**NVML, "busy-gpus": "exclude"}, [2, 2], spec=spec)
    assert [indices(r) for r in result["retrievals"]] == [["0", "1"], ["0", "1"]]
    assert "processes" not in props(result["retrievals"][0], "0")  # unknown, not 0
    warnings = [m for level, _, m in logs if level == "WARNING"]
    assert warnings == ["NVML gives no permission to list the processes on GPU 0; it counts as not busy."]


# A worker under a fake TaskManager: the TaskManager (its cmdline names TaskManagerRunner) starts
# a sibling of the worker, and the test an unrelated process. Their real pids go into the spec.
TASKMANAGER = r"""
import subprocess, sys
sibling = subprocess.Popen(["sleep", "600"])
print(sibling.pid, flush=True)
worker = subprocess.Popen(sys.argv[2:])
worker.wait()
sibling.kill()
sys.exit(worker.returncode)
"""


def run_under_taskmanager(tmp_path, configs_and_amounts, on_gpus, process_struct="v2"):
    """``on_gpus(sibling_pid, stranger_pid) -> spec``; the worker runs RUNNER's scenarios against
    the simulator build with the ``process_struct`` layout."""
    stranger = subprocess.Popen(["sleep", "600"])
    spec_path = tmp_path / "spec.json"
    # replaced once the pids are known; the layout chooses the simulator build now
    spec_path.write_text(json.dumps({"devices": [], "process_struct": process_struct}))
    env = child_env()
    env.update(simulator.environment(spec=str(spec_path)))
    try:
        taskmanager = subprocess.Popen(
            [
                sys.executable,
                "-c",
                TASKMANAGER,
                "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
                sys.executable,
                "-c",
                "import sys; sys.stdin.readline(); exec(sys.argv.pop(1))",
                RUNNER,
                json.dumps(configs_and_amounts),
            ],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        sibling = int(taskmanager.stdout.readline())
        spec_path.write_text(json.dumps({**on_gpus(sibling, stranger.pid), "process_struct": process_struct}))
        out, _ = taskmanager.communicate("go\n", timeout=120)
        assert taskmanager.returncode == 0
        output = json.loads(out)
        return output["results"], output["logs"]
    finally:
        stranger.kill()
        stranger.wait()


def processes_on(*per_gpu):
    return {
        "devices": [
            {"processes": [{"pid": pid, "used_memory": 2**20, "kind": kind} for pid, kind in gpu]} for gpu in per_gpu
        ]
    }


# R535-era drivers' *_v3 process calls fill a five-field struct: pids scramble unless detected
@pytest.mark.parametrize("process_struct", ["v2", "r535"])
@pytest.mark.parametrize(
    "busy_gpus, two, three",
    [
        ("avoid", ["0", "2"], ["0", "1", "2"]),  # the busy GPU only when short
        ("exclude", ["0", "2"], "too few"),  # never the busy GPU
        ("ignore", ["0", "1"], ["0", "1", "2"]),  # Flink's order
    ],
)
@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_a_foreign_process_makes_a_gpu_busy_the_taskmanagers_own_child_does_not(
    tmp_path, busy_gpus, two, three, process_struct
):
    config = {**NVML, "busy-gpus": busy_gpus}
    # GPU 0: the TaskManager's other child (own); GPU 1: an unrelated process; GPU 2: idle
    results, _ = run_under_taskmanager(
        tmp_path,
        [(config, [2]), (config, [3])],
        lambda sibling, stranger: processes_on([(sibling, "compute")], [(stranger, "graphics")], []),
        process_struct,
    )
    got_two, got_three = results
    assert indices(got_two["retrievals"][0]) == two
    if three == "too few":
        assert "GPU 1 is left out (busy: " in got_three["error"][1]
        assert "graphics" in got_three["error"][1]
    else:
        assert indices(got_three["retrievals"][0]) == three
        # ignore reads no process list (docs/design.md §9.1, query plan): its infos have no processes
        expected = None if busy_gpus == "ignore" else "1"
        assert props(got_three["retrievals"][0], "1").get("processes") == expected


def test_a_pid_this_namespace_cannot_see_counts_as_foreign():
    gone = subprocess.Popen(["true"])
    gone.wait()
    # an MPS client this namespace cannot see, of a server it can (pid 1, never the worker's)
    spec = processes_on([(1, "compute"), (gone.pid, "mps")], [])
    result, _ = run_one({**NVML, "busy-gpus": "exclude"}, [1, 2], spec=spec)
    assert indices(result["retrievals"][0]) == ["1"]
    assert "not visible" in result["error"][1]


@pytest.mark.parametrize("spelling", ["exclude", "EXCLUDE"])  # case ignored, as in the parameter
def test_busy_gpus_in_the_script_args_is_honoured_and_the_parameter_wins(spelling):
    spec = processes_on([(1, "compute")], [])  # pid 1: init, never the worker's
    args = {**NVML, "discovery-script.args": f"--busy-gpus {spelling}"}
    [from_args, both], logs = run_scenarios([(args, [2]), ({**args, "busy-gpus": "ignore"}, [2])], spec=spec)
    assert "GPU 0 is left out (busy: " in from_args["error"][1]
    assert indices(both["retrievals"][0]) == ["0", "1"]
    assert [
        "WARNING",
        "flink_gpu.gpu.settings",
        "'busy-gpus' is 'ignore' but 'discovery-script.args' has --busy-gpus exclude; using 'ignore'.",
    ] in logs


def test_an_unknown_busy_gpus_in_the_script_args_names_the_key_and_the_values():
    result, _ = run_one({**NVML, "discovery-script.args": "--busy-gpus never"}, [1])
    assert result["error"] == [
        "IllegalConfigurationException",
        "Invalid value 'never' for --busy-gpus in key 'discovery-script.args': expected one of avoid, exclude, ignore.",
    ]


def test_a_coordinated_claim_takes_idle_gpus_before_busy_ones(tmp_path):
    path = tmp_path / "coord"
    config = {**NVML, "discovery-script.args": f"--enable-coordination-mode --coordination-file {path}"}
    result, _ = run_one(config, [1, 2], spec=processes_on([(1, "compute")], [], []))
    assert [indices(r) for r in result["retrievals"]] == [["1"], ["1", "2"]]


OWN_CHILD_THEN_GONE = r"""
import json, os, subprocess, sys
child = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1], "w") as spec:   # the simulator reads its spec when NVML initialises
    json.dump({"devices": [{"processes": [{"pid": child.pid, "kind": "compute"}]}, {}]}, spec)
os.environ["FLINK_GPU_SIM_SPEC"] = sys.argv[1]
os.environ.pop("FLINK_GPU_SIM_DEVICES", None)
from flink_gpu import GPUDriver
driver = GPUDriver({"discovery-mode": "nvml", "busy-gpus": "exclude"})
own = sorted(i.index for i in driver.retrieve_resource_info(1))
child.kill()
child.wait()
gone = sorted(i.index for i in driver.retrieve_resource_info(1))
print(json.dumps([own, gone]))
"""


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_the_claimers_own_child_is_not_foreign_and_state_is_read_per_choice(tmp_path):
    env = child_env(**simulator.environment(devices=0))
    done = subprocess.run(
        [sys.executable, "-c", OWN_CHILD_THEN_GONE, str(tmp_path / "spec.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # while the child lives its GPU is the worker's own; once it is gone the pid NVML still
    # lists is not visible here, so it counts as foreign: read again at the second choice
    assert json.loads(done.stdout) == [["0"], ["1"]]


# --- MIG units as GPUs (docs/design.md §9.2) ------------------------------------------------------

MIG_HOST = {
    "devices": [
        {
            "uuid": "GPU-mig",
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:17:00.0",
            "mig": {
                "mode": "enabled",
                "instances": [
                    {"slot": 0, "uuid": "MIG-a", "memory_total": 10 << 30, "gi": 7, "ci": 0},
                    {"slot": 2, "uuid": "MIG-b", "memory_total": 20 << 30, "gi": 3, "ci": 1},
                    {"slot": 5, "uuid": "MIG-c", "memory_total": 40 << 30, "gi": 1, "ci": 0},
                ],
            },
        },
        {"uuid": "GPU-plain"},
    ]
}


def test_mig_units_are_gpu_infos_with_their_parent_and_instances_in_index_order():
    result, logs = run_one(NVML, [4], spec=MIG_HOST)
    [infos] = result["retrievals"]
    assert indices(infos) == ["0:0", "0:2", "0:5", "1"]
    unit = dict(infos[1])
    assert {
        k: unit.get(k)
        for k in (
            "uuid",
            "memory.total",
            "parent.index",
            "parent.uuid",
            "mig.gi",
            "mig.ci",
            "name",
            "pci.bus-id",
            "health",
        )
    } == {
        "uuid": "MIG-b",
        "memory.total": str(20 << 30),
        "parent.index": "0",
        "parent.uuid": "GPU-mig",
        "mig.gi": "3",
        "mig.ci": "1",
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus-id": "00000000:17:00.0",
        "health": "ok",
    }
    plain = dict(infos[3])
    assert "parent.index" not in plain and "mig.gi" not in plain
    assert result["error"][0] == "ValueError" and "only one MIG instance" in result["error"][1]
    result, _ = run_one(NVML, [1], spec=MIG_HOST)
    assert result["cuda_visible_devices"] == "MIG-a"
    assert [
        "INFO",
        "flink_gpu.gpu.nvml_discovery",
        "Discover GPU resources: [GPU Device(0:0), GPU Device(0:2), GPU Device(0:5), GPU Device(1)].",
    ] in logs


def mig_host_with(gpu=None, unit=None):
    """MIG_HOST with keys added to its MIG GPU (``gpu``) and to the instance in slot 2 (``unit``)."""
    spec = json.loads(json.dumps(MIG_HOST))
    spec["devices"][0].update(gpu or {})
    spec["devices"][0]["mig"]["instances"][1].update(unit or {})
    return spec


@pytest.mark.parametrize(
    "gpu, reason",
    [
        ({"health": {"recovery_action": "gpu_reset"}}, "GPU recovery action: reset the GPU"),
        ({"fabric": {"state": "not_started"}}, "NVLink fabric registration not started"),
        ({"health": {"row_remap_failure": True}}, "row remapping failed"),
        ({"health": {"state_error": "GPU_IS_LOST"}}, "GPU is lost"),
    ],
)
def test_a_verdict_on_a_mig_gpu_applies_to_every_unit(gpu, reason):
    [one, two], logs = run_scenarios([(NVML, [1]), (NVML, [2])], spec=mig_host_with(gpu=gpu))
    assert indices(one["retrievals"][0]) == ["1"]
    message = two["error"][1]
    for unit in ("0:0", "0:2", "0:5"):
        assert f"GPU {unit} is left out (unhealthy: " in message
    warnings = [m for level, _, m in logs if level == "WARNING"]
    assert len(warnings) == 3 and all(reason in w for w in warnings)


def test_a_mig_units_own_finding_is_the_units_only():
    result, _ = run_one(NVML, [3], spec=mig_host_with(unit={"health": {"inforom_corrupted": True}}))
    assert indices(result["retrievals"][0]) == ["0:0", "0:5", "1"]
    result, _ = run_one(NVML, [4], spec=mig_host_with(unit={"health": {"inforom_corrupted": True}}))
    assert result["error"][0] == "FlinkException"
    assert "GPU 0:2 is left out (unhealthy: InfoROM corrupted)" in result["error"][1]
    assert "GPU 0:0 is left out" not in result["error"][1]


# --- NVML with a deadline (docs/design.md §9.5) and the query plan (§9.1) --------------------------

# Runs retrievals of one driver, then lets the hung query go and leaves with os._exit: a thread is
# still inside the (simulated) driver, which the interpreter's exit must not tear down under it.
HANG_RUNNER = RUNNER.replace(
    'print(json.dumps({"results": output, "logs": records}))',
    """
print(json.dumps({"results": output, "logs": records}), flush=True)
os.unlink(os.environ["HANG_FILE"])
os._exit(0)
""",
)


def run_while_stuck(hang_file, spec, scenarios):
    """HANG_RUNNER's output for ``scenarios`` on the simulated host ``spec``, whose hang rules block while
    ``hang_file`` exists: created here, removed by the runner once it has printed."""
    hang_file.write_text("")
    return run_child(HANG_RUNNER, scenarios, {**simulator.environment(spec=spec), "HANG_FILE": str(hang_file)})


def test_a_gpu_whose_state_read_does_not_return_in_time_is_unknown_warned_and_never_handed_out(tmp_path):
    hang_file = tmp_path / "hang"
    spec = {
        "devices": [{} for _ in range(4)],
        "driver_lock": False,
        "hang": [{"query": "field_values", "device": 1, "while_exists": str(hang_file)}],
    }
    for topology, stalled in (("ignore", "did not return within 300 ms"), ("prefer", "has not returned for ")):
        config = {**NVML, "nvml-timeout": "300 ms", "topology": topology}
        output = run_while_stuck(hang_file, spec, [(config, [1, 3, 4])])
        [result], logs = output["results"], output["logs"]
        first, second = result["retrievals"]
        assert indices(first) == ["0"]
        # GPU 1 is still stuck: unknown at once, the others read again
        assert indices(second) == ["0", "2", "3"]
        assert result["error"][0] == "FlinkException"
        assert "GPU 1 is left out (unknown: nvmlDeviceGetFieldValues has not returned for " in result["error"][1]
        warnings = [message for level, _, message in logs if level == "WARNING"]
        # GPU 1 was never read (the claim of 1 stopped at GPU 0) before it got stuck: its uuid is not known. The
        # state read meets the hang (ignore), or the topology read of the claim of three does, within half the
        # deadline, and the state read after it finds the GPU stuck still (prefer): the same query named
        assert any(m.startswith(f"GPU 1 is unknown: nvmlDeviceGetFieldValues {stalled}") for m in warnings), warnings
        assert any(m.startswith("GPU 1 is unknown: nvmlDeviceGetFieldValues has not returned for ") for m in warnings)


def test_a_gpu_found_after_waiting_out_a_stuck_one_is_enumerated_within_a_deadline_of_its_own(tmp_path):
    """GPU 0's health read hangs for all of nvml-timeout while another worker reads GPU 1; GPU 1's static
    properties (20 ms a query here) are then read within an nvml-timeout of their own, not the nothing left."""
    hang_file = tmp_path / "hang"
    spec = {
        "devices": [{}, {}, {}],
        "driver_lock": False,
        "latency_ms": {"static": 20},
        "hang": [{"query": "field_values", "device": 0, "while_exists": str(hang_file)}],
    }
    config = {**NVML, "nvml-timeout": "1 s"}  # several times the enumeration's ~8 queries of 20 ms
    output = run_while_stuck(hang_file, spec, [(config, [1])])
    [result] = output["results"]
    assert "error" not in result, result["error"]
    [infos] = result["retrievals"]
    assert indices(infos) == ["1"] and dict(infos[0])["uuid"] == sim_uuid(1)


def test_an_unhealthy_gpu_whose_uuid_read_hangs_does_not_keep_the_healthy_ones_from_being_handed_out(tmp_path):
    """GPU 0 is unhealthy (its InfoROM is corrupt) and its static queries hang: its uuid, for the WARN, is
    read in an enumeration of its own, so the healthy GPU 1 is handed out, now and at the next claim,
    and the WARN names GPU 0 without its uuid."""
    hang_file = tmp_path / "hang"
    spec = {
        "devices": [{"health": {"inforom_corrupted": True}}, {}, {}],
        "driver_lock": False,
        "hang": [{"query": "static", "device": 0, "while_exists": str(hang_file)}],
    }
    config = {**NVML, "nvml-timeout": "300 ms"}
    output = run_while_stuck(hang_file, spec, [(config, [1, 1])])
    [result], logs = output["results"], output["logs"]
    assert "error" not in result, result["error"]
    assert [indices(infos) for infos in result["retrievals"]] == [["1"], ["1"]]
    assert dict(result["retrievals"][0][0])["uuid"] == sim_uuid(1)
    warnings = [message for level, _, message in logs if level == "WARNING"]
    assert any(m.startswith("GPU 0 is unhealthy: InfoROM corrupted") for m in warnings), warnings


def test_one_stuck_gpu_does_not_keep_a_claim_from_the_free_gpus_after_it(tmp_path):
    """GPU 0 is held by another process, GPU 1's health read hangs (the driver lock not held): the
    GPUs after GPU 1 are read by another worker within the same nvml-timeout, and GPU 2 is handed out.
    A claim that is short all the same names the unknown GPU and its stalled call, and counts the host's
    four GPUs."""
    hang_file = tmp_path / "hang"
    coord = tmp_path / "coord"
    coordination.claim(1, ["0"], path=coord)  # held by this test's process: another holder for the driver
    spec = {
        "devices": [{} for _ in range(4)],
        "driver_lock": False,
        "hang": [{"query": "field_values", "device": 1, "while_exists": str(hang_file)}],
    }
    config = {
        **NVML,
        # long compared with any scheduling delay: the second worker starts a sixteenth into it
        "nvml-timeout": "10 s",
        "discovery-script.args": f"--enable-coordination-mode --coordination-file {coord}",
    }
    output = run_while_stuck(hang_file, spec, [(config, [1]), (config, [3])])
    [one, three] = output["results"]
    assert [indices(r) for r in one["retrievals"]] == [["2"]]
    assert three["retrievals"] == [] and three["error"][0] == "NotEnoughGpusError"
    message = three["error"][1]
    assert message.startswith(
        "Could not get enough GPU resources. Requested 3, the host has 4 GPUs (0, 1, 2, 3), of which GPU 1 is "
        "unknown (nvmlDeviceGetFieldValues has not returned for "
    ), message
    assert f"pid {os.getpid()} holds 0" in message
    assert "the host has 3 GPUs" not in message


# After its claims a process keeps no NVML thread (a later os.fork() is of a one-thread process): the
# threads of the process (/proc/self/task) once a claim is done, and how long until only one is left.
NO_THREAD_LEFT = r"""
import json, os, time
from flink_gpu import GPUDriver
threads = lambda: len(os.listdir("/proc/self/task"))
before = threads()
with GPUDriver({"discovery-mode": "nvml"}) as driver:
    for _ in range(3):
        driver.retrieve_resource_info(2)
during = threads()
start = time.monotonic()
while threads() > before and time.monotonic() - start < 10:  # 10 s: an upper bound only
    time.sleep(0.01)
print(json.dumps({"before": before, "during": during, "after": threads()}))
"""


def test_no_nvml_thread_is_left_in_a_process_a_few_seconds_after_its_last_claim():
    env = dict(os.environ, PYTHONPATH=SRC, **simulator.environment(devices=4))
    done = subprocess.run([sys.executable, "-c", NO_THREAD_LEFT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["during"] == counts["before"] + 1  # one worker, reused by every retrieve
    assert counts["after"] == counts["before"]


def run_hung(tmp_path, query, config, scenarios):
    """``scenarios`` in one child process (HANG_RUNNER) while the simulator's ``query`` family hangs; then
    the same ``config`` in a new process after the hang is released: (results while hung, result after)."""
    hang_file = tmp_path / "hang"
    spec = {"devices": [{}, {}], "hang": [{"query": query, "while_exists": str(hang_file)}]}
    with simulator.hanging(hang_file):
        results, _ = run_scenarios(scenarios, spec=spec, env={"HANG_FILE": str(hang_file)}, runner=HANG_RUNNER)
    [after], _ = run_scenarios([(config, [1])], spec=spec)
    return results, after


def test_a_hung_nvml_init_fails_within_the_nvml_timeout_and_a_second_open_answers_at_once(tmp_path):
    """docs/design.md §9.5: nvmlInit can hang (NVIDIA/go-nvml#152); the driver's open has its nvml-timeout."""
    config = {**NVML, "nvml-timeout": "300 ms"}
    (first, second), after = run_hung(tmp_path, "init", config, [(config, [1]), (config, [1])])
    library = simulator.library_path()
    assert first["error"] == [
        "NvmlError",
        f"NVML did not answer: nvmlInit_v2 did not return within 300 ms (library '{library}', timeout 300 ms). "
        "The NVIDIA driver may hang: check dmesg for Xid errors and nvidia-smi; this process calls NVML again "
        "only once the stalled call returns.",
    ]
    # still stuck: no second wait, the same stall with how long it has lasted
    assert second["error"][0] == "NvmlError"
    assert second["error"][1].startswith("NVML did not answer: nvmlInit_v2 has not returned for ")
    assert indices(after["retrievals"][0]) == ["0"]


def test_hung_handles_fail_a_retrieval_within_the_nvml_timeout_and_a_second_one_answers_at_once(tmp_path):
    """Every GPU's first handle hangs (holding the driver's lock): the claim names each GPU unknown with its
    stalled call, within nvml-timeout; a new driver of the same process, with the call still stuck, cannot
    even count the GPUs and says NVML does not answer."""
    config = {**NVML, "nvml-timeout": "300 ms"}
    (first, second), after = run_hung(tmp_path, "handle", config, [(config, [1]), (config, [1])])
    assert first["error"][0] == "FlinkException"
    assert "1 GPU requested, but 0 of the 2 devices NVML (" in first["error"][1]
    assert (
        "GPU 0 is left out (unknown: nvmlDeviceGetHandleByIndex_v2 did not return within 300 ms)" in first["error"][1]
    )
    assert second["error"][0] == "NvmlError"
    assert second["error"][1].startswith("NVML did not answer: nvmlDeviceGetCount_v2 did not return within 300 ms")
    assert "check dmesg for Xid errors and nvidia-smi" in second["error"][1]
    assert indices(after["retrievals"][0]) == ["0"]


def test_busy_gpus_ignore_gives_infos_without_processes():
    result, _ = run_one({**NVML, "busy-gpus": "ignore"}, [2], spec=processes_on([(4000000001, "compute")], []))
    for info in result["retrievals"][0]:
        assert "processes" not in dict(info)
        assert dict(info)["health"] == "ok"


# What one claim asks NVML, per GPU (docs/design.md §9.1, query plan): counted by the simulator.
COUNT_RUNNER = r"""
import json, sys
from flink_gpu import GPUDriverFactory, simulator
config, amount, again = json.loads(sys.argv[1])
factory = GPUDriverFactory()
with factory.create_external_resource_driver(config) as first:
    first.retrieve_resource_info(amount)  # the process's enumeration and InfoROM reads, then released
simulator.reset_counters()
with factory.create_external_resource_driver(config) as driver:
    got = driver.retrieve_resource_info(amount)
    if again:  # asking again: what the owner holds is read, nothing more
        simulator.reset_counters()
        got = driver.retrieve_resource_info(amount)
    print(json.dumps({"calls": simulator.counters()["calls"], "got": sorted(info.index for info in got)}))
"""

PER_GPU_STATE = {
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeMode",
}


def claim_calls(tmp_path, amount, again=True, spec=None, **params):
    """(The simulator's NVML calls per function and GPU, the indices got) of a coordinated driver's claim of
    `amount` on 8 GPUs (or `spec`) in a process that claimed before; with `again`, of its second claim."""
    config = {
        **NVML,
        **params,
        "discovery-script.args": f"--enable-coordination-mode --coordination-file {tmp_path / 'coord'}",
    }
    out = run_child(
        COUNT_RUNNER, [config, amount, again], simulator.environment(devices=None if spec else 8, spec=spec)
    )
    return out["calls"], out["got"]


def gpus_read(calls, function="nvmlDeviceGetHandleByIndex_v2"):
    return sorted(calls.get(function, {}), key=int)


@pytest.mark.parametrize("busy_gpus", ["avoid", "exclude", "ignore"])
def test_a_claim_asks_each_needed_query_once_per_gpu_it_reads_and_no_more(tmp_path, busy_gpus):
    # memory in use on every GPU, so that its process lists are read, and no process listed
    calls, got = claim_calls(tmp_path, 2, spec={"devices": [{"memory_used": 2**30}] * 8}, **{"busy-gpus": busy_gpus})
    assert got == ["0", "1"]
    expected = dict.fromkeys(PER_GPU_STATE, 1)
    if busy_gpus != "ignore":  # compute and graphics; no MPS list without a compute process (§9.1)
        expected["nvmlDeviceGetRunningProcessDetailList"] = 2
    # nothing about the whole library but the one count; per GPU read each needed query once, nothing else
    assert calls.pop("nvmlDeviceGetCount_v2") == {"host": 1}
    assert calls == {function: dict.fromkeys(["0", "1"], n) for function, n in expected.items()}


@pytest.mark.parametrize("amount", [1, 2])
def test_a_claim_of_n_on_idle_gpus_reads_n_of_them(tmp_path, amount):
    calls, got = claim_calls(tmp_path, amount, again=False)
    assert got == gpus_read(calls) == gpus_read(calls, "nvmlDeviceGetMemoryInfo_v2") == [str(i) for i in range(amount)]
    # their memory shows no allocation: no process to list (docs/design.md §9.1)
    assert "nvmlDeviceGetRunningProcessDetailList" not in calls


def test_a_busy_first_gpu_makes_a_claim_read_one_more_not_all(tmp_path):
    busy = processes_on([(4000000001, "compute")], *[[]] * 7)
    calls, got = claim_calls(tmp_path, 1, again=False, spec=busy)
    assert (gpus_read(calls), got) == (["0", "1"], ["1"])


def test_an_unhealthy_gpu_makes_a_claim_read_one_more(tmp_path):
    calls, got = claim_calls(tmp_path, 2, again=False, spec=unhealthy_first({"row_remap_failure": True}, 8))
    assert (gpus_read(calls), got) == (["0", "1", "2"], ["1", "2"])


def test_a_claim_never_reads_a_gpu_another_live_holder_has(tmp_path, owners):
    from flink_gpu import coordination

    holder = owners()
    coordination.claim(2, ["0", "2"], path=tmp_path / "coord", owner=holder.pid)
    calls, got = claim_calls(tmp_path, 2, again=False)
    assert got == gpus_read(calls) == ["1", "3"]


def test_a_mig_unit_another_holder_has_does_not_stop_the_read_before_a_free_healthy_gpu(tmp_path, owners):
    """GPU 0 is degraded, GPU 1's only MIG unit is another live holder's: the claim reads on to GPU 2 and
    takes it, as a read of the whole host would, instead of handing out the degraded GPU 0."""
    from flink_gpu import coordination

    spec = {
        "devices": [
            {"health": {"recovery_action": "drain_p2p"}},
            {"mig": {"mode": "enabled", "instances": [{"slot": 0}]}},
            {},
        ]
    }
    holder = owners()
    coordination.claim(1, ["1:0"], path=tmp_path / "coord", owner=holder.pid)
    calls, got = claim_calls(tmp_path, 1, again=False, spec=spec)
    assert got == ["2"]
    assert gpus_read(calls) == ["0", "1", "2"]


def test_a_dead_holders_gpu_is_read_but_a_free_one_after_it_is_claimed_first(tmp_path):
    from conftest import dead_pid

    (tmp_path / "coord").write_text(f"0 {dead_pid()}\n")  # the stock script's line of a holder that died
    calls, got = claim_calls(tmp_path, 1, again=False)
    assert (gpus_read(calls), got) == (["0", "1"], ["1"])


# A new process's first claim: the simulator's calls from NVML's start, per function and GPU.
FIRST_CLAIM_RUNNER = r"""
import json, sys
from flink_gpu import GPUDriverFactory, simulator
config, amount = json.loads(sys.argv[1])
with GPUDriverFactory().create_external_resource_driver(config) as driver:
    got = driver.retrieve_resource_info(amount)
    print(json.dumps({"calls": simulator.counters()["calls"], "got": sorted(info.index for info in got),
                      "uuids": sorted(info.get_property("uuid") or "" for info in got)}))
"""


@pytest.mark.parametrize("amount", [1, 2])
def test_a_new_processs_first_claim_opens_and_enumerates_only_the_gpus_it_reads(tmp_path, amount):
    """Without persistence mode a GPU's first handle in a process costs seconds: a first claim of n on 8 idle
    GPUs opens n of them, and only those are enumerated (their infos carry their static properties). A claim of
    two needs the host's topology: the first one on the host reads it whole (every GPU opened, once) and leaves
    a copy beside the coordination file, so that every later process opens only the GPUs it takes."""
    config = {**NVML, "discovery-script.args": f"--enable-coordination-mode --coordination-file {tmp_path / 'c'}"}
    if amount > 1:
        before = run_child(FIRST_CLAIM_RUNNER, [config, amount], simulator.environment(devices=8))
        assert gpus_read(before["calls"]) == [str(i) for i in range(8)]
        assert (tmp_path / "c.topology").exists()
    out = run_child(FIRST_CLAIM_RUNNER, [config, amount], simulator.environment(devices=8))
    first = [str(i) for i in range(amount)]
    assert out["got"] == first and out["uuids"] == [sim_uuid(i) for i in range(amount)]
    opened = {gpu for function, by_gpu in out["calls"].items() for gpu in by_gpu if gpu != "host"}
    assert opened == set(first), out["calls"]
    assert gpus_read(out["calls"], "nvmlDeviceGetUUID") == first


def test_a_mig_gpu_without_instances_is_left_out_warned_once_and_counted():
    spec = {"devices": [{"mig": {"mode": "enabled", "instances": []}}, {}]}
    [ones, two], logs = run_scenarios([(NVML, [1, 1]), (NVML, [2])], spec=spec)
    assert [indices(r) for r in ones["retrievals"]] == [["1"], ["1"]]
    why = "MIG mode is enabled but it has no MIG instances (create them with nvidia-smi mig, or disable MIG mode)"
    assert [m for level, _, m in logs if level == "WARNING"] == [f"GPU 0 is unhealthy: {why}; it is not handed out."]
    assert two["error"][0] == "FlinkException"
    assert "2 GPUs requested, but 1 of the 2 devices NVML (" in two["error"][1]
    assert f"GPU 0 is left out (unhealthy: {why})" in two["error"][1]


def test_a_coordinated_driver_does_not_lock_the_coordination_file_while_a_state_read_hangs(tmp_path):
    """docs/design.md §9.5: state read, then lock, claim, unlock. While the driver's read hangs in NVML,
    another process takes the coordination file's flock at once."""
    import fcntl

    from support.simulated import wait_until_inside_a_hang

    coord = tmp_path / "coord"
    coord.write_text("")
    hang_file = tmp_path / "hang"
    spec = {"devices": [{}, {}], "hang": [{"query": "field_values", "device": 0, "while_exists": str(hang_file)}]}
    config = {
        **NVML,
        "nvml-timeout": "60 s",
        "discovery-script.args": f"--enable-coordination-mode --coordination-file {coord}",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_")}
    env.update(simulator.environment(spec=spec), PYTHONPATH=SRC)
    with simulator.hanging(hang_file):
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, json.dumps([(config, [1])])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_until_inside_a_hang(proc)
            with open(coord, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the driver held it
                fcntl.flock(f, fcntl.LOCK_UN)
            assert proc.poll() is None
        finally:
            simulator.hanging(hang_file).release()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    [result] = json.loads(out)["results"]
    assert indices(result["retrievals"][0]) == ["0"]
