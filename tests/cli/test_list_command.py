"""`flink-gpu list` (flink_gpu.cli.list_command): holders, bindings, the GPUs' state and MIG units, run as real
processes against the NVML simulator."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import flink_gpu
from conftest import dead_pid
from support.cli import HOLDER_COMMAND, UUID0, binder_cmdline, cli, cli_json, cut_to_table
from support.json_schema import errors
from support.simulated import NOT_HOST_PIDS, pids_are_hosts


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
    assert set(gpus["0"]) == {
        "index",
        "uuid",
        "name",
        "memory_total",
        "memory_requested",
        "pci_bus_id",
        "minor_number",
        "persistence_mode",
        "holders",
        "stale_holders",
        "health",
        "findings",
        "checks",
        "memory_used",
        "memory_free",
        "numa_node",
        "cpu_affinity",
        "compute_mode",
        "processes_known",
        "processes",
        "utilization",
        "temperature",
        "power",
    }
    assert gpus["0"]["uuid"] == UUID0 and gpus["0"]["memory_total"] == 80 * 2**30
    assert gpus["0"]["holders"] == [
        {
            "pid": holder.pid,
            "cmdline": [sys.executable, "-c", "import sys; sys.stdin.read()"],
            "command": cut_to_table(HOLDER_COMMAND),  # for people; the argv is for tools
            "liveness_known": True,
            "ours": True,
            "namespace": os.stat("/proc/self/ns/pid").st_ino,
        }
    ]
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


# pids above Linux's largest pid_max (PID_MAX_LIMIT, 2**22): never a live process
NEVER_ALIVE = 2**22 + 1


def test_list_counts_a_gpus_many_dead_owners_in_its_holder_cell_and_json_keeps_every_pid(tmp_path):
    """200 dead lines of one GPU made its HOLDER cell a row of 1,915 characters; two pids still fit."""
    coord = tmp_path / "coord"
    many = [NEVER_ALIVE + n for n in range(200)]
    coord.write_text("".join(f"0 {pid}\n" for pid in many) + f"1 {NEVER_ALIVE + 500}\n1 {NEVER_ALIVE + 501}\n")
    human = cli("--simulate", "2", "list", "--file", coord)
    assert human.returncode == 0, human.stderr
    rows = {line.split()[0]: line for line in human.stdout.splitlines() if re.match(r"\d+\s+GPU-", line)}
    assert rows["0"].endswith("free (stale: 200 dead owners; `flink-gpu coordination clean`)"), rows["0"]
    assert rows["1"].endswith(f"free (stale: dead pid {NEVER_ALIVE + 500}, {NEVER_ALIVE + 501})")
    assert f"202 entries of dead processes (reclaimable); `flink-gpu coordination clean --file {coord}`" in human.stdout
    gpus = {g["index"]: g for g in cli_json("--simulate", "2", "list", "--file", coord)["gpus"]}
    assert gpus["0"]["stale_holders"] == many


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
    spec.write_text(
        json.dumps({"devices": [{"name": "NVIDIA H100"}, {"fault": "GPU_IS_LOST"}, {"fault": "NO_PERMISSION"}]})
    )
    doc = cli_json("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H100"]
    assert [s["index"] for s in doc["skipped"]] == ["1", "2"]
    human = cli("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert "1 GPU, 2 skipped" in human.stdout
    skipped = human.stdout.split("Skipped devices:")[1]
    assert re.search(r"^  1: .*", skipped, re.M) and re.search(r"^  2: .*", skipped, re.M)
    for item in doc["skipped"]:
        assert f"  {item['index']}: {item['reason']}" in skipped


# list: bindings (docs/design.md §9.3)


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
        {
            "pid": taskmanager,
            "namespace": os.stat("/proc/self/ns/pid").st_ino,
            "ours": True,
            "cmdline": [sys.executable, "-c", "import sys; sys.stdin.read()"],
            "command": cut_to_table(HOLDER_COMMAND),
            "claimed": ["0", "1", "2"],
            "holders": [
                {
                    "holder": f"pid {worker.pid}",
                    "slot": None,
                    "pid": worker.pid,
                    "threads": [],
                    "gpus": ["0"],
                    "holders_per_gpu": 1,
                    "memory": None,
                    "liveness_known": True,
                    "orphaned": False,
                    "cmdline": binder_cmdline(binders.script, bindings, taskmanager, ["0", "1", "2"]),
                },
                {
                    "holder": "slot alloc-1",
                    "slot": "alloc-1",
                    "pid": None,
                    "threads": [thread],
                    "gpus": ["1"],
                    "holders_per_gpu": 1,
                    "memory": None,
                    "liveness_known": True,
                    "orphaned": False,
                    "cmdline": None,
                },
                {
                    "holder": f"pid {shared.pid}",
                    "slot": None,
                    "pid": shared.pid,
                    "threads": [],
                    "gpus": ["2"],
                    "holders_per_gpu": 2,
                    "memory": None,
                    "liveness_known": True,
                    "orphaned": False,
                    "cmdline": binder_cmdline(binders.script, bindings, taskmanager, ["0", "1", "2"], share=2),
                },
            ],
        },
        {
            "pid": None,
            "namespace": None,
            "ours": True,
            "cmdline": None,
            "command": None,
            "claimed": [],
            "holders": [
                {
                    "holder": f"pid {service.pid}",
                    "slot": None,
                    "pid": service.pid,
                    "threads": [],
                    "gpus": ["3"],
                    "holders_per_gpu": 1,
                    "memory": None,
                    "liveness_known": True,
                    "orphaned": False,
                    "cmdline": binder_cmdline(binders.script, bindings, None, ["3"]),
                }
            ],
        },
    ]
    assert thread != slot.pid  # a slot holder's lines are its binding threads', not its process's
    assert [(s["index"], s["pid"], s["taskmanager"]) for s in doc["stale"]] == [("2", dead.pid, taskmanager)]
    assert doc["unparsable"] == [{"line_number": bad_line, "text": "not a line"}] and doc["unknown_indices"] == []
    gpus = cli_json("--simulate", "4", "list", "--file", coord)["gpus"]
    assert [g["memory_requested"] for g in gpus] == [0, 0, 0, 0]  # bound without a memory request

    human = cli("--simulate", "4", "list", "--file", coord).stdout
    section = human.split(f"Bindings from {bindings} (GPUs bound to the holders inside a TaskManager):\n", 1)[1]
    lines = section.splitlines()
    assert lines[0] == (
        f"  TaskManager pid {taskmanager} (holds GPU 0, 1, 2 in the coordination file): " + cut_to_table(HOLDER_COMMAND)
    )
    assert lines[1].split() == ["HOLDER", "GPU", "SHARED", "COMMAND"] and lines[1].startswith("    HOLDER")
    assert lines[2].split()[:4] == ["pid", str(worker.pid), "0", "alone"]
    assert lines[3].split() == ["slot", "alloc-1", "1", "alone", "binding", "thread", str(thread)]
    assert lines[4].split()[:5] == ["pid", str(shared.pid), "2", "up", "to"] and " up to 2 " in lines[4]
    assert lines[5] == "  Holders without a recorded TaskManager:"
    assert lines[7].split()[:4] == ["pid", str(service.pid), "3", "alone"]
    assert lines[8] == "  1 entry of dead holders: its GPU is free again, and the next bind removes it."
    assert lines[9] == f"  line {bad_line} cannot be parsed (its GPU is never bound): 'not a line'"
    assert "MEMORY REQUEST" not in human and "requested" not in human  # no request, no column


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


def test_list_keeps_apart_the_taskmanagers_of_two_pid_namespaces_with_the_same_pid(tmp_path):
    # two containers' TaskManagers, both pid 1 in their own namespace; only the first claimed GPU 0
    ns = os.stat("/proc/self/ns/pid").st_ino
    a, b = ns + 1, ns + 2
    (tmp_path / "coord").write_text(f"0 1\t5\tns={a}\n")
    (tmp_path / "coord.bindings").write_text(
        f"0 7\t5\tns={a}\ttm=1\tshare=1\tslot=alloc-a\n1 7\t5\tns={b}\ttm=1\tshare=1\tslot=alloc-b\n"
    )
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")["bindings"]
    assert [
        (t["pid"], t["namespace"], t["claimed"], [h["holder"] for h in t["holders"]]) for t in doc["taskmanagers"]
    ] == [(1, a, ["0"], ["slot alloc-a"]), (1, b, [], ["slot alloc-b"])]
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


GiB = 2**30


def memory_spec(tmp_path, devices):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": devices}))
    return spec


def bindings_table(human, bindings):
    """The lines of list's bindings section."""
    return human.split(f"Bindings from {bindings} (GPUs bound to the holders inside a TaskManager):\n", 1)[
        1
    ].splitlines()


