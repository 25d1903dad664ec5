"""The `flink-gpu` command line, run as real processes against the NVML simulator."""

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

import flink_gpu
from flink_gpu import simulator
from conftest import child_env, run_python
from support.interop import find_discovery_executable
from support.files import make_odd_path

JAVA_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"
UUID0 = "GPU-00000000-0000-4000-8000-000000000000"


def cli(*args, env=None, timeout=60, cwd=None):
    return subprocess.run([sys.executable, "-m", "flink_gpu.cli", *map(str, args)],
                          env=child_env() if env is None else env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def cli_json(*args, env=None, expect=0, cwd=None):
    proc = cli(*args, "--json", env=env, cwd=cwd)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    assert doc["ok"] is (expect == 0)
    return doc


@pytest.fixture
def holder():
    """A live process that can own GPUs (it waits on stdin)."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    yield process
    process.stdin.close()
    process.wait(10)


HOLDER_COMMAND = f"{sys.executable} -c 'import sys; sys.stdin.read()'"


def cut_to_table(command):
    """A command line as the tables show it: cut to 60 columns, whatever the interpreter's path."""
    return command if len(command) <= 60 else command[:57] + "..."


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def pid_exists(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- the command line itself ----------------------------------------------------------------

def test_import_is_light():
    proc = run_python("""
        import sys
        import flink_gpu.cli
        heavy = ("yaml", "json", "subprocess", "flink_gpu._native", "flink_gpu.config",
                 "flink_gpu.coordination", "flink_gpu.gpu.driver")
        print(sorted(m for m in heavy if m in sys.modules))
    """, env=child_env())
    assert proc.stdout.strip() == "[]"


def test_help_lists_every_subcommand_and_the_exit_codes():
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("list", "coordination", "claim", "release", "doctor", "resources", "demo"):
        assert re.search(rf"^\s+{command}\s", proc.stdout, re.M), command
    assert "Exit codes: 0 ok, 1" in " ".join(proc.stdout.split())


def test_claim_help_says_the_owner_is_the_parent_process():
    proc = cli("claim", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "defaults to the parent of this command (normally your shell)" in text
    assert "reclaimable right away" in text


@pytest.mark.parametrize("args", [
    [],                                   # no subcommand
    ["claim"],                            # N missing
    ["claim", "two"],
    ["claim", "-1"],
    ["list", "--simulate", "-1"],
    ["--simulate", "2", "--simulate-spec", "x.json", "list"],
    ["release", "--owner", "0"],
    ["release", "--owner", "4294967297"],  # too large: said so, not "must be positive"
    ["doctor", "--taskmanagers-per-host", "0"],
    ["coordination"],                     # action missing
    ["resources", "conf.yaml", "--kubernetes", "--yarn"],
    ["bogus"],
])
def test_usage_errors_exit_2(args):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "usage:" in proc.stderr
    if "4294967297" in args:
        assert "a process id is at most 2147483647, got 4294967297" in proc.stderr


def test_main_returns_exit_codes_in_process(capsys):
    from flink_gpu.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"flink-gpu {flink_gpu.__version__}"
    assert main(["list", "--no-such-flag"]) == 2


# -- list ------------------------------------------------------------------------------------

def test_list_on_the_simulator(tmp_path):
    proc = cli("--simulate", "3", "list", "--file", tmp_path / "coord")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("INDEX"))
    assert header.split() == ["INDEX", "UUID", "NAME", "MEMORY", "BUS", "ID", "HOLDER"]
    rows = [line for line in lines if re.match(r"\d+\s+GPU-", line)]
    assert len(rows) == 3
    assert rows[0].split()[:2] == ["0", UUID0]
    assert "NVIDIA Simulated GPU  80.0 GiB  00000000:01:00.0  free" in rows[0]
    # columns are aligned: every row's UUID starts where the header's does
    assert all(row.index("GPU-") == header.index("UUID") for row in rows)
    assert "3 GPUs" in lines[0]
    assert f"{tmp_path / 'coord'} does not exist" in proc.stdout


def test_simulate_goes_before_or_after_the_subcommand(tmp_path):
    before = cli_json("--simulate", "2", "list", "--file", tmp_path / "c")
    after = cli_json("list", "--simulate", "5", "--file", tmp_path / "c")
    assert [g["index"] for g in before["gpus"]] == ["0", "1"]
    assert len(after["gpus"]) == 5


def test_list_json_shows_holders_stale_entries_and_unparsable_lines(tmp_path, holder):
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "2", "--owner", holder.pid, "--file", coord)
    gone = dead_pid()
    with open(coord, "a") as handle:
        handle.write(f"3 {gone}\nnot a line\n7 {holder.pid}\n")
    doc = cli_json("--simulate", "4", "list", "--file", coord)
    assert doc["command"] == "list"
    assert doc["nvml"]["driver_version"] == "999.99.99"
    gpus = {g["index"]: g for g in doc["gpus"]}
    assert set(gpus["0"]) == {"index", "uuid", "name", "memory_total", "pci_bus_id",
                              "minor_number", "holders", "stale_holders", "health", "findings", "checks",
                              "memory_used", "memory_free", "numa_node", "cpu_affinity",
                              "compute_mode", "processes_known", "processes",
                              "utilization", "temperature", "power"}
    assert gpus["0"]["uuid"] == UUID0 and gpus["0"]["memory_total"] == 80 * 2 ** 30
    assert gpus["0"]["holders"] == [{"pid": holder.pid,
                                    "cmdline": [sys.executable, "-c", "import sys; sys.stdin.read()"],
                                    "liveness_known": True, "ours": True,
                                    "namespace": os.stat("/proc/self/ns/pid").st_ino}]
    assert gpus["1"]["holders"][0]["pid"] == holder.pid
    assert gpus["2"]["holders"] == [] and gpus["2"]["stale_holders"] == []
    assert gpus["3"]["holders"] == [] and gpus["3"]["stale_holders"] == [gone]
    assert doc["coordination"]["unparsable"] == [{"line_number": 4, "text": "not a line"}]
    assert doc["coordination"]["unknown_indices"] == ["7"]

    human = cli("--simulate", "4", "list", "--file", coord)
    assert human.returncode == 0
    row0 = next(line for line in human.stdout.splitlines() if line.startswith("0 "))
    holder_text = row0.split(f"pid {holder.pid}: ", 1)[1]
    assert holder_text == cut_to_table(HOLDER_COMMAND)
    row3 = next(line for line in human.stdout.splitlines() if line.startswith("3 "))
    assert row3.endswith(f"free (stale: dead pid {gone})")
    assert "line 4 cannot be parsed" in human.stdout
    assert f"flink-gpu coordination clean --file {coord}" in human.stdout
    assert "this host does not have: 7" in human.stdout


def test_list_still_lists_gpus_when_the_coordination_file_is_unusable(tmp_path):
    proc = cli("--simulate", "2", "list", "--file", tmp_path)  # a directory
    assert proc.returncode == 0
    rows = re.findall(r"^\d+ +GPU-.*$", proc.stdout, re.M)
    assert len(rows) == 2 and all(row.endswith("  ?") for row in rows)  # not "free"
    assert f"Holders unknown: Refusing to use the coordination file {tmp_path}" in proc.stdout
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path)
    assert "it is a directory" in doc["coordination"]["error"]
    assert doc["coordination"]["exists"] is False


def test_list_reports_skipped_devices(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"name": "NVIDIA H100"}, {"fault": "GPU_IS_LOST"},
                                            {"fault": "NO_PERMISSION"}]}))
    doc = cli_json("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H100"]
    assert [s["index"] for s in doc["skipped"]] == ["1", "2"]
    human = cli("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert "1 GPU, 2 skipped" in human.stdout
    skipped = human.stdout.split("Skipped devices:")[1]
    assert re.search(r"^  1: .*", skipped, re.M) and re.search(r"^  2: .*", skipped, re.M)
    for item in doc["skipped"]:
        assert f"  {item['index']}: {item['reason']}" in skipped


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{not json", "cannot read"),
    ('{"devices": [{"colour": "red"}]}', "unknown keys ['colour']"),
])
def test_simulate_spec_errors_are_usage_errors(tmp_path, content, message):
    spec = tmp_path / "spec.json"
    if content is not None:
        spec.write_text(content)
    proc = cli("list", "--simulate-spec", spec)
    assert proc.returncode == 2
    assert message in proc.stderr and str(spec) in proc.stderr


def test_without_a_driver_list_fails_clearly(tmp_path):
    missing = tmp_path / "libnvidia-ml.so.1"
    env = child_env(FLINK_GPU_NVML_LIBRARY=str(missing))
    proc = cli("list", env=env)
    assert proc.returncode == 1
    assert str(missing) in proc.stderr
    assert "--simulate 4" in proc.stderr  # the hint
    doc = cli_json("list", env=env, expect=1)
    assert doc["error"]["type"] == "NvmlError" and str(missing) in doc["error"]["message"]



# -- list: bindings (docs/design.md §9.3) -------------------------------------------------------

# Binds in a thread of its own and waits on stdin; prints the bound indices and the thread's id.
BINDER = """\
import sys, threading
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
path, taskmanager, count, share, slot, gpus = sys.argv[1:7]
def hold():
    binding = bind([GPUInfo(i) for i in gpus.split(",")], int(count), int(share), path=path,
                   slot=None if slot == "-" else slot, taskmanager_pid=None if taskmanager == "-" else int(taskmanager))
    print(",".join(binding.indices), threading.get_native_id(), flush=True)
    sys.stdin.read()
thread = threading.Thread(target=hold)
thread.start()
thread.join()
"""


