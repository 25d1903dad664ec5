"""docs/flink-cluster.md's walkthrough runs as written: every ```bash block of sections 1-5, in order, in
one shell, from the repository's root, against a real standalone cluster (two TaskManagers on one host,
4 simulated GPUs), and each step shows what the text says it shows: the GPU gauges in Flink's REST API
while the thread-mode job runs, a TaskManager killed and started again in the shell of taskmanager-env
with the dead one's GPUs, and what stop-cluster.sh leaves running after that, stopped by stop-all.

The shell runs in PID, network and mount namespaces of its own (unshare): the walkthrough's ports (Flink's
6123 and 8081) are those of a private loopback, /var/tmp (the coordination file of
--enable-coordination-mode) is a private directory, and when the shell ends the kernel ends whatever it
left. HOME is a temporary directory (~/flink-conf, ~/flink-log, ~/flink-lib); PATH has this checkout's
flink-gpu and flink-gpu-discovery, as installing flink-gpu puts them there. One cluster, about
three minutes on an idle machine.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env
from flink_gpu import binding
from support.cli import flink_gpu_on_path

pytestmark = pytest.mark.flink_cluster

pytest.importorskip("pyflink", reason="the walkthrough needs apache-flink (pip install apache-flink==2.3.0)")
if shutil.which("java") is None:
    pytest.skip("the walkthrough needs Java >= 11 on PATH", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "flink-cluster.md"
SHARED_FILE = Path("/var/tmp/flink-gpu-coordination")
TIMEOUT_S = 900  # an upper bound: the shell ends when its last command has


def walkthrough():
    """The ```bash blocks of sections 1-5 (the local cluster), in order."""
    text = DOC.read_text(encoding="utf-8")
    local = text.split("\n## 1. ", 1)[1].split("\n## 6. ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", local, re.S)


def test_the_walkthrough_has_its_steps():
    script = "\n".join(walkthrough())
    for step in (
        "export FLINK_HOME=",
        "cp -r $FLINK_HOME/conf ~/flink-conf",
        "metrics.fetcher.update-interval: 1000",
        "export FLINK_LIB_DIR=",
        "> $FLINK_CONF_DIR/workers",
        'eval "$(flink-gpu --simulate 4 taskmanager-env)"',
        "flink-gpu doctor $FLINK_CONF_DIR",
        "bin/start-cluster.sh",
        "--mode process",
        "--mode thread",
        "/subtasks/0/metrics",
        "flink-gpu list",
        "kill -9",
        "bin/taskmanager.sh start",
        "bin/stop-cluster.sh",
        "bin/taskmanager.sh stop-all",
    ):
        assert step in script, step


def namespaces():
    """The unshare(1) command for the shell's own PID, network and mount namespaces, or a skip saying why not."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("the walkthrough runs in namespaces of its own: needs unshare(1) and ip(8)")
    command = ["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--kill-child"]
    if os.geteuid() != 0:
        command.insert(1, "--map-root-user")
    probe = subprocess.run([*command, "ip", "link", "set", "lo", "up"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"cannot create PID, network and mount namespaces here: {probe.stderr.strip()}")
    return command


def test_every_command_of_the_walkthrough_runs_as_written(tmp_path):
    from flink_gpu.deploy.taskmanager_env import discovery_executable

    command = namespaces()
    home, var_tmp, bin_dir = tmp_path / "home", tmp_path / "var-tmp", tmp_path / "bin"
    home.mkdir()
    var_tmp.mkdir()
    env = flink_gpu_on_path(tmp_path, child_env(HOME=str(home)))  # bin/flink-gpu: this checkout's
    (bin_dir / "flink-gpu-discovery").symlink_to(discovery_executable())
    # `python` is this virtualenv's (its bin/ on PATH, as an activated virtualenv has it)
    env["PATH"] = os.pathsep.join((str(bin_dir), str(Path(sys.executable).parent), env["PATH"]))
    for name in ("FLINK_LOG_DIR", "FLINK_PID_DIR", "FLINK_LIB_DIR"):
        env.pop(name, None)
    script = "\n".join(
        [
            "set -euxo pipefail",
            "ip link set lo up",  # the namespace's loopback: localhost:6123 and :8081 are this shell's
            f"mount --bind {var_tmp} /var/tmp",
            f"cd {ROOT}",
            *walkthrough(),
        ]
    )
    before = SHARED_FILE.stat() if SHARED_FILE.exists() else None
    proc = subprocess.run([*command, "bash", "-c", script], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    log_dir = home / "flink-log"
    out = proc.stdout
    logs = {path.name: path.read_text(errors="replace") for path in log_dir.glob("*")} if log_dir.is_dir() else {}
    report = out + "\n--- stderr ---\n" + proc.stderr[-20000:]
    assert proc.returncode == 0, report

    # doctor, in the shell that starts the cluster: nothing wrong, no key set twice, no port held
    assert "No problem found" in out and "is set 2 times" not in out and "already in use" not in out, report
    # two TaskManagers (conf/workers), each with two GPUs of the four, both modes: four subtasks each
    bound = re.findall(r"Bound infer subtask (\d) to .* of the TaskManager \(pid (\d+)\), (\w+) mode: GPU (\d)", out)
    for mode in ("process", "thread"):
        subtasks = sorted(subtask for subtask, _, m, _ in bound if m == mode)
        assert subtasks == ["0", "1", "2", "3"], report
        assert len({tm for _, tm, m, _ in bound if m == mode}) == 2, report
        assert sorted(gpu for _, _, m, gpu in bound if m == mode) == ["0", "1", "2", "3"], report
    # print() of the job: process mode's in the TaskManagers' .log, thread mode's in their .out
    printed = re.compile(r"infer subtask \d: model ")
    in_log = sum(len(printed.findall(text)) for name, text in logs.items() if name.endswith(".log"))
    in_out = sum(len(printed.findall(text)) for name, text in logs.items() if name.endswith(".out"))
    assert (in_log, in_out) == (4, 4), report
    assert len(printed.findall(out)) == 8, report  # what the two greps printed
    # the records of the .print() sinks: each subtask knew its index, thread mode's too (the workaround
    # of get_index_of_this_subtask(), section 4)
    records = "\n".join(text for name, text in logs.items() if name.endswith(".out"))
    assert sorted(set(re.findall(r'"subtask": (\w+)', records))) == ["0", "1", "2", "3"], report
    # the thread-mode job's gauges in REST while it ran (metrics.fetcher.update-interval: 1 s): every gauge
    # of subtask 0's GPU, and the job still RUNNING right after
    values = re.search(r'^(\[\{"id":"infer\.gpu\.\d\..*\])\n\{"status":"(\w+)"\}$', out, re.M)
    assert values and values.group(2) == "RUNNING", report
    shown = {entry["id"].rsplit(".", 1)[1]: entry["value"] for entry in json.loads(values.group(1))}
    assert sorted(shown) == sorted(binding.GAUGES) and shown["health"] == "0", report
    # one TaskManager killed (the newest of the pid file), one started in the shell of taskmanager-env: it
    # claims the two GPUs the dead one held (flink-gpu list, after the start)
    taskmanagers = {tm for _, tm, _, _ in bound}
    killed = int(re.search(r"^\+ kill -9 (\d+)$", proc.stderr, re.M).group(1))
    assert str(killed) in taskmanagers, report
    (first,) = taskmanagers - {str(killed)}
    started = re.search(r"^\+ grep -w 'pid (\d+)'$", proc.stderr, re.M).group(1)
    after_start = out.rsplit("NVML ", 1)[1]  # the last flink-gpu list
    holders = re.findall(r"^(\d)\s+GPU-\S+.*\spid (\d+): ", after_start, re.M)
    assert sorted(pid for _, pid in holders) == sorted([first] * 2 + [started] * 2), report
    killed_gpus = {gpu for _, tm, m, gpu in bound if tm == str(killed) and m == "thread"}
    assert {gpu for gpu, pid in holders if pid == started} == killed_gpus, report
    # stop-cluster.sh's two stops take the new TaskManager and the dead one's pid: the first keeps running
    # until taskmanager.sh stop-all stops it (the namespace's end would have anyway)
    stops = re.findall(r"^(Stopping|No) (taskexecutor|standalonesession) daemon \(pid: (\d+)\)", out, re.M)
    assert stops == [
        ("Stopping", "taskexecutor", started),
        ("No", "taskexecutor", str(killed)),
        ("Stopping", "standalonesession", stops[2][2]),
        ("Stopping", "taskexecutor", first),
    ], report
    # nothing of the host's: its shared coordination file is as it was
    assert (SHARED_FILE.stat() if SHARED_FILE.exists() else None) == before