def test_list_shows_each_bindings_memory_request_and_what_each_gpu_has_requested_of_its_total(tmp_path, memory_binders):
    spec = memory_spec(tmp_path, [{"memory_total": 16 * GiB}, {"memory_total": 80 * GiB}, {}])
    coord, bindings = tmp_path / "coord", tmp_path / "coord.bindings"
    worker, got, worker_pid, _ = memory_binders(bindings, spec, ["0"], "12 gb", share=4)
    slot, slot_got, _, _ = memory_binders(bindings, spec, ["0", "1"], "2 gb", count=2, share=4, slot="alloc-1")
    plain, plain_got, plain_pid, _ = memory_binders(bindings, spec, ["2"], None)
    assert (got, slot_got, plain_got) == (["0"], ["0", "1"], ["2"])
    assert "mem=12884901888" in bindings.read_text()  # the core's line

    doc = cli_json("--simulate-spec", spec, "list", "--file", coord)
    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    assert errors(doc, schema) == []
    holders = {h["holder"]: h for t in doc["bindings"]["taskmanagers"] for h in t["holders"]}
    assert holders[f"pid {worker_pid}"]["memory"] == 12884901888
    assert holders["slot alloc-1"]["memory"] == 2 * GiB and holders["slot alloc-1"]["gpus"] == ["0", "1"]
    assert holders[f"pid {plain_pid}"]["memory"] is None
    gpus = {g["index"]: g for g in doc["gpus"]}
    assert [(i, g["memory_total"], g["memory_requested"]) for i, g in gpus.items()] == [
        ("0", 16 * GiB, 14 * GiB),  # 12 GiB and the slot's 2 GiB
        ("1", 80 * GiB, 2 * GiB),
        ("2", 80 * GiB, 0),  # its holder requests nothing
    ]

    human = cli("--simulate-spec", spec, "list", "--file", coord).stdout
    lines = bindings_table(human, bindings)
    cells = {}  # holder -> its MEMORY REQUEST cell, read under its own table's header
    for line in lines:
        if line.startswith("    HOLDER"):
            header = line
            assert header.split() == ["HOLDER", "GPU", "SHARED", "MEMORY", "REQUEST", "COMMAND"]
        elif line.startswith("    "):
            column = header.index("MEMORY REQUEST")
            cells[" ".join(line.split()[:2])] = line[column : header.index("COMMAND")].strip()
            assert line[column - 2 : column] == "  "
    assert cells == {f"pid {worker_pid}": "12 GiB", "slot alloc-1": "2 GiB each", f"pid {plain_pid}": "none"}
    assert re.search(rf"^    pid {worker_pid}  +0  +up to 4  12 GiB  ", human, re.M)  # beside its share
    requested = [line for line in lines if "requested" in line]
    assert requested == ["  GPU 0: requested 14 GiB of 16 GiB", "  GPU 1: requested 2 GiB of 80 GiB"]