@pytest.fixture
def binders(tmp_path):
    """``bind(path, taskmanager, gpus, count=1, share=1, slot=None)``: a live process that binds (for
    ``slot``, from a thread of its own) and holds until the test ends: (process, indices, thread id)."""
    script = tmp_path / "binder.py"
    script.write_text(BINDER)
    processes = []

    def bind(path, taskmanager, gpus, count=1, share=1, slot=None):
        process = subprocess.Popen(binder_cmdline(script, path, taskmanager, gpus, count, share, slot),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
        processes.append(process)
        indices, thread = process.stdout.readline().split()
        return process, indices.split(","), int(thread)

    bind.script = script
    yield bind
    for process in processes:
        process.kill()
        process.wait(10)


def binder_cmdline(script, path, taskmanager, gpus, count=1, share=1, slot=None):
    return [sys.executable, str(script), str(path), "-" if taskmanager is None else str(taskmanager), str(count),
            str(share), slot or "-", ",".join(gpus)]


def test_list_shows_bindings_under_their_taskmanager(tmp_path, holder, binders):
    coord = tmp_path / "coord"
    bindings = tmp_path / "coord.bindings"
    taskmanager = holder.pid
    cli_json("--simulate", "4", "claim", "3", "--owner", taskmanager, "--file", coord)
    worker, got, _ = binders(bindings, taskmanager, ["0", "1", "2"])
    slot, slot_got, thread = binders(bindings, taskmanager, ["0", "1", "2"], slot="alloc-1")
    shared, shared_got, _ = binders(bindings, taskmanager, ["0", "1", "2"], share=2)
    service, service_got, _ = binders(bindings, None, ["3"])
    assert (got, slot_got, shared_got, service_got) == (["0"], ["1"], ["2"], ["3"])
    dead, _, _ = binders(bindings, taskmanager, ["2"], share=2)  # shares GPU 2, then dies
    dead.kill()
    dead.wait(10)
    content = bindings.read_text()
    bad_line = len(content.splitlines()) + 1
    bindings.write_text(content + ("" if content.endswith("\n") else "\n") + "not a line\n")

    doc = cli_json("--simulate", "4", "list", "--file", coord)["bindings"]
    assert doc["path"] == str(bindings) and doc["exists"] is True and doc["error"] is None
    assert doc["taskmanagers"] == [
        {"pid": taskmanager, "namespace": os.stat("/proc/self/ns/pid").st_ino, "ours": True,
         "cmdline": [sys.executable, "-c", "import sys; sys.stdin.read()"],
         "claimed": ["0", "1", "2"], "holders": [
             {"holder": f"pid {worker.pid}", "slot": None, "pid": worker.pid, "threads": [], "gpus": ["0"],
              "holders_per_gpu": 1, "liveness_known": True,
              "cmdline": binder_cmdline(binders.script, bindings, taskmanager, ["0", "1", "2"])},
             {"holder": "slot alloc-1", "slot": "alloc-1", "pid": None, "threads": [thread], "gpus": ["1"],
              "holders_per_gpu": 1, "liveness_known": True, "cmdline": None},
             {"holder": f"pid {shared.pid}", "slot": None, "pid": shared.pid, "threads": [], "gpus": ["2"],
              "holders_per_gpu": 2, "liveness_known": True,
              "cmdline": binder_cmdline(binders.script, bindings, taskmanager, ["0", "1", "2"], share=2)}]},
        {"pid": None, "namespace": None, "ours": True, "cmdline": None, "claimed": [], "holders": [
            {"holder": f"pid {service.pid}", "slot": None, "pid": service.pid, "threads": [], "gpus": ["3"],
             "holders_per_gpu": 1, "liveness_known": True,
             "cmdline": binder_cmdline(binders.script, bindings, None, ["3"])}]}]
    assert thread != slot.pid  # a slot holder's lines are its binding threads', not its process's
    assert [(s["index"], s["pid"], s["taskmanager"]) for s in doc["stale"]] == [("2", dead.pid, taskmanager)]
    assert doc["unparsable"] == [{"line_number": bad_line, "text": "not a line"}] and doc["unknown_indices"] == []

    human = cli("--simulate", "4", "list", "--file", coord).stdout
    section = human.split(f"Bindings from {bindings} (GPUs bound to the holders inside a TaskManager):\n", 1)[1]
    lines = section.splitlines()
    assert lines[0] == (f"  TaskManager pid {taskmanager} (holds GPU 0, 1, 2 in the coordination file): "
                        + cut_to_table(HOLDER_COMMAND))
    assert lines[1].split() == ["HOLDER", "GPU", "SHARED", "COMMAND"] and lines[1].startswith("    HOLDER")
    assert lines[2].split()[:4] == ["pid", str(worker.pid), "0", "alone"]
    assert lines[3].split() == ["slot", "alloc-1", "1", "alone", "binding", "thread", str(thread)]
    assert lines[4].split()[:5] == ["pid", str(shared.pid), "2", "up", "to"] and " up to 2 " in lines[4]
    assert lines[5] == "  Holders without a recorded TaskManager:"
    assert lines[7].split()[:4] == ["pid", str(service.pid), "3", "alone"]
    assert lines[8] == "  1 entry of dead holders: its GPU is free again, and the next bind removes it."
    assert lines[9] == f"  line {bad_line} cannot be parsed (its GPU is never bound): 'not a line'"


def test_list_shows_a_command_line_with_control_characters_on_one_line_escaped(tmp_path, binders):
    # the TaskManager's command is all the test's own bytes, so no interpreter path pushes them past the width
    taskmanager = subprocess.Popen(["a\nb\x1b[31m"], executable="/bin/cat", stdin=subprocess.PIPE)
    try:
        binders(tmp_path / "coord.bindings", taskmanager.pid, ["0"])
        human = cli("--simulate", "1", "list", "--file", tmp_path / "coord").stdout
    finally:
        taskmanager.kill()
        taskmanager.wait(10)
    [row] = [line for line in human.splitlines() if line.startswith(f"  TaskManager pid {taskmanager.pid} ")]
    assert "\x1b" not in human and row.endswith(": 'a\\nb\\x1b[31m'")


def test_coordination_clean_cleans_a_bindings_file_too(tmp_path, binders):
    bindings = tmp_path / "coord.bindings"
    live, _, _ = binders(bindings, None, ["0", "1"])
    ns = os.stat("/proc/self/ns/pid").st_ino
    with open(bindings, "a") as f:  # a slot thread of another pid namespace, and a dead holder of ours
        f.write(f"1 12345\t99\tns={ns + 1}\ttm=1\tshare=1\tslot=abc\n2 {2 ** 22 + 7}\t5\tns={ns}\tshare=1\n")
    doc = cli_json("coordination", "clean", "--file", bindings, "--foreign-namespaces")
    assert doc["ok"] is True
    assert [line.split()[:2] for line in bindings.read_text().splitlines()] == [["0", str(live.pid)]]


def test_list_keeps_apart_the_taskmanagers_of_two_pid_namespaces_with_the_same_pid(tmp_path):
    # two containers' TaskManagers, both pid 1 in their own namespace; only the first claimed GPU 0
    ns = os.stat("/proc/self/ns/pid").st_ino
    a, b = ns + 1, ns + 2
    (tmp_path / "coord").write_text(f"0 1\t5\tns={a}\n")
    (tmp_path / "coord.bindings").write_text(f"0 7\t5\tns={a}\ttm=1\tshare=1\tslot=alloc-a\n"
                                             f"1 7\t5\tns={b}\ttm=1\tshare=1\tslot=alloc-b\n")
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")["bindings"]
    assert [(t["pid"], t["namespace"], t["claimed"], [h["holder"] for h in t["holders"]])
            for t in doc["taskmanagers"]] == [(1, a, ["0"], ["slot alloc-a"]), (1, b, [], ["slot alloc-b"])]
    human = cli("--simulate", "2", "list", "--file", tmp_path / "coord").stdout
    assert f"  TaskManager pid 1 of PID namespace {a} (holds GPU 0 in the coordination file)" in human
    assert f"  TaskManager pid 1 of PID namespace {b} (holds no GPU in the coordination file)" in human


def test_list_names_bound_gpus_this_host_does_not_have(tmp_path, binders):
    bindings = tmp_path / "coord.bindings"
    binders(bindings, None, ["7"])
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")["bindings"]
    assert doc["unknown_indices"] == ["7"]
    human = cli("--simulate", "2", "list", "--file", tmp_path / "coord").stdout
    assert human.rstrip().endswith("  entries name GPU(s) this host does not have: 7")


def test_list_without_a_bindings_file_has_no_bindings_section(tmp_path):
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")["bindings"]
    assert doc == {"path": str(tmp_path / "coord.bindings"), "exists": False, "error": None, "taskmanagers": [],
                   "stale": [], "unparsable": [], "unknown_indices": []}
    assert "Bindings" not in cli("--simulate", "2", "list", "--file", tmp_path / "coord").stdout


def test_list_still_lists_gpus_when_the_bindings_file_is_unusable(tmp_path):
    (tmp_path / "coord.bindings").mkdir()
    proc = cli("--simulate", "2", "list", "--file", tmp_path / "coord")
    assert proc.returncode == 0 and len(re.findall(r"^\d+ +GPU-", proc.stdout, re.M)) == 2
    assert f"Bindings unknown: Refusing to use the bindings file {tmp_path / 'coord.bindings'}" in proc.stdout
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")["bindings"]
    assert "it is a directory" in doc["error"] and doc["exists"] is False

# -- claim / release ---------------------------------------------------------------------------

def test_claim_and_release_default_to_the_parent_process(tmp_path):
    coord = tmp_path / "coord"
    doc = cli_json("--simulate", "4", "claim", "2", "--file", coord)
    # this test process is the command's parent
    assert doc["owner"]["pid"] == os.getpid()
    assert doc["gpus"] == [{"index": "0", "uuid": UUID0, "health": "ok"},
                           {"index": "1", "uuid": "GPU-00000000-0000-4000-8000-000000000001", "health": "ok"}]
    assert doc["left_out"] == []
    assert [line.split()[:2] for line in coord.read_text().splitlines()] == [
        ["0", str(os.getpid())], ["1", str(os.getpid())]]
    human = cli("--simulate", "4", "claim", "1", "--file", coord)
    assert human.returncode == 0
    # asking again tops nothing up: the owner already holds 2 >= 1
    assert f"Claimed GPU 0 for pid {os.getpid()}" in human.stdout
    assert f"CUDA_VISIBLE_DEVICES={UUID0}" in human.stdout
    released = cli_json("release", "--file", coord)
    assert released["released"] == ["0", "1"] and released["owner"]["pid"] == os.getpid()
    assert coord.read_text().strip() == ""
    again = cli("release", "--file", coord)
    assert again.returncode == 0 and "held no GPU" in again.stdout


def test_claim_for_another_owner_and_release_one_gpu(tmp_path, holder):
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "3", "--owner", holder.pid, "--file", coord)
    doc = cli_json("release", "--owner", holder.pid, "--gpu", "1", "--file", coord)
    assert doc["released"] == ["1"]
    listing = cli_json("--simulate", "4", "list", "--file", coord)
    assert [g["index"] for g in listing["gpus"] if g["holders"]] == ["0", "2"]


def test_claim_fails_with_exit_1_when_too_few_gpus_are_free(tmp_path, holder):
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "3", "--owner", holder.pid, "--file", coord)
    proc = cli("--simulate", "4", "claim", "2", "--file", coord)
    assert proc.returncode == 1
    assert "Could not get enough GPU resources" in proc.stderr
    doc = cli_json("--simulate", "4", "claim", "2", "--file", coord, expect=1)
    assert doc["error"]["type"] == "FlinkException"
    assert f"{holder.pid}" in coord.read_text() and str(os.getpid()) not in coord.read_text()


def test_claim_for_a_dead_owner_is_refused(tmp_path):
    proc = cli("--simulate", "4", "claim", "1", "--owner", dead_pid(), "--file", tmp_path / "c")
    assert proc.returncode == 2
    assert "no such (live) process" in proc.stderr
    assert not (tmp_path / "c").exists()


