"""`flink-gpu demo` (flink_gpu.cli.demo_command): workers sharing a simulated host, then the slots of one binding its
GPUs."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import child_env
from support.cli import UUID0, cli, cli_json
from support.waiting import wait_until


def pid_exists(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
    process = subprocess.Popen(
        [sys.executable, "-m", "flink_gpu.cli", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
        wait_until(lambda: not any(pid_exists(pid) for pid in pids), "the demo's workers are gone", 10)
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


# demo: a worker that cannot claim is reported with its own error, not "read of closed file"


def test_demo_worker_failure_reports_the_workers_error(tmp_path, monkeypatch):
    from flink_gpu import FlinkException, simulator
    from flink_gpu.cli.demo_command import Worker, _child_env

    for key, value in simulator.environment(devices=2).items():
        monkeypatch.setenv(key, value)
    worker = Worker("worker-x", 5, str(tmp_path / "coordination"), _child_env())
    with pytest.raises(FlinkException) as error:
        worker.wait_report()  # 5 of 2 GPUs: the worker exits with an error on stderr
    assert "worker-x" in str(error.value) and "Could not get enough GPU resources" in str(error.value)
    assert worker.process.poll() is not None and worker.process.stderr.closed