def test_list_does_not_show_an_orphaned_worker_as_a_holder_and_names_it_and_how_to_end_it(tmp_path):
    """A process-mode TaskManager SIGKILLed; its worker lives on (stopped: it cannot give its binding up
    itself). It is no holder, its request counts for nothing, and it is not a dead holder either: it runs."""
    from support.orphans import WORKER, orphaned_worker

    coord, bindings = tmp_path / "coord", tmp_path / "coord.bindings"
    with orphaned_worker(bindings, {"devices": [{}]}, memory="12 gb", stopped=True) as orphan:
        doc = cli_json("--simulate", "1", "list", "--file", coord)
        human = cli("--simulate", "1", "list", "--file", coord).stdout
    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    assert errors(doc, schema) == []
    view = doc["bindings"]
    assert (view["taskmanagers"], view["stale"]) == ([], [])
    assert view["orphans"] == [
        {
            "pid": orphan.pid,
            "taskmanager": orphan.taskmanager,
            "gpus": ["0"],
            "memory": 12 * GiB,
            "cmdline": [sys.executable, "-c", WORKER, str(bindings), "0", "12 gb"],
        }
    ]
    assert doc["gpus"][0]["memory_requested"] == 0
    assert bindings_table(human, bindings) == [
        "  no live holder.",
        f"  pid {orphan.pid}, a worker of TaskManager {orphan.taskmanager} which is gone, still runs on GPU 0 (its "
        f"request of 12 GiB no longer counts): end it (kill {orphan.pid}).",
    ]