def test_claim_ranks_as_the_driver_and_warns_what_it_leaves_out(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [
        {"health": {"inforom_corrupted": True}},
        {"processes": [{"pid": 4000000001, "used_memory": 2 ** 20}]},  # no one's here: foreign
        {"health": {"row_remap_pending": True}}, {}]}))
    proc = cli("--simulate-spec", spec, "claim", "2", "--file", tmp_path / "c", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # healthy idle first, then healthy busy; never the corrupted one, the degraded one last
    assert [g["index"] for g in doc["gpus"]] == ["1", "3"]
    assert doc["left_out"] == [{"index": "0", "reason": "unhealthy: InfoROM corrupted"}]
    assert "GPU 0 left out: unhealthy: InfoROM corrupted" in proc.stderr
    assert "GPU 1 is busy: foreign process 4000000001 (compute, not visible" in proc.stderr
    proc = cli("--simulate-spec", spec, "claim", "4", "--file", tmp_path / "d")
    assert proc.returncode == 1 and "Could not get enough GPU resources" in proc.stderr


def test_claim_of_several_mig_units_gives_one_cuda_visible_devices_per_process(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"mig": {"mode": "enabled", "instances": [
        {"slot": 0, "uuid": "MIG-a"}, {"slot": 1, "uuid": "MIG-b"}, {"slot": 2, "uuid": "MIG-c"}]}}]}))
    proc = cli("--simulate-spec", spec, "claim", "3", "--file", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert "CUDA_VISIBLE_DEVICES=MIG-a,MIG-b" not in proc.stdout
    assert "CUDA uses one MIG instance per process" in proc.stdout
    lines = [line.strip() for line in proc.stdout.splitlines() if "CUDA_VISIBLE_DEVICES=" in line]
    assert lines == ["CUDA_VISIBLE_DEVICES=MIG-a", "CUDA_VISIBLE_DEVICES=MIG-b", "CUDA_VISIBLE_DEVICES=MIG-c"]
    proc = cli("--simulate-spec", spec, "claim", "1", "--file", tmp_path / "d")
    assert "CUDA_VISIBLE_DEVICES=MIG-a" in proc.stdout and "one MIG instance" not in proc.stdout


# -- coordination show / clean --------------------------------------------------------------

def test_coordination_show_and_clean(tmp_path, holder):
    coord = tmp_path / "coord"
    gone = dead_pid()
    start = int(Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    coord.write_text(f"0 {holder.pid} {start}\n1 {gone}\ngarbage here\n"
                     f"2 {holder.pid} {start + 12345}\n")
    doc = cli_json("coordination", "show", "--file", coord)
    assert doc["command"] == "coordination show" and doc["exists"] is True
    states = {e["index"]: (e["pid"], e["state"], e["alive"]) for e in doc["entries"]}
    assert states == {"0": (holder.pid, "live", True), "1": (gone, "gone", False),
                      "2": (holder.pid, "pid reused", False)}
    assert doc["entries"][0]["cmdline"][0] == sys.executable
    assert doc["unparsable"] == [{"line_number": 3, "text": "garbage here"}]

    human = cli("coordination", "show", "--file", coord)
    assert human.returncode == 0
    assert "3 entries (1 live, 2 stale), 1 unparsable line" in human.stdout
    assert re.search(rf"^2\s+1\s+{gone}\s+-\s+gone\s+-$", human.stdout, re.M)
    assert re.search(rf"^4\s+2\s+{holder.pid}\s+{start + 12345}\s+pid reused", human.stdout, re.M)
    assert "line 3: 'garbage here'" in human.stdout

    cleaned = cli_json("coordination", "clean", "--file", coord)
    assert sorted(e["index"] for e in cleaned["removed"]) == ["1", "2"]
    assert cleaned["unparsable"] == [{"line_number": 3, "text": "garbage here"}]
    assert coord.read_text() == f"0 {holder.pid} {start}\ngarbage here\n"
    again = cli("coordination", "clean", "--file", coord)
    assert again.returncode == 0 and "No stale entry" in again.stdout
    assert "Kept unparsable line" in again.stdout


def test_clean_foreign_namespaces_names_each_freed_gpu_once(tmp_path):
    coord = tmp_path / "coord"
    coord.write_text("0 100\tns=1\n0 200\tns=1\n1 300\tns=1\tmig=1:2\n")  # GPU 0 twice: two holders' lines
    proc = cli("coordination", "clean", "--foreign-namespaces", "--file", coord)
    assert proc.returncode == 0, proc.stderr
    assert "(--foreign-namespaces; GPUs 0, 1:2 may be claimed again):" in proc.stdout, proc.stdout


def test_coordination_commands_on_a_missing_file_create_nothing(tmp_path):
    coord = tmp_path / "coord"
    show = cli("coordination", "show", "--file", coord)
    assert show.returncode == 0 and "does not exist" in show.stdout
    clean = cli_json("coordination", "clean", "--file", coord)
    assert clean["exists"] is False and clean["removed"] == []
    assert not coord.exists()


def test_coordination_refuses_a_symlink(tmp_path):
    target = tmp_path / "target"
    target.write_text("0 1\n")
    (tmp_path / "link").symlink_to(target)
    proc = cli("coordination", "show", "--file", tmp_path / "link")
    assert proc.returncode == 1
    assert str(tmp_path / "link") in proc.stderr
    # the library's sentence, not Python's "[Errno 40] ...: 'path'" rendering
    assert "[Errno" not in proc.stderr and proc.stderr.count(str(tmp_path / "link")) == 1


def test_every_json_document_has_the_documented_top_level_fields(tmp_path):
    common = {"schema", "command", "ok"}
    coord = tmp_path / "coord"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    expected = [
        ("list", ["--simulate", "2", "list", "--file", coord],
         {"nvml", "gpus", "skipped", "coordination", "bindings"}),
        ("claim", ["--simulate", "2", "claim", "1", "--file", coord],
         {"path", "owner", "amount", "gpus", "left_out"}),
        ("coordination show", ["coordination", "show", "--file", coord],
         {"path", "exists", "entries", "unparsable"}),
        ("coordination clean", ["coordination", "clean", "--file", coord],
         {"path", "exists", "foreign_namespaces", "removed", "unparsable"}),
        ("release", ["release", "--file", coord], {"path", "owner", "released"}),
        ("doctor", ["doctor", conf], {"configuration", "flink_home", "findings", "summary"}),
        ("resources", ["resources", conf], {"configuration", "kubernetes", "yarn"}),
        ("demo", ["demo"], {"simulated", "devices", "coordination_file", "before", "after",
                            "killed", "reclaimed", "binding", "cleaned_up"}),
    ]
    for command, args, fields in expected:
        doc = json.loads(cli(*args, "--json").stdout)
        assert doc["command"] == command and doc["schema"] == 1
        assert set(doc) == common | fields, command


MIG_SPEC = {"devices": [{}, {"mig": {"mode": "enabled", "instances": [
    {"slot": 1, "uuid": "MIG-aaaa", "gi": 1, "ci": 0}, {"slot": 2, "uuid": "MIG-bbbb", "gi": 2, "ci": 0}]}}]}


def test_every_json_document_follows_the_schema(tmp_path, holder):
    """src/flink_gpu/cli/schema.json, the JSON Schema of cli/json_schema.md, against what each command prints: successes
    and failures, MIG units, holders and bindings, and lines that are not UTF-8."""
    from flink_gpu import binding, coordination
    from support.json_schema import errors

    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    coord = tmp_path / "coord"
    coordination.claim(1, ["0"], path=coord, owner=holder.pid)
    with open(coord, "ab") as f:
        f.write(b"unparsable \xff line\n")
    bindings = binding.bindings_path(coord)
    Path(bindings).write_bytes(b"9 \xfe\n")
    spec = tmp_path / "mig.json"
    spec.write_text(json.dumps(MIG_SPEC))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    gpu_conf_file = tmp_path / "gpu" / "flink-conf.yaml"
    gpu_conf_file.parent.mkdir()
    gpu_conf_file.write_text(gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml",
                                      discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}"))
    runs = [
        ["--simulate-spec", spec, "list", "--file", coord],
        ["--simulate", "3", "list", "--file", coord],
        ["coordination", "show", "--file", coord],
        ["coordination", "clean", "--file", coord, "--foreign-namespaces"],
        ["--simulate", "3", "claim", "1", "--file", coord],
        ["--simulate", "3", "claim", "9", "--file", coord],  # not enough: ok false, an error
        ["release", "--file", coord],
        ["doctor", conf, "--simulate", "2"],
        ["doctor", gpu_conf_file, "--simulate", "2"],  # every GPU check, taskmanager-env's among them
        ["doctor", tmp_path / "missing.yaml"],
        ["resources", conf],
        ["resources", conf, "--yarn"],
        ["demo"],
        ["--simulate", "2", "taskmanager-env"],
        ["taskmanager-env"],  # no simulator chosen, no driver: ok false
        ["no-such-command"],
    ]
    with binding.bind([flink_gpu.GPUInfo("1")], slot="s", taskmanager_pid=os.getpid(), path=bindings):
        for args in runs:
            proc = cli(*args, "--json")
            doc = json.loads(proc.stdout)
            assert errors(doc, schema) == [], (args, proc.stdout)
    assert errors({"schema": 1, "command": "list", "ok": True}, schema), "the schema requires nothing"


# -- doctor ------------------------------------------------------------------------------------

def write_script(path, body, executable=True):
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755 if executable else 0o644)
    return path


PARAM_KEYS = {"discovery_script_path": "discovery-script.path",
              "discovery_script_args": "discovery-script.args",
              "discovery_script_timeout": "discovery-script.timeout",
              "discovery_mode": "discovery-mode"}


def gpu_conf(amount=1, factory=JAVA_FACTORY, **params):
    lines = ["external-resources: gpu"]
    if amount is not None:
        lines.append(f"external-resource.gpu.amount: {amount}")
    if factory is not None:
        lines.append(f"external-resource.gpu.driver-factory.class: {factory}")
    for key, value in params.items():
        lines.append(f"external-resource.gpu.param.{PARAM_KEYS[key]}: {value}")
    return "\n".join(lines) + "\n"


def run_doctor(tmp_path, conf_text, *args, env=None, expect=None, file_name="flink-conf.yaml"):
    conf = tmp_path / file_name
    conf.write_text(conf_text)
    # the shell of a TaskManager on the simulator (else doctor --simulate says it gets no GPU)
    env = child_env(**simulator.environment(devices=4)) if env is None else env
    proc = cli("doctor", conf, "--simulate", "4", *args, "--json", env=env)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] == "doctor"
    assert proc.returncode == (0 if doc["ok"] else 1)
    if expect is not None:
        assert proc.returncode == expect, json.dumps(doc["findings"], indent=1)
    for finding in doc["findings"]:
        assert set(finding) == {"resource", "check", "level", "message", "fix"}
        assert finding["level"] in ("error", "warning", "note", "ok")
        if finding["level"] == "error":
            assert finding["fix"], finding
    summary = doc["summary"]
    assert summary["errors"] == sum(f["level"] == "error" for f in doc["findings"])
    assert summary["warnings"] == sum(f["level"] == "warning" for f in doc["findings"])
    assert doc["ok"] is (summary["errors"] == 0)
    return doc


def findings(doc, check, level=None):
    return [f for f in doc["findings"] if f["check"] == check and (level is None or f["level"] == level)]


def only(doc, check, level):
    found = findings(doc, check, level)
    assert len(found) == 1, json.dumps(doc["findings"], indent=1)
    return found[0]


@pytest.fixture
def good_script(tmp_path):
    return write_script(tmp_path / "discover.sh", 'echo "0"\n')


def test_doctor_healthy_configuration_runs_the_script_and_passes(tmp_path, good_script):
    doc = run_doctor(tmp_path, gpu_conf(factory="flink_gpu.GPUDriverFactory",
                                        discovery_script_path=good_script),
                     "--taskmanagers-per-host", "1", expect=0)
    assert only(doc, "driver", "ok")["message"].startswith("flink_gpu uses the script backend")
    assert f"{good_script} 1 null" in only(doc, "script-run", "ok")["message"]
    only(doc, "coordination", "ok")
    # human output: markers, the resource, a summary
    proc = cli("doctor", tmp_path / "flink-conf.yaml", "--simulate", "4",
               "--taskmanagers-per-host", "1", env=child_env())
    assert proc.returncode == 0
    assert f"Configuration: {tmp_path / 'flink-conf.yaml'}" in proc.stdout
    assert re.search(r"^\[ ok \] gpu: external-resource\.gpu\.amount is 1\.$", proc.stdout, re.M)
    assert "No problem found" in proc.stdout


def test_doctor_no_resource_listed(tmp_path):
    doc = run_doctor(tmp_path, "taskmanager.numberOfTaskSlots: 2\n", expect=1)
    error = only(doc, "resource-list", "error")
    assert "external-resources is not set" in error["message"]
    assert f"external-resource.gpu.driver-factory.class: {JAVA_FACTORY}" in error["fix"]
    doc = run_doctor(tmp_path, "external-resources: none\n", expect=1)
    assert "'none'" in only(doc, "resource-list", "error")["message"]
    # the human output prints a multi-line fix indented under its finding
    proc = cli("doctor", tmp_path / "flink-conf.yaml", env=child_env())
    assert re.search(r"^\[FAIL\] No external resource is enabled.*\n       fix: Add to the "
                     r"configuration:\n            external-resources: gpu\n", proc.stdout, re.M)
    assert "1 check failed" in proc.stdout


def test_doctor_resource_configured_but_not_listed(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script).replace("gpu.amount", "GPU.amount")
    doc = run_doctor(tmp_path, text, expect=1)
    error = only(doc, "unlisted-resource", "error")
    assert error["resource"] == "GPU"
    assert "case-sensitive" in error["message"]
    assert "external-resources: gpu;GPU" in error["fix"]
    assert "external-resource.gpu.amount is not set" in only(doc, "amount", "error")["message"]


def test_doctor_reports_lines_the_legacy_parser_skips(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script).replace(
        "external-resource.gpu.amount: 1", "external-resource.gpu.amount:1")
    doc = run_doctor(tmp_path, text, expect=1)
    warning = only(doc, "configuration", "warning")
    assert f"{tmp_path / 'flink-conf.yaml'}:2" in warning["message"]
    assert "missing space after ':'" in warning["message"]
    only(doc, "amount", "error")  # which is why the amount is missing


def test_doctor_bad_resource_list_quoting(tmp_path):
    doc = run_doctor(tmp_path, "external-resources: \"gpu;fpga\n", expect=1)
    assert "Quoting was not closed properly" in only(doc, "resource-list", "error")["message"]


@pytest.mark.parametrize("amount, message", [
    (None, "external-resource.gpu.amount is not set"),
    (0, "external-resource.gpu.amount is 0: it must be positive"),
    (-2, "external-resource.gpu.amount is -2"),
    ("two", "Could not parse value 'two' for key 'external-resource.gpu.amount'."),
])
def test_doctor_amount(tmp_path, good_script, amount, message):
    doc = run_doctor(tmp_path, gpu_conf(amount=amount, discovery_script_path=good_script), expect=1)
    error = only(doc, "amount", "error")
    assert message in error["message"]
    assert "external-resource.gpu.amount: 1" in error["fix"]


def test_doctor_factory_missing_or_unknown(tmp_path):
    doc = run_doctor(tmp_path, gpu_conf(factory=None), expect=1)
    error = only(doc, "factory", "error")
    assert "driver-factory.class is not set" in error["message"]
    assert JAVA_FACTORY in error["fix"]

    typo = "org.apache.flink.externalresource.gpu.GpuDriverFactory"
    doc = run_doctor(tmp_path, gpu_conf(factory=typo), expect=1)
    error = only(doc, "factory", "error")
    assert f"Factory class {typo} of 'gpu' was not found" in error["message"]
    assert error["fix"] == f"Did you mean `external-resource.gpu.driver-factory.class: {JAVA_FACTORY}`?"

    doc = run_doctor(tmp_path, gpu_conf(factory="no_such_pkg.Factory"), expect=1)
    assert "no_such_pkg" in only(doc, "factory", "error")["message"]


def flink_home(tmp_path, with_plugin):
    home = tmp_path / "flink"
    (home / "conf").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "opt" / "external-resource-gpu").mkdir(parents=True)
    if with_plugin:
        plugin = home / "plugins" / "external-resource-gpu"
        plugin.mkdir(parents=True)
        (plugin / "flink-external-resource-gpu-2.3.0.jar").write_bytes(b"PK")
        write_script(plugin / "nvidia-gpu-discovery.sh", 'echo "0"\n')
    return home


def test_doctor_plugin_jar_and_default_script_missing(tmp_path):
    home = flink_home(tmp_path, with_plugin=False)
    (home / "conf" / "config.yaml").write_text(
        "external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n"
        f"    driver-factory:\n      class: {JAVA_FACTORY}\n")
    proc = cli("doctor", "--simulate", "4", "--json", env=child_env(FLINK_CONF_DIR=str(home / "conf")))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["configuration"] == str(home / "conf" / "config.yaml")
    assert doc["flink_home"] == str(home)  # found from the conf directory
    plugin = only(doc, "plugin", "error")
    assert plugin["fix"] == f"cp -r {home}/opt/external-resource-gpu {home}/plugins/"
    script = only(doc, "script", "error")
    assert script["message"] == ("The gpu discovery script does not exist in path "
                                 f"{home}/plugins/external-resource-gpu/nvidia-gpu-discovery.sh.")
    assert "cp -r" in script["fix"] and find_discovery_executable() in script["fix"]


def test_doctor_plugin_installed(tmp_path):
    home = flink_home(tmp_path, with_plugin=True)
    (home / "conf" / "flink-conf.yaml").write_text(gpu_conf())
    proc = cli("doctor", "--simulate", "4", "--taskmanagers-per-host", "1", "--json",
               env=child_env(FLINK_HOME=str(home)))
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "flink-external-resource-gpu-2.3.0.jar" in only(doc, "plugin", "ok")["message"]
    assert "nvidia-gpu-discovery.sh 1 null` gave GPU 0" in only(doc, "script-run", "ok")["message"]


def test_doctor_script_missing_or_not_executable(tmp_path):
    missing = tmp_path / "nope.sh"
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=missing), expect=1)
    error = only(doc, "script", "error")
    assert str(missing) in error["message"] and "Correct external-resource.gpu.param." in error["fix"]
    assert not findings(doc, "script-run")

    plain = write_script(tmp_path / "plain.sh", "echo 0\n", executable=False)
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=plain), expect=1)
    error = only(doc, "script", "error")
    assert error["message"] == f"The discovery script {plain} is not executable."
    assert error["fix"] == f"chmod +x {plain}"

    # the Python factory reports it while building its driver
    doc = run_doctor(tmp_path, gpu_conf(factory="flink_gpu.GPUDriverFactory",
                                        discovery_script_path=plain), expect=1)
    assert only(doc, "driver", "error")["fix"] == f"chmod +x {plain}"


