"""`flink-gpu coordination show|clean`, `claim` and `release` (flink_gpu.cli.coordination_command), run as real
processes against the NVML simulator."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import dead_pid
from support.cli import UUID0, cli, cli_json, cli_with_a_private_var_tmp


def test_coordination_clean_cleans_a_bindings_file_too(tmp_path, binders):
    bindings = tmp_path / "coord.bindings"
    live, _, _ = binders(bindings, None, ["0", "1"])
    ns = os.stat("/proc/self/ns/pid").st_ino
    with open(bindings, "a") as f:  # a slot thread of another pid namespace, and a dead holder of ours
        f.write(f"1 12345\t99\tns={ns + 1}\ttm=1\tshare=1\tslot=abc\n2 {2**22 + 7}\t5\tns={ns}\tshare=1\n")
    doc = cli_json("coordination", "clean", "--file", bindings, "--foreign-namespaces")
    assert doc["ok"] is True
    assert [line.split()[:2] for line in bindings.read_text().splitlines()] == [["0", str(live.pid)]]


def test_claim_and_release_default_to_the_parent_process(tmp_path):
    coord = tmp_path / "coord"
    doc = cli_json("--simulate", "4", "claim", "2", "--file", coord)
    # this test process is the command's parent
    assert doc["owner"]["pid"] == os.getpid()
    assert doc["gpus"] == [
        {"index": "0", "uuid": UUID0, "health": "ok"},
        {"index": "1", "uuid": "GPU-00000000-0000-4000-8000-000000000001", "health": "ok"},
    ]
    assert doc["left_out"] == []
    assert [line.split()[:2] for line in coord.read_text().splitlines()] == [
        ["0", str(os.getpid())],
        ["1", str(os.getpid())],
    ]
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


def test_claim_of_two_takes_the_bridged_pair_unless_topology_is_ignored(tmp_path, holder):
    from flink_gpu import simulator

    bridged = simulator.profile_path("rtx3090-bridged-4")  # NVLink bridges on 0-2 and 1-3
    doc = cli_json("--simulate-spec", bridged, "claim", "2", "--owner", holder.pid, "--file", tmp_path / "joined")
    assert [gpu["index"] for gpu in doc["gpus"]] == ["0", "2"]
    plain = tmp_path / "plain"
    doc = cli_json(
        "--simulate-spec", bridged, "claim", "2", "--owner", holder.pid, "--file", plain, "--topology", "ignore"
    )
    assert [gpu["index"] for gpu in doc["gpus"]] == ["0", "1"]
    wrong = cli("--simulate-spec", bridged, "claim", "2", "--file", plain, "--topology", "closest")
    assert wrong.returncode == 2 and "--topology: invalid choice: 'closest'" in wrong.stderr


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
    assert doc["error"]["type"] == "NotEnoughGpusError"  # the failure by name (a FlinkException)
    assert f"{holder.pid}" in coord.read_text() and str(os.getpid()) not in coord.read_text()


def test_claim_for_a_dead_owner_is_refused(tmp_path):
    proc = cli("--simulate", "4", "claim", "1", "--owner", dead_pid(), "--file", tmp_path / "c")
    assert proc.returncode == 2
    assert "no such (live) process" in proc.stderr
    assert not (tmp_path / "c").exists()


def test_claim_ranks_as_the_driver_and_warns_what_it_leaves_out(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "devices": [
                    {"health": {"inforom_corrupted": True}},
                    {"processes": [{"pid": 4000000001, "used_memory": 2**20}]},  # no one's here: foreign
                    {"health": {"row_remap_pending": True}},
                    {},
                ]
            }
        )
    )
    proc = cli("--simulate-spec", spec, "claim", "2", "--file", tmp_path / "c", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # healthy idle first, then healthy busy; never the corrupted one, the degraded one last
    assert [g["index"] for g in doc["gpus"]] == ["1", "3"]
    assert doc["left_out"] == [{"index": "0", "reason": "unhealthy: InfoROM corrupted"}]
    assert "GPU 0 left out: unhealthy: InfoROM corrupted" in proc.stderr
    assert "GPU 1 is busy: foreign process 4000000001 (compute, not visible" in proc.stderr
    # too few: the host's four GPUs counted, the one left out named with why (not "of the 3 devices")
    left_out = "but 3 of the 4 devices NVML lists are usable: GPU 0 is left out (unhealthy: InfoROM corrupted)."
    proc = cli("--simulate-spec", spec, "claim", "4", "--file", tmp_path / "d")
    assert proc.returncode == 1 and f"Could not get enough GPU resources: 4 GPUs requested, {left_out}" in proc.stderr
    proc = cli("--simulate-spec", spec, "claim", "99999999999999999999", "--file", tmp_path / "d")
    assert proc.returncode == 1 and f"99999999999999999999 GPUs requested, {left_out}" in proc.stderr


def test_claim_of_several_mig_units_gives_one_cuda_visible_devices_per_process(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "devices": [
                    {
                        "mig": {
                            "mode": "enabled",
                            "instances": [
                                {"slot": 0, "uuid": "MIG-a"},
                                {"slot": 1, "uuid": "MIG-b"},
                                {"slot": 2, "uuid": "MIG-c"},
                            ],
                        }
                    }
                ]
            }
        )
    )
    proc = cli("--simulate-spec", spec, "claim", "3", "--file", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert "CUDA_VISIBLE_DEVICES=MIG-a,MIG-b" not in proc.stdout
    assert "CUDA uses one MIG instance per process" in proc.stdout
    lines = [line.strip() for line in proc.stdout.splitlines() if "CUDA_VISIBLE_DEVICES=" in line]
    assert lines == ["CUDA_VISIBLE_DEVICES=MIG-a", "CUDA_VISIBLE_DEVICES=MIG-b", "CUDA_VISIBLE_DEVICES=MIG-c"]
    proc = cli("--simulate-spec", spec, "claim", "1", "--file", tmp_path / "d")
    assert "CUDA_VISIBLE_DEVICES=MIG-a" in proc.stdout and "one MIG instance" not in proc.stdout


def test_coordination_show_and_clean(tmp_path, holder):
    coord = tmp_path / "coord"
    gone = dead_pid()
    start = int(Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    coord.write_text(f"0 {holder.pid} {start}\n1 {gone}\ngarbage here\n2 {holder.pid} {start + 12345}\n")
    doc = cli_json("coordination", "show", "--file", coord)
    assert doc["command"] == "coordination show" and doc["exists"] is True
    states = {e["index"]: (e["pid"], e["state"], e["alive"]) for e in doc["entries"]}
    assert states == {
        "0": (holder.pid, "live", True),
        "1": (gone, "gone", False),
        "2": (holder.pid, "pid reused", False),
    }
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


def test_clean_shows_the_command_of_a_removed_line_whose_process_still_runs(tmp_path, holder, monkeypatch, capsys):
    """A line the judge calls stale (here its lease read free) whose process runs in our namespace with the
    recorded start time: `clean` names its command as `show` and `list` name a live holder's, not "-"; a
    line whose pid is another process's now (pid reused) names none."""
    from argparse import Namespace

    from flink_gpu import coordination
    from flink_gpu.cli import coordination_command as command

    coord = tmp_path / "coord"
    coord.write_text("")
    start = int(Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    running = coordination.CoordinationEntry("0", holder.pid, start, False, 1, state="lease released")
    reused = coordination.CoordinationEntry("1", holder.pid, start + 1, False, 2, state="pid reused")
    removed = coordination.CleanResult(removed=(running, reused), unparsable=())
    monkeypatch.setattr(coordination, "clean_stale", lambda *args, **kwargs: removed)
    args = Namespace(file=str(coord), conf=None, timeout=5.0, foreign_namespaces=False, json=False)
    assert command.clean(args) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^  1\s+0\s+{holder.pid}\s+{start}\s+lease released\s+\S*python", out, re.M), out
    assert re.search(rf"^  2\s+1\s+{holder.pid}\s+{start + 1}\s+pid reused\s+-$", out, re.M), out


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


@pytest.mark.parametrize(
    "command, outcome",
    [(["show"], "no GPU is claimed through it"), (["clean"], "nothing to clean")],
    ids=["show", "clean"],
)
def test_show_and_clean_of_the_default_file_recording_nothing_say_how_to_read_a_clusters_own(
    tmp_path, command, outcome
):
    """As `list` says it: a cluster with its own --coordination-file claims nothing in the stock default file, which
    showed as "does not exist" alone."""
    cases = [(False, "does not exist", outcome)]
    if command == ["show"]:
        cases.append((True, "holds no claim", outcome))
    for empty_default, what, then in cases:
        proc = cli_with_a_private_var_tmp("coordination", *command, empty_default=empty_default)
        assert proc.returncode == 0, proc.stderr
        assert f"Coordination file /var/tmp/flink-gpu-coordination {what}: {then}." in proc.stdout, proc.stdout
        assert "--conf <its Flink conf dir>" in proc.stdout and "FLINK_CONF_DIR=<its Flink conf dir>" in proc.stdout
        assert "--file <its coordination file>" in proc.stdout
    named = cli("coordination", *command, "--file", tmp_path / "missing").stdout  # named: no advice where to look
    assert f"Coordination file {tmp_path / 'missing'} does not exist: {outcome}." in named and "--conf" not in named


def test_coordination_refuses_a_symlink(tmp_path):
    target = tmp_path / "target"
    target.write_text("0 1\n")
    (tmp_path / "link").symlink_to(target)
    proc = cli("coordination", "show", "--file", tmp_path / "link")
    assert proc.returncode == 1
    assert str(tmp_path / "link") in proc.stderr
    # the library's sentence, not Python's "[Errno 40] ...: 'path'" rendering
    assert "[Errno" not in proc.stderr and proc.stderr.count(str(tmp_path / "link")) == 1


# counts beyond 64 bits


def test_a_claim_amount_beyond_64_bits_is_not_enough_gpus_not_a_traceback(tmp_path):
    path = tmp_path / "coordination"
    proc = cli("--simulate", "4", "claim", "--file", path, "99999999999999999999")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        "error: Could not get enough GPU resources: 99999999999999999999 GPUs requested, but 4 of the 4 devices NVML "
        "lists are usable."
    ) in proc.stderr
    assert not path.exists()
    doc = cli_json("--simulate", "4", "claim", "--file", path, "99999999999999999999", expect=1)
    assert "99999999999999999999 GPUs requested" in json.dumps(doc)