def test_list_counts_a_holder_once_per_gpu_with_its_largest_line_and_says_when_the_total_is_unknown(tmp_path):
    # a slot of another PID namespace's TaskManager binds GPU 0 from two threads: one holder, 6 GiB (not 10)
    ns = os.stat("/proc/self/ns/pid").st_ino + 1
    spec = memory_spec(tmp_path, [{"memory_total": 16 * GiB}, {"not_supported": ["memory", "memory_v2"]}])
    (tmp_path / "coord.bindings").write_text(
        f"0 7\t5\tns={ns}\ttm=1\tshare=2\tslot=alloc-a\tmem={4 * GiB}\n"
        f"0 8\t5\tns={ns}\ttm=1\tshare=2\tslot=alloc-a\tmem={6 * GiB}\n"
        f"1 9\t5\tns={ns}\ttm=1\tshare=2\tslot=alloc-b\tmem={3 * GiB}\n"
        f"1 10\t5\tns={ns}\ttm=1\tshare=2\tslot=alloc-c\n"
    )
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    holders = {h["holder"]: h["memory"] for t in doc["bindings"]["taskmanagers"] for h in t["holders"]}
    assert holders == {"slot alloc-a": 6 * GiB, "slot alloc-b": 3 * GiB, "slot alloc-c": None}
    assert [(g["memory_total"], g["memory_requested"]) for g in doc["gpus"]] == [(16 * GiB, 6 * GiB), (None, 3 * GiB)]
    human = cli("--simulate-spec", spec, "list", "--file", tmp_path / "coord").stdout
    assert "  GPU 0: requested 6 GiB of 16 GiB\n" in human
    assert "  GPU 1: requested 3 GiB of an unknown total (NVML did not read the GPU's memory)\n" in human


def test_list_without_a_bindings_file_has_no_bindings_section(tmp_path):
    whole = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")
    assert [g["memory_requested"] for g in whole["gpus"]] == [0, 0]
    doc = whole["bindings"]
    assert doc == {
        "path": str(tmp_path / "coord.bindings"),
        "exists": False,
        "error": None,
        "taskmanagers": [],
        "stale": [],
        "orphans": [],
        "unparsable": [],
        "unknown_indices": [],
    }
    assert "Bindings" not in cli("--simulate", "2", "list", "--file", tmp_path / "coord").stdout