def test_doctor_script_failing(tmp_path):
    failing = write_script(tmp_path / "fail.sh", """\
        echo "nvidia-smi: command not found" >&2
        exit 3
    """)
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=failing), expect=1)
    error = only(doc, "script-run", "error")
    assert "exit status 3" in error["message"] and f"`{failing} 1 null`" in error["message"]
    assert "nvidia-smi: command not found" in error["message"]
    assert "Install the NVIDIA driver" in error["fix"]

    empty = write_script(tmp_path / "empty.sh", "exit 0\n")
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=empty), expect=1)
    assert "printed no GPU index" in only(doc, "script-run", "error")["message"]

    chatty = write_script(tmp_path / "chatty.sh", 'echo "0,1"\necho "extra"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=chatty, discovery_script_args="''"))
    assert "printed 2 lines" in only(doc, "script-run", "warning")["message"]
    assert "gave GPU 0, 1" in only(doc, "script-run", "ok")["message"]


def test_doctor_script_timeout(tmp_path):
    hanging = write_script(tmp_path / "hang.sh", "sleep 30\n")
    started = time.monotonic()
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=hanging,
                                        discovery_script_timeout="1 s"), expect=1)
    assert time.monotonic() - started < 20
    assert "executed for over 1000 ms" in only(doc, "script-run", "error")["message"]


def test_doctor_coordination_off_with_several_taskmanagers(tmp_path):
    good_script = find_discovery_executable()  # the stock script's arguments
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "workers").write_text("# two TaskManagers here\nnode-a\nnode-a\nnode-b\n")
    (conf_dir / "flink-conf.yaml").write_text(gpu_conf(discovery_script_path=good_script))
    proc = cli("doctor", conf_dir, "--simulate", "4", "--json", env=child_env())
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "coordination", "error")
    assert "2 TaskManagers share host node-a" in error["message"]
    assert "--enable-coordination-mode" in error["fix"]

    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script), "--taskmanagers-per-host", "3",
                     expect=1)
    assert "3 TaskManagers share a host" in only(doc, "coordination", "error")["message"]
    # unknown: a note, not a failure
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script), expect=0)
    assert "cannot tell how many TaskManagers" in only(doc, "coordination", "note")["message"]
    # Kubernetes isolates the GPUs of each TaskManager pod
    text = gpu_conf(discovery_script_path=good_script) + \
        "external-resource.gpu.kubernetes.config-key: nvidia.com/gpu\n"
    doc = run_doctor(tmp_path, text, expect=0)
    assert "Kubernetes/YARN" in only(doc, "coordination", "note")["message"]
    # a custom script may coordinate by itself: doctor says it cannot tell
    custom = write_script(tmp_path / "custom.sh", 'echo "0"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=custom), "--taskmanagers-per-host",
                     "2", expect=0)
    assert "cannot tell whether the custom discovery script" in only(doc, "coordination", "note")["message"]


def test_doctor_docs_typo_and_unknown_args(tmp_path):
    exe = find_discovery_executable()
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=exe,
                                        discovery_script_args="--enable-coordination --verbose"),
                     expect=1)
    error = only(doc, "args", "error")
    assert "'--enable-coordination'" in error["message"]
    assert "coordination mode is OFF" in error["message"]
    assert "'--enable-coordination-mode'" in error["fix"]
    warning = only(doc, "args", "warning")
    assert "'--verbose'" in warning["message"]
    # a custom script's arguments are its own business
    custom = write_script(tmp_path / "amd.sh", 'echo "0"\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=custom,
                                        discovery_script_args="--enable-coordination"))
    assert not findings(doc, "args", "error")
    only(doc, "args", "note")


def test_doctor_coordination_on_runs_the_script_without_claiming(tmp_path, holder):
    exe = find_discovery_executable()
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "1", "--owner", holder.pid, "--file", coord)
    with open(coord, "a") as handle:
        handle.write(f"3 {dead_pid()}\nbroken line\n")
    before = coord.read_text()
    doc = run_doctor(tmp_path, gpu_conf(amount=2, discovery_script_path=exe,
                                        discovery_script_args=f"--enable-coordination-mode "
                                                              f"--coordination-file {coord}"),
                     "--taskmanagers-per-host", "2", expect=0)
    assert coord.read_text() == before  # nothing claimed, nothing cleaned
    ok = only(doc, "script-run", "ok")["message"]
    assert "gave GPU 0" in ok and "nothing was claimed" in ok
    warnings = findings(doc, "coordination-file", "warning")
    assert any("dead processes (GPU 3)" in w["message"] for w in warnings)
    assert any(w["fix"] == f"flink-gpu coordination clean --file {coord}" for w in warnings)
    assert any("'broken line'" in w["message"] for w in warnings)
    # 3 TaskManagers of 2 GPUs each do not fit 4 GPUs
    doc = run_doctor(tmp_path, gpu_conf(amount=2, discovery_script_path=exe,
                                        discovery_script_args="--enable-coordination-mode "
                                                              f"--coordination-file {coord}"),
                     "--taskmanagers-per-host", "3", expect=1)
    assert "3 TaskManagers per host" in only(doc, "gpu-count", "error")["message"]


def test_doctor_nvml_backend_and_gpu_count(tmp_path):
    text = gpu_conf(amount=2, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=0)
    assert "nvml backend" in only(doc, "driver", "ok")["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]
    assert not findings(doc, "script-run")

    text = gpu_conf(amount=5, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    doc = run_doctor(tmp_path, text, expect=1)
    assert "is 5, but this host has 4 GPUs" in only(doc, "gpu-count", "error")["message"]

    # nvml mode without a driver
    env = child_env(FLINK_GPU_NVML_LIBRARY=str(tmp_path / "missing.so"))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"))
    proc = cli("doctor", conf, "--json", env=env)
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "driver", "error")
    assert "missing.so" in error["message"] and "Install the NVIDIA driver" in error["fix"]


@pytest.mark.parametrize("factory, level, message", [
    ("flink_gpu_test_drivers:RecordingFactory", "ok", "The driver of 'fpga' was created"),
    ("flink_gpu_test_drivers:RaisingFactory", "error",
     "cannot create the driver of 'fpga': FlinkException: the device is not there"),
    ("flink_gpu_test_drivers:ConstructorRaisingFactory", "error",
     "raised RuntimeError: cannot construct"),
    ("flink_gpu_test_broken_driver:Factory", "error", "cannot be loaded"),
])
def test_doctor_builds_other_drivers_without_running_them(tmp_path, factory, level, message):
    text = ("external-resources: fpga\nexternal-resource.fpga.amount: 1\n"
            f"external-resource.fpga.driver-factory.class: {factory}\n")
    env = child_env()
    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    env["PYTHONPATH"] = os.pathsep.join([fixtures, env["PYTHONPATH"]])
    doc = run_doctor(tmp_path, text, env=env)
    found = [f for f in doc["findings"] if f["check"] in ("factory", "driver")
             and f["level"] == level and message in f["message"]]
    assert found, json.dumps(doc["findings"], indent=1)
    assert not findings(doc, "script-run") and not findings(doc, "coordination")


def flink_gpu_on_path(tmp_path, env):
    """``env`` with a ``flink-gpu`` command on PATH (this checkout's), so that printed fixes run as printed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    write_script(bin_dir / "flink-gpu", f'exec {sys.executable} -m flink_gpu.cli "$@"\n')
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}


def test_doctor_simulate_fails_unless_the_taskmanagers_shell_has_that_simulator_and_says_how(tmp_path):
    conf = tmp_path / "conf" / "config.yaml"
    conf.parent.mkdir()
    conf.write_text(gpu_conf(amount=2, discovery_script_path=find_discovery_executable(),
                             discovery_script_args="--enable-coordination-mode"))
    shell = flink_gpu_on_path(tmp_path, child_env())  # no simulator: a TaskManager started here gets no GPU
    proc = cli("doctor", conf, "--simulate", "4", "--json", env=shell)
    assert proc.returncode == 1, proc.stdout
    error = only(json.loads(proc.stdout), "taskmanager-env", "error")
    assert "--simulate 4 simulates GPUs for doctor only" in error["message"]
    assert "no FLINK_GPU_NVML_LIBRARY" in error["message"]
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in error["fix"]
    # the fix as printed, then doctor as a TaskManager's shell would run it: nothing left to fix
    script = f'{error["fix"].split(": ", 1)[1].split(";")[0]}; flink-gpu doctor {conf}'
    proc = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problem found" in proc.stdout
    assert "runs the discovery script with FLINK_GPU_NVML_LIBRARY=" in proc.stdout
    assert "(the simulator: 4 GPUs)" in proc.stdout


def test_doctor_on_a_host_without_nvml_says_how_a_java_taskmanager_gets_a_library_or_the_simulator(tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    doc = json.loads(cli("doctor", conf, "--json",
                         env=child_env(FLINK_GPU_NVML_LIBRARY=str(tmp_path / "no-libnvidia-ml.so.1"))).stdout)
    error = only(doc, "script-run", "error")
    assert "Could not load the NVIDIA Management Library" in error["message"]
    assert "FLINK_GPU_NVML_LIBRARY" in error["fix"] and "does not read nvml.library-path" in error["fix"]
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in error["fix"]


def test_doctor_no_free_gpu_fix_names_the_configurations_coordination_file(tmp_path):
    coord = tmp_path / "my-coordination"  # Flink splits the args on whitespace: no path with a space
    conf = tmp_path / "config.yaml"
    conf.write_text(gpu_conf(discovery_script_path=find_discovery_executable(),
                             discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}"))
    shell = flink_gpu_on_path(tmp_path, child_env(**simulator.environment(devices=0)))  # a host without GPUs
    doc = json.loads(cli("doctor", conf, "--json", env=shell).stdout)
    fix = only(doc, "script-run", "error")["fix"]
    assert f"`flink-gpu coordination clean --file {coord}`" in fix, fix
    listed = subprocess.run(["bash", "-c", fix.split("`")[1] + " --json"], env=shell, capture_output=True, text=True)
    assert json.loads(listed.stdout)["coordination"]["path"] == str(coord)  # the command runs as printed


def test_doctor_says_what_a_thread_mode_taskmanager_lacks(tmp_path):
    home = tmp_path / "flink"
    (home / "lib").mkdir(parents=True)
    (home / "opt").mkdir()
    (home / "opt" / "flink-python-2.3.0.jar").write_bytes(b"")
    (home / "conf").mkdir()
    (home / "conf" / "config.yaml").write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    env = child_env(**simulator.environment(devices=4))
    env.pop("CUDA_DEVICE_ORDER", None)
    # a shell whose PYTHONPATH does not name the virtualenv (child_env names it where flink_gpu is installed
    # there, as in CI; a dev tree's src/ stays, the interpreter finds the rest itself)
    site = os.path.realpath(sysconfig.get_path("purelib"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and os.path.realpath(p) != site)
    doc = json.loads(cli("doctor", home / "conf", "--json", env=env).stdout)
    notes = {f["message"].split(":")[0]: f for f in findings(doc, "taskmanager-env", "note")}
    jar = notes[f"{home / 'lib'} has no flink-python jar"]
    assert jar["fix"] == f"cp {home / 'opt' / 'flink-python-2.3.0.jar'} {home / 'lib'}/"
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID in this shell" in notes
    if sys.prefix != sys.base_prefix:  # a virtualenv's packages reach the JVM's Python only through PYTHONPATH
        assert any("No module named 'pemja'" in f["message"] for f in notes.values())


def test_doctor_task_slots_note_points_to_bind_gpus_not_the_subtask_index(tmp_path, good_script):
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script)
                     + "taskmanager.numberOfTaskSlots: 2\n", expect=0)
    note = only(doc, "task-slots", "note")
    assert "collides" in note["message"] and "bind_gpus" in note["fix"]


def test_doctor_run_it_by_hand_command_runs_as_printed(tmp_path):
    # named as the stock script, so doctor gives it a scratch coordination file; it fails on its own
    # unless the file it is given can be created
    script = write_script(tmp_path / "nvidia-gpu-discovery.sh", 'touch "$4" || exit 9\necho broken; exit 3\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=script,
                                        discovery_script_args="--enable-coordination-mode"), expect=1)
    fix = only(doc, "script-run", "error")["fix"]
    assert fix.startswith("Run it by hand: ")
    proc = subprocess.run(["bash", "-c", fix.removeprefix("Run it by hand: ")], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 3 and proc.stdout == "broken\n", (fix, proc.stderr)
    # and the command a passing run shows
    (tmp_path / "ok").mkdir()
    good = write_script(tmp_path / "ok" / "nvidia-gpu-discovery.sh", 'touch "$4" || exit 9\necho 0\n')
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good,
                                        discovery_script_args="--enable-coordination-mode"))
    command = only(doc, "script-run", "ok")["message"].split("`")[1]
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "0\n", (command, proc.stderr)


def test_taskmanager_env_gives_a_process_started_after_eval_the_simulated_gpus(tmp_path):
    shell = flink_gpu_on_path(tmp_path, child_env())
    discovery = find_discovery_executable()
    script = f'eval "$(flink-gpu --simulate 2 taskmanager-env)" && {discovery} 2 && {discovery} 3; echo "$PYTHONPATH"'
    proc = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert lines[0] == "0,1", proc.stdout + proc.stderr   # the two simulated GPUs
    assert "Could not get enough GPU resources" in proc.stdout + proc.stderr  # and no third
    import sysconfig

    assert sysconfig.get_path("purelib") in lines[-1].split(os.pathsep)  # thread mode's Python finds pemja
    doc = cli_json("taskmanager-env", env=shell)
    assert doc["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "FLINK_GPU_NVML_LIBRARY" not in doc["environment"]  # the host's driver
    # a shell on the simulator already: not twice on the library path; a relative PYTHONPATH made absolute
    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [{}]}')
    env = {**shell, **simulator.environment(devices=2), "PYTHONPATH": shell["PYTHONPATH"] + os.pathsep + "rel"}
    doc = cli_json("--simulate-spec", "spec.json", "taskmanager-env", env=env, cwd=tmp_path)
    library_dir = os.path.dirname(simulator.library_path())
    assert doc["environment"]["LD_LIBRARY_PATH"].split(os.pathsep).count(library_dir) == 1
    assert str(tmp_path / "rel") in doc["environment"]["PYTHONPATH"].split(os.pathsep)
    assert doc["environment"]["FLINK_GPU_SIM_SPEC"] == str(spec) and doc["environment"]["FLINK_GPU_SIM_DEVICES"] == ""


def test_list_shows_a_gpu_whose_state_read_does_not_return_as_unknown(tmp_path):
    """docs/design.md §9.5: list reads with the 5 s deadline too; the GPU it could not read says why, in the
    table and in --json (whose health follows the schema)."""
    from flink_gpu import simulator
    from support.json_schema import errors

    hang_file = tmp_path / "hang"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{}, {}], "driver_lock": False, "hang": [
        {"query": "field_values", "device": 1, "while_exists": str(hang_file)}]}))
    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    with simulator.hanging(hang_file):
        doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    assert errors(doc, schema) == []
    gpus = {gpu["index"]: gpu for gpu in doc["gpus"]}
    assert gpus["0"]["health"] == "ok"
    assert gpus["1"]["health"] == "unknown: nvmlDeviceGetFieldValues did not return within 5 s"
    assert gpus["1"]["processes_known"] is False


def test_schema_prints_the_json_schema_shipped_in_the_package_for_every_command():
    proc = cli("schema")
    assert proc.returncode == 0
    from importlib.resources import files

    shipped = files("flink_gpu.cli").joinpath("json_schema.md").read_text(encoding="utf-8")
    assert proc.stdout == shipped
    from flink_gpu.cli import build_parser

    commands = [action for action in build_parser()._actions if action.dest == "command"][0].choices
    for command in set(commands) - {"schema", "coordination"}:
        assert f"\n`{command}`\n: " in shipped, command
    assert "`flink-gpu schema`" in " ".join(cli("--help").stdout.split())


def test_doctor_configuration_resolution(tmp_path):
    env = child_env()
    proc = cli("doctor", env=env)
    assert proc.returncode == 2 and "FLINK_CONF_DIR" in proc.stderr
    proc = cli("doctor", tmp_path / "missing", env=env)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = cli("doctor", tmp_path, env=env)  # a directory without a configuration file
    assert proc.returncode == 2 and "no config.yaml or flink-conf.yaml" in proc.stderr
    (tmp_path / "config.yaml").write_text("external-resources: [gpu\n")
    proc = cli("doctor", "--json", env=child_env(FLINK_HOME=str(tmp_path / "nothome"),
                                                 FLINK_CONF_DIR=str(tmp_path)))
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "configuration", "error")
    assert "Invalid YAML" in error["message"] and str(tmp_path / "config.yaml") in error["message"]


# -- resources ---------------------------------------------------------------------------------

RESOURCES_CONF = """\
external-resources: gpu
external-resource.gpu.amount: 2
external-resource.gpu.kubernetes.config-key: nvidia.com/gpu
external-resource.gpu.yarn.config-key: yarn.io/gpu
"""


def test_resources_kubernetes_and_yarn(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    doc = cli_json("resources", conf)
    assert doc["kubernetes"] == {"requests": {"nvidia.com/gpu": "2"},
                                 "limits": {"nvidia.com/gpu": "2"}, "pod": None}
    assert doc["yarn"] == {"yarn.io/gpu": 2}
    assert "yarn" not in cli_json("resources", conf, "--kubernetes")
    assert "kubernetes" not in cli_json("resources", conf, "--yarn")

    import yaml

    proc = cli("resources", conf)
    assert proc.returncode == 0
    kubernetes, yarn = proc.stdout.split("\n\n")
    assert "flink-main-container" in kubernetes.splitlines()[0]
    assert yaml.safe_load("\n".join(kubernetes.splitlines()[1:])) == {
        "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}
    assert yaml.safe_load("\n".join(yarn.splitlines()[1:])) == {"yarn.io/gpu": 2}


def test_resources_pod_template_is_merged(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = tmp_path / "pod.yaml"
    template.write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        spec:
          containers:
            - name: flink-main-container
              resources:
                limits: {memory: 4Gi, nvidia.com/gpu: "8"}
            - name: sidecar
              image: busybox
    """))
    doc = cli_json("resources", conf, "--pod-template", template)
    containers = doc["kubernetes"]["pod"]["spec"]["containers"]
    assert containers[0]["resources"] == {"limits": {"memory": "4Gi", "nvidia.com/gpu": "2"},
                                          "requests": {"nvidia.com/gpu": "2"}}
    assert containers[1] == {"name": "sidecar", "image": "busybox"}
    import yaml

    proc = cli("resources", conf, "--pod-template", template)
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout) == doc["kubernetes"]["pod"]


