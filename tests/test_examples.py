"""examples/: the cluster script runs as its docstring says, against a real standalone Flink cluster.

examples/run_local_cluster.py starts a JobManager and one TaskManager of 2 slots on 4 simulated GPUs with
Flink's own bin/start-cluster.sh, runs examples/gpu_inference_job.py in process and in thread mode, and
stops everything. Needs apache-flink and Java, like tests/test_pyflink_cluster.py; takes about a minute.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env
from flink_gpu import binding

pytestmark = pytest.mark.flink_cluster

pytest.importorskip("pyflink", reason="the example needs apache-flink (pip install apache-flink==2.3.0)")
if shutil.which("java") is None:
    pytest.skip("the example needs Java >= 11 on PATH", allow_module_level=True)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def section(output, mode):
    return output.split(f"--mode {mode}", 1)[1].split("== ", 1)[0]


def test_the_cluster_example_binds_a_gpu_per_subtask_in_both_modes_shows_gauges_and_stops_everything():
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "run_local_cluster.py"), "--seconds", "6"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    registered = re.search(r"TaskManager (\S+) registered, 2 slots", out)
    assert registered, out
    for mode, holder in (("process", r"pid \d+"), ("thread", r"slot [0-9a-f]{32}")):
        part = section(out, mode)
        assert re.search(r"job [0-9a-f]{32}: FINISHED", part), part
        # the gauges of each subtask's GPU, read from Flink's REST API while the job ran: two distinct GPUs
        gauges = dict(re.findall(r"subtask (\d): infer\.gpu\.(\d)\.", part))
        assert sorted(gauges) == ["0", "1"] and len(set(gauges.values())) == 2, part
        for name in binding.GAUGES:  # every gauge flink_gpu registers, health included
            assert len(re.findall(rf"infer\.gpu\.\d\.{name} -?\d+", part)) == 2, part
        assert re.findall(r"infer\.gpu\.\d\.health (-?\d+)", part) == ["0", "0"], part  # the simulated GPUs are ok
        # flink-gpu list (the file of $FLINK_CONF_DIR) shows the TaskManager by its resource id, its two holders
        assert f"TaskManager {registered.group(1)} (pid " in part, part
        rows = re.findall(rf"^\s+({holder})\s+(\d)\s+alone", part, re.M)
        assert sorted(gpu for _, gpu in rows) == sorted(gauges.values()), part
    # the TaskManager's log: one line per binding, naming operator, subtask, GPU index and uuid
    lines = re.findall(r"Bound infer subtask (\d) to .* (process|thread) mode: GPU (\d) \(GPU-[0-9a-f-]{36}\)", out)
    assert sorted((mode, subtask) for subtask, mode, _ in lines) == [
        ("process", "0"),
        ("process", "1"),
        ("thread", "0"),
        ("thread", "1"),
    ], out
    # everything it started is gone: the JVMs, and the temporary directory with conf, logs and files
    pids = [int(pid) for pid in re.findall(r"pid (\d+)", out.split("stopped:", 1)[1].splitlines()[0])]
    assert len(pids) == 2
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} still runs"
    work = Path(re.search(r"FLINK_CONF_DIR=(\S+)/conf\)", out).group(1))
    assert not work.exists()