def test_list_still_lists_gpus_when_the_bindings_file_is_unusable(tmp_path):
    (tmp_path / "coord.bindings").mkdir()
    proc = cli("--simulate", "2", "list", "--file", tmp_path / "coord")
    assert proc.returncode == 0 and len(re.findall(r"^\d+ +GPU-", proc.stdout, re.M)) == 2
    assert f"Bindings unknown: Refusing to use the bindings file {tmp_path / 'coord.bindings'}" in proc.stdout
    doc = cli_json("--simulate", "2", "list", "--file", tmp_path / "coord")
    assert "it is a directory" in doc["bindings"]["error"] and doc["bindings"]["exists"] is False
    assert [g["memory_requested"] for g in doc["gpus"]] == [None, None]  # not known, not 0


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_list_json_shows_health_memory_processes_and_numa(state_host):
    doc = cli_json("--simulate-spec", state_host["spec"], "list", "--file", state_host["coord"])
    gpus = {g["index"]: g for g in doc["gpus"]}
    assert gpus["0"]["health"].startswith("degraded: ") and "row remapping pending" in gpus["0"]["health"]
    assert gpus["0"]["memory_used"] == 3 * 2**30
    assert gpus["1"]["health"].startswith("unhealthy: ") and "row remapping failed" in gpus["1"]["health"]
    assert gpus["1"]["findings"] and gpus["0"]["processes"] == []
    [own] = gpus["2"]["processes"]
    assert own == {
        "pid": state_host["child"],
        "kind": "compute",
        "used_memory": 2**30,
        "visible": True,
        "cmdline": ["sleep", "600"],
        "holder": state_host["holder"],
    }
    by_pid = {p["pid"]: p for p in gpus["3"]["processes"]}
    stranger, gone = by_pid[state_host["stranger"]], by_pid[state_host["gone"]]
    assert stranger["pid"] == state_host["stranger"] and stranger["holder"] is None
    assert stranger["kind"] == "graphics" and stranger["visible"] is True
    assert gone == {
        "pid": state_host["gone"],
        "kind": "compute",
        "used_memory": None,
        "visible": False,
        "cmdline": None,
        "holder": None,
    }
    for gpu in doc["gpus"]:
        assert {
            "health",
            "findings",
            "memory_used",
            "memory_free",
            "numa_node",
            "cpu_affinity",
            "compute_mode",
            "processes_known",
            "processes",
        } <= set(gpu)
        assert gpu["processes_known"] is True


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_list_table_shows_the_state_of_each_gpu(state_host):
    proc = cli("--simulate-spec", state_host["spec"], "list", "--file", state_host["coord"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("GPU "))
    assert header.split() == ["GPU", "HEALTH", "UTIL", "MEMORY", "USED", "TEMP", "POWER", "NUMA", "CPUS", "PROCESSES"]
    rows = {line.split()[0]: line for line in lines[lines.index(header) + 1 :][:4]}
    assert "degraded: " in rows["0"] and "3.0 GiB" in rows["0"] and rows["0"].endswith("none")
    assert "unhealthy: " in rows["1"]
    assert rows["2"].endswith(f"pid {state_host['child']} sleep 600 (holder pid {state_host['holder']})")
    assert f"pid {state_host['stranger']} sleep 600 (not a flink-gpu holder's)" in rows["3"]
    assert f"pid {state_host['gone']} (not visible here)" in rows["3"]
    assert f"NVML lists pid {state_host['gone']}, which this PID namespace cannot see" in proc.stdout


def test_list_json_shows_what_each_check_found_and_what_it_did_not_look_at(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "devices": [
                    {
                        "health": {"inforom_corrupted": True, "ecc_enabled": False},
                        "no_permission": ["remapped_rows"],
                        "fabric": {},
                    },
                    {"not_supported": ["retired_pages", "field_values"]},
                ]
            }
        )
    )
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "c")
    first, second = doc["gpus"]
    assert first["checks"] == {
        "inforom": {"outcome": "finding", "finding": "InfoROM corrupted"},
        "remapped-rows": {"outcome": "no permission", "finding": None},
        "ecc": {"outcome": "not applicable", "finding": None},
        "recovery-action": {"outcome": "ok", "finding": None},
        "fabric": {"outcome": "ok", "finding": None},
        "retired-pages": {"outcome": "ok", "finding": None},
        "nvlink": {"outcome": "not applicable", "finding": None},  # no NVLink
    }
    assert {name: c["outcome"] for name, c in second["checks"].items()} == {
        "inforom": "ok",
        "remapped-rows": "ok",
        "ecc": "ok",
        "recovery-action": "not supported",
        "fabric": "not supported",
        "retired-pages": "not supported",
        "nvlink": "not supported",
    }
    assert second["health"] == "ok"  # not checked is not a finding, but it shows
    human = cli("--simulate-spec", spec, "list", "--file", tmp_path / "c").stdout
    assert (
        "GPU 1: not checked: recovery-action (not supported), fabric (not supported), retired-pages "
        "(not supported)" in human
    )