def test_resources_yarn_cluster_maximum_and_errors(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    proc = cli("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=1")
    assert proc.returncode == 1
    assert ("Configured value for external resource yarn.io/gpu (2) exceeds the max limitation "
            "of the Yarn cluster (1).") in proc.stderr
    assert cli_json("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=4")["yarn"] == {"yarn.io/gpu": 2}
    assert cli("resources", conf, "--yarn-max", "gpu").returncode == 2
    assert cli("resources", tmp_path / "missing.yaml").returncode == 2
    assert cli("resources", conf, "--pod-template", tmp_path / "missing.yaml").returncode == 2
    empty = tmp_path / "empty.yaml"
    empty.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n")
    proc = cli("resources", empty)
    assert proc.returncode == 0 and "requests none" in proc.stdout


# -- demo --------------------------------------------------------------------------------------

def test_demo_reclaims_a_killed_workers_gpus_and_leaves_nothing_behind():
    proc = cli("demo", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] == "demo" and doc["ok"] is True
    assert doc["simulated"] is True and len(doc["devices"]) == 4
    before = {w["worker"]: w for w in doc["before"]}
    assert [before[f"worker-{n}"]["gpus"] for n in (1, 2, 3)] == [["0", "1"], ["2"], ["3"]]
    assert before["worker-1"]["uuids"] == [UUID0, "GPU-00000000-0000-4000-8000-000000000001"]
    assert doc["killed"] == {"worker": "worker-1", "pid": before["worker-1"]["pid"], "gpus": ["0", "1"]}
    after = {w["worker"]: w for w in doc["after"]}
    assert after["worker-1"]["state"] == "killed"
    assert after["worker-4"]["gpus"] == ["0", "1"] and after["worker-4"]["state"] == "running"
    assert doc["reclaimed"] == ["0", "1"]
    assert doc["cleaned_up"] is True
    pids = [w["pid"] for w in doc["after"]]
    assert len(set(pids)) == 4 and os.getpid() not in pids
    assert not any(pid_exists(pid) for pid in pids)
    assert not os.path.exists(os.path.dirname(doc["coordination_file"]))


def test_demo_shows_the_slots_of_a_taskmanager_binding_its_gpus_alone_then_shared():
    doc = cli_json("demo")
    binding = doc["binding"]
    taskmanager = binding["taskmanager"]
    assert taskmanager["worker"] == "worker-4" and taskmanager["gpus"] == ["0", "1"]
    first, second, third = binding["exclusive"]
    assert {tuple(first["gpus"]), tuple(second["gpus"])} == {("0",), ("1",)}  # a GPU each, none shared
    assert third["gpus"] == [] and f"is bound by pid {first['pid']} (1 of at most 1)" in third["error"]
    shared = sorted(index for slot in binding["shared"] for index in slot["gpus"])
    assert shared == ["0", "0", "1", "1"] and not any(slot["error"] for slot in binding["shared"])
    slots = binding["exclusive"] + binding["shared"]
    assert not any(pid_exists(slot["pid"]) for slot in slots)
    human = cli("demo").stdout
    assert re.search(r"^  slot-3 +\d+ +- +refused: Could not bind 1 GPU", human, re.M), human
    assert len(re.findall(r"^  slot-\d +\d+ +[01] +bound$", human, re.M)) == 6, human


def test_demo_human_output():
    proc = cli("demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "A host with 4 GPUs (the NVML simulator" in out
    tables = re.findall(r"^  WORKER +PID +STATE +GPU +UUID\n((?:  .*\n)+)", out, re.M)
    assert len(tables) == 2
    first = tables[0].splitlines()
    assert re.match(r"  worker-1 +\d+ +running +0 +GPU-0{8}-0000-4000-8000-0{12}$", first[0])
    assert re.match(r" +1 +GPU-0{8}-0000-4000-8000-0{11}1$", first[1])
    assert "SIGKILL" in out and "reclaims" in out
    second = tables[1]
    assert re.search(r"worker-1 +\d+ +killed", second)
    assert re.search(r"worker-4 +\d+ +running +0 ", second)
    assert "Stopped the 3 running workers" in out


def test_demo_needs_three_gpus():
    proc = cli("demo", "--simulate", "2")
    assert proc.returncode == 1
    assert "needs at least 3 GPUs" in proc.stderr
    assert cli("demo", "--real", "--simulate", "4").returncode == 2


def test_demo_workers_exit_when_the_demo_is_killed(tmp_path):
    # the workers hold the read end of a pipe from the demo: its death is their EOF
    env = child_env(PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-m", "flink_gpu.cli", "demo"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        for line in process.stdout:
            match = re.match(r"  worker-\d +(\d+) ", line)
            if match:
                pids.append(int(match.group(1)))
            if len(pids) == 3:
                break
        assert len(pids) == 3, process.stderr.read()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 10
        while any(pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_exists(pid) for pid in pids)
        # and they released their GPUs on the way out
        (coord,) = tmp_path.glob("flink-gpu-demo-*/coordination")
        snapshot = cli_json("coordination", "show", "--file", coord)
        assert [e for e in snapshot["entries"] if e["alive"]] == []
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()


def test_doctor_flags_gpu_params_the_plugin_does_not_read(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script) + (
        "external-resource.gpu.param.discovery-script-args: --enable-coordination-mode\n"
        "external-resource.gpu.param.discovery-mode: nvml\n"
        "external-resource.gpu.param.nvml-timeout: 2 s\n"
        "external-resource.gpu.param.health-checks: all\n")
    doc = run_doctor(tmp_path, text, "--taskmanagers-per-host", "1", expect=0)
    warning = only(doc, "params", "warning")  # every option of ours is known: only the typo is warned
    assert "param.discovery-script-args is not an option" in warning["message"]
    assert warning["fix"] == "Did you mean external-resource.gpu.param.discovery-script.args?"
    # with Flink's Java factory, flink_gpu's own options do nothing
    notes = [f["message"] for f in findings(doc, "params") if f["level"] == "note"]
    assert any("discovery-mode is a flink_gpu option" in note for note in notes)
    assert any("nvml-timeout is a flink_gpu option" in note for note in notes)
    assert any("health-checks is a flink_gpu option" in note for note in notes)


# --- cli.main() called in a process leaves the library's logger as it found it -------------------

def test_cli_main_in_process_does_not_pile_up_log_handlers(tmp_path, capsys):
    import logging

    from flink_gpu.cli import main

    conf = tmp_path / "flink-conf.yaml"
    conf.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n")
    logger = logging.getLogger("flink_gpu")
    before = (list(logger.handlers), logger.level, logger.propagate)
    for _ in range(3):
        assert main(["resources", str(conf), "--kubernetes"]) == 0
        err = capsys.readouterr().err
        # the missing kubernetes.config-key is WARNed once per run, not once per earlier run
        assert err.count("Could not find valid external-resource.gpu.kubernetes.config-key") == 1
    assert (list(logger.handlers), logger.level, logger.propagate) == before


# --- doctor on a Java-plugin configuration ignores discovery-script.timeout, as Flink does -------

def test_doctor_java_plugin_run_does_not_read_our_timeout_option(tmp_path):
    import json

    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 0\n")
    script.chmod(0o755)
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(
        "external-resources: gpu\n"
        "external-resource.gpu.amount: 1\n"
        "external-resource.gpu.driver-factory.class: "
        "org.apache.flink.externalresource.gpu.GPUDriverFactory\n"
        f"external-resource.gpu.param.discovery-script.path: {script}\n"
        # not an option of Flink's Java plugin: a TaskManager never reads it
        "external-resource.gpu.param.discovery-script.timeout: soon\n")
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "doctor", str(conf), "--json",
                           "--simulate", "2", "--taskmanagers-per-host", "1"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    assert "error" not in doc, doc
    run = [f for f in doc["findings"] if f["check"] == "script-run"]
    assert [f["level"] for f in run] == ["ok"], run
    assert any(f["check"] == "params" and "discovery-script.timeout" in f["message"]
               for f in doc["findings"])


# --- the JSON schema in docs/cli.md names every check doctor reports -----------------------------

def test_cli_schema_lists_every_doctor_check():
    import importlib
    import inspect
    import pkgutil
    import re

    from flink_gpu.cli import doctor

    sources = [inspect.getsource(importlib.import_module(f"{doctor.__name__}.{module.name}"))
               for module in pkgutil.iter_modules(doctor.__path__)]
    emitted = set(re.findall(r'\.add\(\s*"(?:error|warning|note|ok)",\s*"([a-z-]+)"',
                             "\n".join(sources)))
    schema = cli("schema").stdout.split("`check` is one of", 1)[1].split("`resources`", 1)[0]
    assert "resource-keys" in emitted  # the regex still finds the checks
    assert emitted <= set(re.findall(r"`([a-z-]+)`", schema))


# --- `resources` and `doctor` agree: a conf directory without a configuration file is exit 2 -----

def test_resources_on_a_conf_directory_without_a_file_is_a_usage_error(tmp_path, capsys):
    from flink_gpu.cli import main

    assert main(["doctor", str(tmp_path)]) == 2
    assert main(["resources", str(tmp_path)]) == 2
    assert "expected config.yaml or flink-conf.yaml" in capsys.readouterr().err


# --- doctor resolves the factory name exactly as a worker does (no stripping) ----------------------

def test_doctor_does_not_pass_a_factory_name_a_worker_cannot_load(tmp_path):
    import json

    from flink_gpu import load_external_resources

    conf = tmp_path / "config.yaml"
    conf.write_text('external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n'
                    '    driver-factory:\n      class: "flink_gpu.GPUDriverFactory "\n')
    provider = load_external_resources(str(conf))
    assert "was not found" in provider.missing_reason("gpu")  # what a worker does with it
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "doctor", str(conf), "--json",
                           "--simulate", "2", "--taskmanagers-per-host", "1"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    factory = [f for f in doc["findings"] if f["check"] == "factory"]
    assert [f["level"] for f in factory] == ["error"], factory
    assert proc.returncode == 1


# --- demo: a worker that cannot claim is reported with its own error, not "read of closed file" ---

def test_demo_worker_failure_reports_the_workers_error(tmp_path, monkeypatch):
    from flink_gpu import FlinkException, simulator
    from flink_gpu.cli.demo import Worker, _child_env

    for key, value in simulator.environment(devices=2).items():
        monkeypatch.setenv(key, value)
    worker = Worker("worker-x", 5, str(tmp_path / "coordination"), _child_env())
    with pytest.raises(FlinkException) as error:
        worker.wait_report()  # 5 of 2 GPUs: the worker exits with an error on stderr
    assert "worker-x" in str(error.value) and "Could not get enough GPU resources" in str(error.value)
    assert worker.process.poll() is not None and worker.process.stderr.closed


# --- a usage error under --json still answers in JSON ---------------------------------------

def test_cli_usage_error_with_json_still_answers_in_json():
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "--json", "claim", "two"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    import json

    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] is None and doc["ok"] is False
    assert doc["error"]["type"] == "UsageError" and "'two'" in doc["error"]["message"]
    assert "usage:" in proc.stderr and "'two'" in proc.stderr


# -- bad input: hostile YAML, paths that are not regular files, odd option values ----------------

def test_doctor_and_resources_report_a_recursive_alias_without_a_traceback(tmp_path):
    conf = tmp_path / "rec.yaml"
    conf.write_text("a: &x {b: 1, c: *x}\n")
    expected = (f"The Flink configuration file {conf} has a recursive alias *x at line 1, "
                "column 17: the value anchored &x would contain itself.")
    proc = cli("resources", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"flink-gpu resources: error: {expected}" in proc.stderr
    proc = cli("doctor", "--simulate", "2", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert expected in proc.stdout


def test_doctor_and_resources_refuse_an_alias_bomb_at_once(tmp_path):
    conf = tmp_path / "bomb.yaml"
    lines = ["m0: &m0 {k: v}"] + [f"m{n}: &m{n} {{a: *m{n - 1}, b: *m{n - 1}}}" for n in range(1, 31)]
    conf.write_text("\n".join(lines) + "\n")
    for args in (("resources", conf), ("doctor", "--simulate", "2", conf)):
        proc = cli(*args, timeout=30)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"The aliases of the Flink configuration file {conf} expand to more than 100000 " \
               "values" in proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_every_file_argument_that_is_not_a_regular_file_is_refused_saying_what_it_is(tmp_path, kind):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    path, what = make_odd_path(tmp_path / "odd", kind)
    cases = [(("--simulate-spec", path, "list"), 2, f"--simulate-spec: The simulator spec file {path}"),
             (("resources", conf, "--pod-template", path), 2,
              f"--pod-template: The pod template file {path}")]
    if kind != "directory":  # a directory is a conf directory
        cases += [(("resources", path), 2, f"The Flink configuration file {path}"),
                  (("doctor", "--simulate", "2", path), 1, f"The Flink configuration file {path}")]
    for args, code, start in cases:
        proc = cli(*args, timeout=30)  # a FIFO read would never return
        assert proc.returncode == code, (args, proc.stdout + proc.stderr)
        assert f"{start} is {what}, not a regular file" in proc.stdout + proc.stderr, args
    os.symlink(path, tmp_path / "config.yaml")  # the file of a conf directory
    proc = cli("resources", tmp_path, timeout=30)
    assert proc.returncode == 2
    assert f"The Flink configuration file {tmp_path / 'config.yaml'} is {what}" in proc.stderr


@pytest.mark.parametrize("spec, message", [
    ({"devices": [{"name": 5}]}, "devices[0].name must be a string, got 5."),
    ({"devices": [{"memory_total": "abc"}]},
     "devices[0].memory_total must be a whole number (0..18446744073709551615), got 'abc'."),
    ({"devices": [{"minor_number": -1}]}, "devices[0].minor_number must be a whole number"),
    ({"driver_version": 5}, "'driver_version' must be a string, got 5."),
    ({"init_error": "x"}, "'init_error' must be an NVML error code (0..999), got 'x'."),
    ({"init_error": 1.5}, "'init_error' must be an NVML error code (0..999), got 1.5."),
])
def test_simulate_spec_values_of_the_wrong_type_are_usage_errors_naming_the_key(tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = cli("list", "--simulate-spec", path)
    assert proc.returncode == 2
    assert f"--simulate-spec: {path}: Simulator spec {message}" in proc.stderr
    assert "NVML call failed" not in proc.stderr and "hint" not in proc.stderr


def test_a_failure_of_the_simulator_does_not_hint_at_the_simulator(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [{"name": 5}]}')
    from flink_gpu import simulator

    env = child_env(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(spec))
    proc = cli("list", env=env)
    assert proc.returncode == 1
    assert f"{spec}: devices[0].name must be a string" in proc.stderr  # the simulator's own line
    assert "--simulate 4" not in proc.stderr
    assert "hint: this NVML is the bundled simulator" in proc.stderr
    proc = cli("list", "--simulate-spec", _write(tmp_path / "e.json", '{"init_error": 9}'))
    assert proc.returncode == 1 and "--simulate 4" not in proc.stderr


def _write(path, text):
    path.write_text(text)
    return path


def test_an_empty_file_option_is_a_usage_error_naming_it(tmp_path):
    for args in (("claim", "1"), ("release",), ("list",), ("coordination", "show")):
        proc = cli("--simulate", "2", *args, "--file", "", cwd=tmp_path)
        assert proc.returncode == 2, args
        assert "argument --file: expected the path of the coordination file, got ''" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_yarn_max_with_a_second_equals_sign_is_a_usage_error(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    proc = cli("resources", conf, "--yarn", "--yarn-max", "yarn.io/gpu=3=4")
    assert proc.returncode == 2
    assert "--yarn-max 'yarn.io/gpu=3=4': expected TYPE=N, e.g. yarn.io/gpu=4." in proc.stderr


def test_json_resources_with_a_self_referencing_pod_template_names_the_file(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = _write(tmp_path / "pod.yaml", "spec: &s\n  containers:\n    - name: x\n      extra: *s\n")
    doc = cli_json("resources", conf, "--pod-template", template, expect=1)
    assert doc["error"]["type"] == "IllegalConfigurationException"
    assert doc["error"]["message"].startswith(f"The pod template file {template} has a recursive "
                                              "alias *s")


# --- doctor: --coordination-file without a value is the stock script's default file, a warning ---

def test_doctor_coordination_file_without_a_value_is_a_warning_naming_the_default_file(tmp_path):
    from flink_gpu import coordination

    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=find_discovery_executable(),
                                        discovery_script_args="--coordination-file"),
                     "--taskmanagers-per-host", "1", expect=0)
    warning = only(doc, "args", "warning")
    assert "external-resource.gpu.param.discovery-script.args" in warning["message"]
    assert coordination.DEFAULT_PATH in warning["message"]
    assert "--coordination-file /path/of/file" in warning["fix"]
    assert not findings(doc, "args", "error")
    assert "gave GPU 0" in only(doc, "script-run", "ok")["message"]


# --- doctor: a bad flink_gpu option does not hide the checks of the script and its arguments ------

def test_doctor_java_plugin_resource_with_bad_flink_gpu_options_is_still_checked(tmp_path):
    # Flink's Java plugin reads neither discovery-mode nor discovery-script.timeout
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=find_discovery_executable(),
                                        discovery_script_args="--enable-coordination",
                                        discovery_mode="sometimes", discovery_script_timeout="soon"),
                     "--taskmanagers-per-host", "1", expect=1)
    assert "'--enable-coordination-mode'" in only(doc, "args", "error")["fix"]
    assert "gave GPU 0" in only(doc, "script-run", "ok")["message"]
    assert not findings(doc, "driver")


def test_doctor_python_resource_with_a_bad_mode_still_checks_args_and_gpus(tmp_path):
    doc = run_doctor(tmp_path, gpu_conf(factory="flink_gpu.GPUDriverFactory",
                                        discovery_mode="sometimes", discovery_script_args="--verbose"),
                     expect=1)
    assert "'sometimes'" in only(doc, "driver", "error")["message"]
    assert "'--verbose'" in only(doc, "args", "warning")["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]


# --- doctor picks a conf directory's file as Flink does, and says what an odd one is ----------

def test_doctor_on_a_conf_directory_whose_config_file_is_a_fifo_says_so(tmp_path):
    # doctor used to skip a config.yaml that is not a regular file and check flink-conf.yaml, a
    # file the TaskManager never reads
    (tmp_path / "flink-conf.yaml").write_text("external-resources: gpu\n")
    os.mkfifo(tmp_path / "config.yaml")
    proc = cli("doctor", "--simulate", "2", tmp_path, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{tmp_path / 'config.yaml'} is a FIFO (named pipe), not a regular file" in proc.stdout


@pytest.mark.parametrize("kind", ["directory", "symlink loop"])
def test_doctor_on_a_conf_directory_whose_config_file_is_no_file_says_what_it_is(tmp_path, kind):
    """Not "the directory has no config.yaml": it has one, which no TaskManager can read."""
    (tmp_path / "flink-conf.yaml").write_text("external-resources: gpu\n")
    config = tmp_path / "config.yaml"
    if kind == "directory":
        config.mkdir()
        what = "is a directory, not a regular file"
    else:
        config.symlink_to(config)
        what = "is a loop of symbolic links"
    proc = cli("doctor", "--simulate", "2", tmp_path, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{config} {what}" in proc.stdout + proc.stderr
    assert "no config.yaml" not in proc.stdout + proc.stderr


# -- counts beyond 64 bits --------------------------------------------------------------------------

def test_a_claim_amount_beyond_64_bits_is_not_enough_gpus_not_a_traceback(tmp_path):
    path = tmp_path / "coordination"
    proc = cli("--simulate", "4", "claim", "--file", path, "99999999999999999999")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert ("error: Could not get enough GPU resources. Requested 99999999999999999999, the host has 4 GPUs "
            "(0, 1, 2, 3)") in proc.stderr
    assert not path.exists()
    doc = cli_json("--simulate", "4", "claim", "--file", path, "99999999999999999999", expect=1)
    assert "Requested 99999999999999999999" in json.dumps(doc)


@pytest.mark.parametrize("count", ["99999999999999999999", "18446744073709551617", "4097"])
@pytest.mark.parametrize("command", [["list"], ["demo"], ["coordination", "show"]])
def test_a_simulated_gpu_count_beyond_the_simulator_is_a_usage_error(tmp_path, count, command):
    proc = cli("--simulate", count, *command, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (f"error: --simulate: devices must be a whole number from 0 to 4096 (the simulated host's GPU "
            f"count), got {count}.") in proc.stderr


def test_the_largest_simulated_gpu_count_works():
    doc = cli_json("--simulate", "4096", "list")
    assert len(doc["gpus"]) == 4096


# --- the GPUs' state: `list` shows it, `doctor` reports unhealthy and busy GPUs (design §9.1) ------

# a holder that runs a child of its own (say a DataLoader worker) and prints that child's pid
HOLDER_WITH_CHILD = ("import subprocess, sys\n"
                     "child = subprocess.Popen(['sleep', '600'])\n"
                     "print(child.pid, flush=True)\n"
                     "sys.stdin.read()\n"
                     "child.kill()\n")


@pytest.fixture
def state_host(tmp_path):
    """A 4-GPU simulated host: GPU 0 degraded, GPU 1 unhealthy, GPU 2 claimed by a holder whose
    child runs on it, GPU 3 running an unrelated process and a pid no one here can see."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_WITH_CHILD], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    stranger = subprocess.Popen(["sleep", "600"])
    gone = dead_pid()
    try:
        child = int(holder.stdout.readline())
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"devices": [
            {"health": {"row_remap_pending": True}, "memory_used": 3 * 2 ** 30},
            {"health": {"row_remap_failure": True}},
            {"processes": [{"pid": child, "used_memory": 2 ** 30, "kind": "compute"}]},
            {"processes": [{"pid": stranger.pid, "used_memory": 2 ** 29, "kind": "graphics"},
                           {"pid": gone, "kind": "compute"}]},
        ]}))
        coord = tmp_path / "coord"
        coord.write_text(f"2 {holder.pid}\n")  # the holder holds GPU 2, as the stock script writes
        yield {"spec": spec, "coord": coord, "holder": holder.pid, "child": child,
               "stranger": stranger.pid, "gone": gone}
    finally:
        stranger.kill()
        stranger.wait()
        holder.stdin.close()
        holder.wait(10)


def test_list_json_shows_health_memory_processes_and_numa(state_host):
    doc = cli_json("--simulate-spec", state_host["spec"], "list", "--file", state_host["coord"])
    gpus = {g["index"]: g for g in doc["gpus"]}
    assert gpus["0"]["health"].startswith("degraded: ") and "row remapping pending" in gpus["0"]["health"]
    assert gpus["0"]["memory_used"] == 3 * 2 ** 30
    assert gpus["1"]["health"].startswith("unhealthy: ") and "row remapping failed" in gpus["1"]["health"]
    assert gpus["1"]["findings"] and gpus["0"]["processes"] == []
    [own] = gpus["2"]["processes"]
    assert own == {"pid": state_host["child"], "kind": "compute", "used_memory": 2 ** 30,
                   "visible": True, "cmdline": ["sleep", "600"], "holder": state_host["holder"]}
    by_pid = {p["pid"]: p for p in gpus["3"]["processes"]}
    stranger, gone = by_pid[state_host["stranger"]], by_pid[state_host["gone"]]
    assert stranger["pid"] == state_host["stranger"] and stranger["holder"] is None
    assert stranger["kind"] == "graphics" and stranger["visible"] is True
    assert gone == {"pid": state_host["gone"], "kind": "compute", "used_memory": None,
                    "visible": False, "cmdline": None, "holder": None}
    for gpu in doc["gpus"]:
        assert {"health", "findings", "memory_used", "memory_free", "numa_node", "cpu_affinity",
                "compute_mode", "processes_known", "processes"} <= set(gpu)
        assert gpu["processes_known"] is True


def test_list_table_shows_the_state_of_each_gpu(state_host):
    proc = cli("--simulate-spec", state_host["spec"], "list", "--file", state_host["coord"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("GPU "))
    assert header.split() == ["GPU", "HEALTH", "UTIL", "MEMORY", "USED", "TEMP", "POWER", "NUMA", "CPUS", "PROCESSES"]
    rows = {line.split()[0]: line for line in lines[lines.index(header) + 1:][:4]}
    assert "degraded: " in rows["0"] and "3.0 GiB" in rows["0"] and rows["0"].endswith("none")
    assert "unhealthy: " in rows["1"]
    assert rows["2"].endswith(f"pid {state_host['child']} sleep 600 (holder pid {state_host['holder']})")
    assert f"pid {state_host['stranger']} sleep 600 (not a flink-gpu holder's)" in rows["3"]
    assert f"pid {state_host['gone']} (not visible here)" in rows["3"]
    assert f"NVML lists pid {state_host['gone']}, which this PID namespace cannot see" in proc.stdout


def doctor_on(tmp_path, spec, conf_text, expect):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(conf_text)
    proc = cli("doctor", conf, "--simulate-spec", spec, "--json", "--taskmanagers-per-host", "1",
               env=child_env(**simulator.environment(spec=spec)))  # a TaskManager's shell on that simulator
    doc = json.loads(proc.stdout)
    assert proc.returncode == expect, json.dumps(doc["findings"], indent=1)
    return doc


def test_doctor_reports_unhealthy_degraded_and_busy_gpus(tmp_path, state_host):
    conf = (gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml",
                     discovery_script_args=f"--enable-coordination-mode --coordination-file "
                                           f"{state_host['coord']}"))
    doc = doctor_on(tmp_path, state_host["spec"], conf, expect=0)
    state = findings(doc, "gpu-state")
    unhealthy = [f for f in state if f["message"].startswith("GPU 1 is unhealthy: ")]
    assert len(unhealthy) == 1 and unhealthy[0]["level"] == "warning"
    assert "a TaskManager never gets it" in unhealthy[0]["message"]
    assert "nvidia-smi -q -i 1" in unhealthy[0]["fix"]
    [degraded] = [f for f in state if f["message"].startswith("GPU 0 is degraded: ")]
    assert degraded["level"] == "note" and "after every healthy GPU" in degraded["message"]
    # GPU 2's process belongs to its holder; GPU 3's are no holder's
    assert not [f for f in state if f["message"].startswith("GPU 2 ")]
    [busy] = [f for f in state if f["message"].startswith("GPU 3 runs 2 processes of no flink-gpu holder")]
    assert busy["level"] == "note" and "only when the idle GPUs are too few" in busy["message"]
    assert f"pid {state_host['stranger']} (sleep 600)" in busy["message"]
    assert "external-resource.gpu.param.busy-gpus: exclude" in busy["fix"]
    [hidden] = [f for f in state if f"NVML lists pid {state_host['gone']} on GPU 3" in f["message"]]
    assert "hostPID" in hidden["fix"]


def test_doctor_warns_of_a_gpu_whose_state_read_does_not_return(tmp_path):
    hang_file = tmp_path / "hang"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{}, {}], "driver_lock": False, "hang": [
        {"query": "field_values", "device": 1, "while_exists": str(hang_file)}]}))
    conf = gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    with simulator.hanging(hang_file):
        doc = doctor_on(tmp_path, spec, conf, expect=0)
    [unknown] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 1 is unknown: ")]
    assert unknown["level"] == "warning"
    assert "nvmlDeviceGetFieldValues did not return within 5 s" in unknown["message"]
    assert "a TaskManager does not get it" in unknown["message"]
    assert "dmesg" in unknown["fix"]


def test_list_json_shows_what_each_check_found_and_what_it_did_not_look_at(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [
        {"health": {"inforom_corrupted": True, "ecc_enabled": False}, "no_permission": ["remapped_rows"],
         "fabric": {}},
        {"not_supported": ["retired_pages", "field_values"]}]}))
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "c")
    first, second = doc["gpus"]
    assert first["checks"] == {
        "inforom": {"outcome": "finding", "finding": "InfoROM corrupted"},
        "remapped-rows": {"outcome": "no permission", "finding": None},
        "ecc": {"outcome": "not applicable", "finding": None},
        "recovery-action": {"outcome": "ok", "finding": None},
        "fabric": {"outcome": "ok", "finding": None},
        "retired-pages": {"outcome": "ok", "finding": None}}
    assert {name: c["outcome"] for name, c in second["checks"].items()} == {
        "inforom": "ok", "remapped-rows": "ok", "ecc": "ok", "recovery-action": "not supported",
        "fabric": "not supported", "retired-pages": "not supported"}
    assert second["health"] == "ok"  # not checked is not a finding, but it shows
    human = cli("--simulate-spec", spec, "list", "--file", tmp_path / "c").stdout
    assert "GPU 1: not checked: recovery-action (not supported), fabric (not supported), retired-pages " \
           "(not supported)" in human


@pytest.mark.parametrize("states, waiting", [(["not_started", "not_started"], False),
                                             (["not_started", "in_progress"], True)])
def test_doctor_says_once_when_no_gpu_has_registered_with_the_nvlink_fabric(tmp_path, states, waiting):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"fabric": {"state": state}} for state in states]}))
    doc = doctor_on(tmp_path, spec, gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory",
                                             discovery_mode="nvml"), expect=1)
    fabric = [f for f in findings(doc, "gpu-state") if "fabric" in f["message"].lower()]
    assert len(fabric) == 1, fabric  # a host finding, not one per GPU
    assert fabric[0]["level"] == "error" and "error 802" in fabric[0]["message"]
    assert ("(some are in progress)" in fabric[0]["message"]) == waiting
    assert "nvidia-fabricmanager" in fabric[0]["fix"]


def test_doctor_notes_one_gpu_without_fabric_registration_as_that_gpu(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"fabric": {"state": "not_started"}}, {"fabric": {}}]}))
    doc = doctor_on(tmp_path, spec, gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory",
                                             discovery_mode="nvml"), expect=0)
    [gpu0] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 0 is unhealthy")]
    assert "NVLink fabric registration not started" in gpu0["message"]
    assert not [f for f in findings(doc, "gpu-state") if f["message"].startswith("No GPU of this host")]


def test_doctor_shows_what_was_not_checked_and_a_finding_of_a_check_left_out(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"health": {"inforom_corrupted": True}}, {}]}))
    conf = gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml") + \
        "external-resource.gpu.param.health-checks: all,-inforom\n"
    doc = doctor_on(tmp_path, spec, conf, expect=0)
    state = findings(doc, "gpu-state")
    [left_out] = [f for f in state if f["level"] == "warning"]
    assert left_out["message"] == ("GPU 0: InfoROM corrupted, but external-resource.gpu.param.health-checks "
                                   "leaves inforom out: a TaskManager may still get it.")
    assert [f["message"] for f in state if f["message"].startswith("Not checked")] == [
        "Not checked on GPU 0, 1: fabric (not supported)."]
    assert not [f for f in state if "is unhealthy" in f["message"]]


def test_doctor_fails_when_the_amount_exceeds_the_healthy_gpus(tmp_path, state_host):
    doc = doctor_on(tmp_path, state_host["spec"],
                    gpu_conf(amount=4, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"),
                    expect=1)
    [error] = findings(doc, "gpu-state", "error")
    assert error["message"] == ("external-resource.gpu.amount is 4, but only 3 GPUs of this host "
                                "are healthy: discovery fails.")


def test_doctor_says_a_plain_script_hands_out_an_unhealthy_gpu(tmp_path, state_host):
    script = write_script(tmp_path / "discover.sh", 'echo "1"\n')
    doc = doctor_on(tmp_path, state_host["spec"], gpu_conf(discovery_script_path=script), expect=1)
    [error] = [f for f in findings(doc, "gpu-state", "error") if "GPU 1" in f["message"]]
    assert "the discovery script still hands it out" in error["message"]
    [busy] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 3 runs")]
    assert busy["level"] == "warning" and "would share it" in busy["message"]


def test_doctor_with_ignore_warns_that_a_busy_gpu_may_be_shared(tmp_path, state_host):
    conf = gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml") + \
        "external-resource.gpu.param.busy-gpus: ignore\n"
    doc = doctor_on(tmp_path, state_host["spec"], conf, expect=0)
    [busy] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 3 runs")]
    assert busy["level"] == "warning" and "may get it and share it" in busy["message"]
    assert not findings(doc, "params", "warning")  # busy-gpus is an option of ours


@pytest.mark.parametrize("line, expected", [
    ("busy-gpus: sometimes", "'busy-gpus': expected one of avoid, exclude, ignore"),
    ("health-checks: all,-inform", "for key 'health-checks': '-inform' is not a health check; use all, inforom, "
                                   "remapped-rows, ecc, recovery-action, fabric, retired-pages"),
])
def test_doctor_reports_a_bad_option_of_ours_and_still_checks_the_gpus(tmp_path, line, expected):
    conf = gpu_conf(factory="flink_gpu.GPUDriverFactory") + f"external-resource.gpu.param.{line}\n"
    doc = run_doctor(tmp_path, conf, expect=1)
    error = only(doc, "driver", "error")
    assert expected in error["message"]
    assert "4 GPUs" in only(doc, "gpu-count", "ok")["message"]


# --- deeply nested YAML: refused naming the file and the limit, never a RecursionError ----------

def test_doctor_and_resources_refuse_a_configuration_nested_too_deep(tmp_path):
    conf = tmp_path / "config.yaml"  # 995 levels: under libyaml's own limit of 1000
    conf.write_text("a: " + "{a: " * 994 + "1" + "}" * 994 + "\n")
    expected = (f"The Flink configuration file {conf} nests mappings or lists more than 100 "
                "levels deep (at line 1, column 400)")
    proc = cli("resources", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"flink-gpu resources: error: {expected}" in proc.stderr
    proc = cli("doctor", "--simulate", "2", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert expected in proc.stdout


def test_resources_refuses_a_pod_template_nested_too_deep(tmp_path):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    template = tmp_path / "pod.yaml"
    template.write_text("metadata:\n  " + "{a: " * 989 + "1" + "}" * 989 + "\n")
    proc = cli("resources", conf, "--pod-template", template)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"flink-gpu resources: error: The pod template file {template} nests mappings or "
            "lists more than 100 levels deep (at line 2, column 399)") in proc.stderr
    doc = cli_json("resources", conf, "--pod-template", template, expect=1)
    assert doc["error"]["type"] == "IllegalConfigurationException"


# --- doctor: an abbreviated flag is the error that coordination mode is off ------------------------

def test_doctor_abbreviated_coordination_flag_is_an_error_saying_coordination_is_off(tmp_path):
    doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=find_discovery_executable(),
                                        discovery_script_args="--enable-coord"),
                     "--taskmanagers-per-host", "1", expect=1)
    error = only(doc, "args", "error")
    assert "'--enable-coord'" in error["message"] and "coordination mode is OFF" in error["message"]
    assert error["fix"] == ("Write '--enable-coordination-mode' instead of '--enable-coord' in "
                            "external-resource.gpu.param.discovery-script.args.")


# --- doctor reads conf/workers as every user-named file: an odd one is a warning naming it --------

@pytest.mark.parametrize("kind", ["fifo", "directory", "too large"])
def test_doctor_says_when_the_workers_file_is_not_a_readable_regular_file(tmp_path, kind):
    from flink_gpu.regular_files import MAX_FILE_SIZE

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "flink-conf.yaml").write_text(gpu_conf(discovery_script_path=find_discovery_executable()))
    (conf_dir / "slaves").write_text("node-a\nnode-a\n")  # not read: Flink reads workers
    workers = conf_dir / "workers"
    if kind == "too large":
        with open(workers, "wb") as handle:
            handle.truncate(MAX_FILE_SIZE + 1)  # sparse
        reason = (f"The workers file {workers} is larger than 16 MiB, the most flink-gpu reads "
                  "from one file.")
    else:
        _, what = make_odd_path(workers, kind)
        reason = f"The workers file {workers} is {what}, not a regular file; give the path of a file."
    proc = cli("doctor", conf_dir, "--simulate", "4", "--json", timeout=30)  # a FIFO read blocks
    doc = json.loads(proc.stdout)
    warning = only(doc, "taskmanagers", "warning")
    assert warning["message"] == f"{reason} So doctor cannot tell how many TaskManagers share a host."
    assert warning["fix"] == (f"Make {workers} a regular file with one TaskManager host per line, "
                              "or pass --taskmanagers-per-host N.")
    assert "cannot tell how many TaskManagers" in only(doc, "coordination", "note")["message"]


def test_list_shows_mig_units_under_their_gpu_with_parent_and_instance_fields(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [
        {"uuid": "GPU-mig", "mig": {"mode": "enabled", "instances": [
            {"slot": 0, "uuid": "MIG-a", "gi": 7, "ci": 0}, {"slot": 2, "uuid": "MIG-b", "gi": 3, "ci": 1}]}},
        {"mig": {"mode": "enabled", "pending": "disabled"}},
        {"uuid": "GPU-plain"}]}))
    doc = cli_json("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert [g["index"] for g in doc["gpus"]] == ["0:0", "0:2", "2"]
    assert {k: doc["gpus"][1][k] for k in ("uuid", "parent_index", "parent_uuid", "mig_slot", "mig_gi", "mig_ci")} == {
        "uuid": "MIG-b", "parent_index": "0", "parent_uuid": "GPU-mig", "mig_slot": 2, "mig_gi": 3, "mig_ci": 1}
    assert "parent_index" not in doc["gpus"][2]
    assert [s["index"] for s in doc["skipped"]] == ["1"] and "no MIG instances" in doc["skipped"][0]["reason"]
    assert doc["nvml"]["notices"] == ["GPU 1: MIG mode pending a reset (now enabled, disabled after the GPU is reset)."]
    human = cli("list", "--simulate-spec", spec, "--file", tmp_path / "c").stdout.splitlines()
    start = next(n for n, line in enumerate(human) if line.startswith("INDEX"))
    assert [line.split()[:2] for line in human[start + 1:start + 5]] == [
        ["0", "GPU-mig"], ["0:0", "MIG-a"], ["0:2", "MIG-b"], ["2", "GPU-plain"]]
    assert human[start + 2].startswith("  0:0")
    assert any("MIG mode pending a reset" in line for line in human)


def test_doctor_reports_a_mig_gpu_without_instances_and_a_pending_mode(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"mig": {"mode": "enabled", "pending": "disabled"}}, {}]}))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"))
    doc = json.loads(cli("doctor", conf, "--simulate-spec", spec, "--json", env=child_env()).stdout)
    messages = [f["message"] for f in doc["findings"] if f["check"] == "nvml"]
    assert any("MIG mode is enabled but it has no MIG instances" in m for m in messages)
    assert any("MIG mode pending a reset" in m for m in messages)


# --- list as a monitor: the Flink configuration's file, readings, TaskManager names, watch, terminal ---

def coordinated_conf(conf_dir, coord):
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "config.yaml").write_text(gpu_conf(amount=2, discovery_script_path=find_discovery_executable(),
                                                   discovery_script_args=f"--enable-coordination-mode "
                                                                         f"--coordination-file {coord}"))
    return conf_dir


def test_list_reads_the_coordination_file_of_the_flink_configuration(tmp_path, holder):
    coord = tmp_path / "coordination"
    conf_dir = coordinated_conf(tmp_path / "conf", coord)
    cli_json("--simulate", "4", "claim", "1", "--owner", holder.pid, "--file", coord)
    by_env = cli_json("--simulate", "4", "list", env=child_env(FLINK_CONF_DIR=str(conf_dir)))
    by_option = cli_json("--simulate", "4", "list", "--conf", conf_dir / "config.yaml")
    for doc in (by_env, by_option):
        assert doc["coordination"]["path"] == str(coord)
        assert [h["pid"] for h in doc["gpus"][0]["holders"]] == [holder.pid]
    assert by_env["coordination"]["from"] == f"$FLINK_CONF_DIR {conf_dir}"
    human = cli("--simulate", "4", "list", env=child_env(FLINK_CONF_DIR=str(conf_dir))).stdout
    assert f"Holders from the coordination file {coord} (of the Flink configuration in $FLINK_CONF_DIR" in human
    # --file still wins
    assert cli_json("--simulate", "4", "list", "--file", tmp_path / "other",
                    env=child_env(FLINK_CONF_DIR=str(conf_dir)))["coordination"]["path"] == str(tmp_path / "other")


def test_list_refuses_a_conf_without_a_coordination_file_naming_the_key_and_notes_it_for_flink_conf_dir(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "config.yaml").write_text(gpu_conf(amount=1, discovery_script_args="''"))
    proc = cli("--simulate", "4", "list", "--conf", conf_dir)
    assert proc.returncode == 2
    assert "external-resource.gpu.param.discovery-script.args has no --enable-coordination-mode" in proc.stderr
    assert "--file" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("--simulate", "4", "list", "--conf", tmp_path / "missing")
    assert proc.returncode == 2 and str(tmp_path / "missing") in proc.stderr
    # FLINK_CONF_DIR is set for any cluster: the default file, and a note saying why
    env = child_env(FLINK_CONF_DIR=str(conf_dir))
    doc = cli_json("--simulate", "4", "list", env=env)
    assert doc["coordination"]["path"] == "/var/tmp/flink-gpu-coordination" and doc["coordination"]["from"] is None
    assert "has no --enable-coordination-mode" in doc["coordination"]["note"]
    assert "Note: $FLINK_CONF_DIR: the Flink configuration" in cli("--simulate", "4", "list", env=env).stdout


def test_list_shows_utilization_temperature_and_power_next_to_the_holders(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"utilization": 37, "temperature": 55, "power": 250.4}, {}]}))
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    first, second = doc["gpus"]
    assert (first["utilization"], first["temperature"], first["power"]) == (37, 55, 250)
    assert 0 <= second["utilization"] <= 100 and 30 <= second["temperature"] <= 80  # the simulator's load curve
    lines = cli("--simulate-spec", spec, "list", "--file", tmp_path / "coord").stdout.splitlines()
    header = next(line for line in lines if line.startswith("GPU "))
    row = lines[lines.index(header) + 1].split()
    assert row[:3] == ["0", "ok", "37%"] and row[5:9] == ["55", "C", "250", "W"], row


TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"


@pytest.mark.parametrize("how, name", [
    ("dynamic", "TaskManager tm-7"), ("config", "TaskManager from-conf"), ("log", "TaskManager localhost:41627-44e15c"),
    ("host", "TaskManager worker-3:6122"), ("nothing", "TaskManager pid {pid}")])
def test_list_names_a_taskmanager_by_its_resource_id_or_host_and_port(tmp_path, how, name):
    conf_dir = tmp_path / "tm-conf"
    conf_dir.mkdir()
    conf = {"config": "taskmanager.resource-id: from-conf\n",
            "host": "taskmanager.host: worker-3\ntaskmanager.rpc.port: 6122\n"}.get(how, "")
    (conf_dir / "config.yaml").write_text(conf)
    extra = ["-D", "taskmanager.resource-id=tm-7"] if how == "dynamic" else []
    log = tmp_path / "flink-taskexecutor-0.log"  # what Flink's bin/taskmanager.sh names with -Dlog.file
    log.write_text("2026-12-01 20:52:38,528 INFO  org.apache.flink.runtime.taskexecutor.TaskManagerRunner "
                   "[] - Starting TaskManager with ResourceID: localhost:41627-44e15c\n" if how == "log" else "")
    # a process whose command line is a TaskManager's (its main class, --configDir, -D properties)
    fake = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"-Dlog.file={log}", TASKMANAGER_MAIN,
                             "--configDir", str(conf_dir), *extra], stdin=subprocess.PIPE)
    try:
        coord = tmp_path / "coord"
        cli_json("--simulate", "4", "claim", "2", "--owner", fake.pid, "--file", coord)
        # one of its slots' workers, bound and holding until its stdin closes
        binder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from flink_gpu import GPUInfo
            from flink_gpu.binding import bind
            bind([GPUInfo("0"), GPUInfo("1")], 1, taskmanager_pid={fake.pid}, path={str(coord) + '.bindings'!r})
            print("bound", flush=True)
            sys.stdin.read()
            """)], env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert binder.stdout.readline() == "bound\n"
        human = cli("--simulate", "4", "list", "--file", coord).stdout
        binder.stdin.close()
        binder.wait(10)
        expected = name.format(pid=fake.pid)
        holder = "TaskManager" if how == "nothing" else expected  # the pid is beside it
        assert re.search(rf"^0 .*  pid {fake.pid}: {re.escape(holder)}$", human, re.M), human
        line = (f"  TaskManager pid {fake.pid} (holds GPU 0, 1 in the coordination file)" if how in ("nothing",)
                else f"  {expected} (pid {fake.pid}, holds GPU 0, 1 in the coordination file)")
        assert line + "\n" in human, human
        assert TASKMANAGER_MAIN not in human
        shown = cli("--simulate", "4", "coordination", "show", "--file", coord).stdout
        assert re.search(rf"^\d+ +0 +{fake.pid} .*live +{re.escape(holder)}$", shown, re.M), shown
    finally:
        fake.stdin.close()
        fake.wait(10)


def test_list_never_opens_a_fifo_or_another_users_file_that_a_holders_command_line_names(tmp_path):
    """A holder can name anything in its argv: a FIFO there must not hang `list` or `coordination show`, and
    a file its user does not own is not read on its behalf."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    other = tmp_path / "others.log"
    other.write_text("Starting TaskManager with ResourceID: someone-elses\n")
    os.chown(other, 12345, 12345)
    for log in (fifo, other):
        fake = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"-Dlog.file={log}",
                                 TASKMANAGER_MAIN], stdin=subprocess.PIPE)
        try:
            coord = tmp_path / f"coord-{log.name}"
            cli_json("--simulate", "2", "claim", "1", "--owner", fake.pid, "--file", coord)
            for args in (["--simulate", "2", "list"], ["coordination", "show"]):
                done = subprocess.run([sys.executable, "-m", "flink_gpu.cli", *args, "--file", str(coord)],
                                      env=child_env(), capture_output=True, text=True, timeout=30)
                assert done.returncode == 0 and "someone-elses" not in done.stdout, done
                assert f"TaskManager pid {fake.pid}" in done.stdout or "TaskManager" in done.stdout
        finally:
            fake.stdin.close()
            fake.wait(10)


def test_list_watch_redraws_until_ctrl_c_and_refuses_json(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "flink_gpu.cli", "--simulate", "2", "list", "--watch", "0.2",
                                "--file", tmp_path / "coord"], env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.count("Every 0.2 s") >= 2 and out.count("GPU  HEALTH") >= 2
    assert "Traceback" not in err
    proc = cli("--simulate", "2", "list", "--watch", "--json")
    assert proc.returncode == 2 and "--watch" in proc.stderr


def run_on_terminal(args, columns, **env):
    """``flink-gpu args`` with its stdout on a pseudo-terminal of ``columns`` columns: what it prints."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "flink_gpu.cli", *map(str, args)], stdout=follower,
                               stderr=subprocess.PIPE, env=child_env(COLUMNS=str(columns), **env))
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(30) == 0, process.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_list_fits_the_terminal_and_colours_verdicts_unless_no_color(tmp_path, holder):
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "2", "--owner", holder.pid, "--file", coord)
    shown = run_on_terminal(["--simulate", "4", "list", "--file", coord], 103)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    tables = [line for line in plain.splitlines() if re.match(r"(INDEX|GPU) |\d+ ", line)]
    assert len(tables) == 10 and max(len(line) for line in tables) <= 103, plain
    assert re.search(rf"^0 .*pid {holder.pid}: {re.escape(sys.executable[:10])}.*\.\.\.$", plain, re.M), plain
    assert "BUS ID" not in plain  # gave way to the holder's command
    assert "\x1b[32mok\x1b[0m" in shown and "\x1b[32mfree\x1b[0m" in shown
    assert "\x1b[" not in run_on_terminal(["--simulate", "4", "list", "--file", coord], 103, NO_COLOR="1")
    # a pipe gets whole lines, without colour
    piped = cli("--simulate", "4", "list", "--file", coord).stdout
    assert "\x1b[" not in piped and cut_to_table(HOLDER_COMMAND) in piped
