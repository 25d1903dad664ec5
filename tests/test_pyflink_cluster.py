"""End to end: a real standalone Flink 2.3 cluster (JobManager + two TaskManagers on this host) from
the apache-flink wheel, Flink's own Java GPU plugin running our native flink-gpu-discovery (in
coordination mode, on the NVML simulator with 4 GPUs), and a PyFlink job whose map function asks
flink_gpu.pyflink for its GPUs in thread and in process mode.

Needs ``pip install apache-flink==2.3.0`` and Java >= 11; takes about a minute and a half. Deselect
with ``-m 'not flink_cluster'``. (A local MiniCluster never calls external resource drivers, so
nothing short of a standalone cluster tests this.)
"""

import json
import shutil
from pathlib import Path

import pytest

from support.interop import find_discovery_executable
from flink_gpu import coordination, simulator

pytestmark = pytest.mark.flink_cluster

pytest.importorskip("pyflink", reason="the cluster test needs apache-flink==2.3.0 (pip install apache-flink==2.3.0)")
if shutil.which("java") is None:
    pytest.skip("the cluster test needs Java >= 11 on PATH", allow_module_level=True)

from flink_e2e.cluster import StandaloneCluster  # noqa: E402  (imports yaml, needs pyflink)

JOB = Path(__file__).resolve().parent / "flink_e2e" / "gpu_job.py"
PARALLELISM = 4  # two slots on each of the two TaskManagers: both get subtasks
TASKMANAGERS = ("tm1", "tm2")
SIM_UUID = "GPU-00000000-0000-4000-8000-{:012x}"


def package_root() -> str:
    import flink_gpu

    return str(Path(flink_gpu.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("flink-cluster")
    coordination_file = work / "gpu-coordination"
    conf = {
        "taskmanager.numberOfTaskSlots": 2,
        "external-resources": "gpu",
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
        "external-resource.gpu.param.discovery-script.path": find_discovery_executable(),
        "external-resource.gpu.param.discovery-script.args":
            f"--enable-coordination-mode --coordination-file {coordination_file}",
    }
    taskmanagers = [{"env": {**simulator.environment(devices=4), "FLINK_GPU_E2E_TASKMANAGER": name,
                             "PYTHONPATH": package_root()}}
                    for name in TASKMANAGERS]
    flink = StandaloneCluster(work, conf, taskmanagers)
    flink.coordination_file = coordination_file
    try:
        flink.start(timeout=240)
        yield flink
    finally:
        flink.stop()


def fail(cluster, message):
    pytest.fail(f"{message}\n\nCluster logs (tails):\n{cluster.logs(80)}", pytrace=False)


def run_job(cluster, mode):
    results = cluster.work_dir / f"results-{mode}"
    results.mkdir()
    proc = cluster.run_python_job(JOB, [mode, str(results), str(PARALLELISM)],
                                  env={"PYTHONPATH": package_root()}, timeout=400)
    if proc.returncode != 0:
        fail(cluster, f"flink run -py ({mode} mode) exited with {proc.returncode}.\n"
                      f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    reports = [json.loads(path.read_text()) for path in sorted(results.glob("*.json"))]
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        fail(cluster, f"The map function failed in {mode} mode:\n" + "\n".join(errors))
    if len(reports) != PARALLELISM:
        fail(cluster, f"Expected {PARALLELISM} subtask reports in {mode} mode, got {len(reports)}: {reports}")
    return reports


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_each_taskmanagers_subtasks_see_its_own_two_gpus(cluster, mode):
    reports = run_job(cluster, mode)
    try:
        check_reports(cluster, mode, reports)
    except AssertionError as error:
        fail(cluster, f"{mode} mode: {error}\nreports: {json.dumps(reports, indent=1)}")


def check_reports(cluster, mode, reports):
    jvm_pid = {name: tm.pid for name, tm in zip(TASKMANAGERS, cluster.taskmanagers)}

    # what the TaskManagers' discovery recorded: two GPUs for each JVM, none shared
    held = coordination.snapshot(cluster.coordination_file).holders()
    by_jvm = {}
    for index, pids in held.items():
        assert len(pids) == 1, f"GPU {index} is held by several TaskManagers: {pids}"
        by_jvm.setdefault(pids[0], set()).add(index)

    seen = {}
    for report in reports:
        name = report["taskmanager"]
        assert report["mode"] == mode, report
        assert report["reason"] is None, report["reason"]
        indices = {info["index"] for info in report["infos"]}
        assert len(indices) == 2, f"{name} subtask saw {report['infos']}"
        assert seen.setdefault(name, indices) == indices, f"the subtasks of {name} disagree: {reports}"
        assert indices == by_jvm.get(jvm_pid[name]), (
            f"{name} (JVM pid {jvm_pid[name]}) saw {sorted(indices)}; the coordination file says {held}")
        if mode == "thread":
            # the function runs inside the TaskManager JVM, and Flink's Java GPUInfo has only the index
            assert report["pid"] == jvm_pid[name]
            assert all(info.keys() == {"index"} for info in report["infos"])
        else:
            # a Python worker below the JVM; the GPUs are the JVM's, completed from NVML
            assert report["pid"] != jvm_pid[name] and report["holder_pid"] == jvm_pid[name]
            for info in report["infos"]:
                assert info["uuid"] == SIM_UUID.format(int(info["index"]))
                assert info["name"] == "NVIDIA Simulated GPU"
    assert set(seen) == set(TASKMANAGERS), f"subtasks ran only on {sorted(seen)}: {reports}"
    assert seen["tm1"].isdisjoint(seen["tm2"]), seen
    assert seen["tm1"] | seen["tm2"] <= {"0", "1", "2", "3"}