def test_list_says_once_what_every_gpu_leaves_unchecked(tmp_path):
    """A PCIe host has no fabric: "not checked: fabric (not supported)" was a line per GPU."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{}, {"not_supported": ["retired_pages"]}, {}]}))
    human = cli("--simulate-spec", spec, "list", "--file", tmp_path / "c").stdout
    notes = [line for line in human.splitlines() if "not checked" in line]
    assert notes == [
        "  Every GPU: not checked: fabric (not supported), nvlink (not applicable)",
        "  GPU 1: not checked: retired-pages (not supported)",
    ], human
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "c")
    assert [g["checks"]["fabric"]["outcome"] for g in doc["gpus"]] == ["not supported"] * 3  # JSON keeps each


def test_list_shows_mig_units_under_their_gpu_with_parent_and_instance_fields(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "devices": [
                    {
                        "uuid": "GPU-mig",
                        "mig": {
                            "mode": "enabled",
                            "instances": [
                                {"slot": 0, "uuid": "MIG-a", "gi": 7, "ci": 0},
                                {"slot": 2, "uuid": "MIG-b", "gi": 3, "ci": 1},
                            ],
                        },
                    },
                    {"mig": {"mode": "enabled", "pending": "disabled"}},
                    {"uuid": "GPU-plain"},
                ]
            }
        )
    )
    doc = cli_json("list", "--simulate-spec", spec, "--file", tmp_path / "c")
    assert [g["index"] for g in doc["gpus"]] == ["0:0", "0:2", "2"]
    assert {k: doc["gpus"][1][k] for k in ("uuid", "parent_index", "parent_uuid", "mig_slot", "mig_gi", "mig_ci")} == {
        "uuid": "MIG-b",
        "parent_index": "0",
        "parent_uuid": "GPU-mig",
        "mig_slot": 2,
        "mig_gi": 3,
        "mig_ci": 1,
    }
    assert "parent_index" not in doc["gpus"][2]
    assert [s["index"] for s in doc["skipped"]] == ["1"] and "no MIG instances" in doc["skipped"][0]["reason"]
    assert doc["nvml"]["notices"] == ["GPU 1: MIG mode pending a reset (now enabled, disabled after the GPU is reset)."]
    human = cli("list", "--simulate-spec", spec, "--file", tmp_path / "c").stdout.splitlines()
    start = next(n for n, line in enumerate(human) if line.startswith("INDEX"))
    assert [line.split()[:2] for line in human[start + 1 : start + 5]] == [
        ["0", "GPU-mig"],
        ["0:0", "MIG-a"],
        ["0:2", "MIG-b"],
        ["2", "GPU-plain"],
    ]
    assert human[start + 2].startswith("  0:0")
    assert any("MIG mode pending a reset" in line for line in human)


# -- list --topology: how the GPUs are joined ------------------------------------------------------


def test_list_topology_prints_the_matrix_as_nvidia_smi_does_and_json_always_carries_it(tmp_path):
    from flink_gpu import simulator

    spec = simulator.profile_path("rtx3090-bridged-4")
    proc = cli("--simulate-spec", spec, "list", "--topology", "--file", tmp_path / "coord")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"] and "CPU" in line)
    assert lines[start].split() == ["GPU0", "GPU1", "GPU2", "GPU3", "CPU", "Affinity", "NUMA", "Affinity"]
    assert [line.split()[:5] for line in lines[start + 1 : start + 5]] == [
        ["GPU0", "X", "PHB", "NV4", "NODE"],
        ["GPU1", "PHB", "X", "NODE", "NV4"],
        ["GPU2", "NV4", "NODE", "X", "PHB"],
        ["GPU3", "NODE", "NV4", "PHB", "X"],
    ]
    assert all(line.split()[-1] == "N/A" for line in lines[start + 1 : start + 5])  # no simulated NUMA node
    assert "Legend:" in lines
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in lines
    assert "GPU0" not in cli("--simulate-spec", spec, "list", "--file", tmp_path / "coord").stdout.split()

    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    assert errors(doc, schema) == []
    assert doc["topology"]["gpus"] == ["0", "1", "2", "3"]
    assert doc["topology"]["matrix"][0] == ["X", "PHB", "NV4", "NODE"]
    assert doc["topology"]["nvlinks"][1] == {"known": True, "count": 4, "inactive": 0, "to_switch": False}
    assert doc["topology"]["numa_nodes"] == [None] * 4
    assert [g["checks"]["nvlink"] for g in doc["gpus"]] == [{"outcome": "ok", "finding": None}] * 4


def test_list_shows_the_nvlink_check_with_the_others(tmp_path):
    from flink_gpu import simulator

    down = cli_json("--simulate-spec", simulator.profile_path("h100-hgx-8-linkdown"), "list", "--file", tmp_path / "c")
    gpu = down["gpus"][5]
    assert gpu["checks"]["nvlink"] == {"outcome": "finding", "finding": "4 of 18 NVLinks inactive"}
    assert gpu["health"] == "degraded: 4 of 18 NVLinks inactive"
    assert down["topology"]["nvlinks"][5] == {"known": True, "count": 18, "inactive": 4, "to_switch": True}
    pairs = cli_json("--simulate-spec", simulator.profile_path("a100-nvlink-pairs-4"), "list", "--file", tmp_path / "c")
    assert pairs["gpus"][2]["checks"]["nvlink"] == {"outcome": "not applicable", "finding": "no active NVLink"}
    human = cli("--simulate-spec", simulator.profile_path("a100-nvlink-pairs-4"), "list", "--file", tmp_path / "c")
    assert "nvlink (not applicable)" in human.stdout
