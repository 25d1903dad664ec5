"""End to end: real standalone Flink 2.3 clusters (a JobManager and TaskManagers on this host) from
the apache-flink wheel, Flink's own Java GPU plugin running our native flink-gpu-discovery (in
coordination mode, on the NVML simulator), and a PyFlink job (flink_e2e/gpu_job.py) whose operator asks
flink_gpu.pyflink for its GPUs, binds one with ``bind_gpus`` and registers the binding's gauges, in
thread and in process mode.

* Two TaskManagers of two slots, each given 2 of 4 simulated GPUs, parallelism 4: each subtask sees
  its TaskManager's two GPUs; the four bound GPUs are distinct, each of its TaskManager's set; the
  gauges are read back from Flink's REST API while the job runs.
* One TaskManager of four slots with 2 GPUs: ``subtasks_per_gpu=2`` binds each GPU exactly twice;
  ``gpus[getIndexOfThisSubtask() % n]`` collides where ``bind_gpus`` does not; a second operator in a
  slot gets that slot's binding; after a SIGKILLed Python worker (process mode) or a failed task
  (thread mode) the restarted job binds both GPUs again.

What PyFlink 2.3 does underneath (threads, workers, slots, gauges) is written down in
flink_e2e/gpu_job.py; how the REST API names metrics, in flink_gpu/deploy/local_cluster.py.

Needs ``pip install apache-flink==2.3.0`` and Java >= 11; takes two to three minutes. Deselect with
``-m 'not flink_cluster'``. (A local MiniCluster never calls external resource drivers, so nothing
short of a standalone cluster tests this.) The clusters run one after the other (class-scoped).
"""

import json
import os
import re
import shutil
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flink_gpu import binding, coordination, simulator
from flink_gpu.deploy.local_cluster import LocalCluster, flink_home, gpu_resource
from support.interop import find_discovery_executable
from support.waiting import wait_until

pytestmark = pytest.mark.flink_cluster

pytest.importorskip("pyflink", reason="the cluster test needs apache-flink==2.3.0 (pip install apache-flink==2.3.0)")
if shutil.which("java") is None:
    pytest.skip("the cluster test needs Java >= 11 on PATH", allow_module_level=True)


JOB = Path(__file__).resolve().parent / "flink_e2e" / "gpu_job.py"
OPERATOR = "bind-gpus"  # gpu_job.OPERATOR; its further operators are "bind-gpus-2", "bind-gpus-3"
MODES = ["process", "thread"]
SIM_UUID = "GPU-00000000-0000-4000-8000-{:012x}"
#: the gauges of a bound GPU as the REST API names them: "<operator>.gpu.<index>.<gauge>"
GAUGE_RANGES = {
    "utilization": range(0, 101),
    "memoryUsed": range(0, 1 << 24),
    "temperature": range(1, 120),
    "power": range(0, 5000),
    "health": range(0, 1),
}  # the simulated GPUs are healthy
assert set(GAUGE_RANGES) == set(binding.GAUGES)


def package_root() -> str:
    import flink_gpu

    return str(Path(flink_gpu.__file__).resolve().parent.parent)


def start_cluster(work: Path, slots: int, taskmanagers: dict[str, int]) -> LocalCluster:
    """JobManager + one TaskManager per ``taskmanagers`` entry (name -> simulated GPUs on its host),
    each with ``slots`` slots and amount 2 of ``gpu``, discovered in coordination mode."""
    coordination_file = work / "gpu-coordination"
    conf = {"taskmanager.numberOfTaskSlots": slots, **gpu_resource(2, coordination_file, find_discovery_executable())}
    flink = LocalCluster(flink_home(), work, conf, start_timeout=240)
    flink.coordination_file = coordination_file
    flink.bindings_file = binding.bindings_path(coordination_file)
    flink.names = list(taskmanagers)
    flink.runs = {}  # (mode, what) -> JobRun: each job runs once for the tests that look at it
    try:
        flink.start_jobmanager()
        for name, devices in taskmanagers.items():
            # CUDA_DEVICE_ORDER as docs/design.md §9.3 says to set it: thread mode's CUDA ordinals follow from NVML
            env = {
                **simulator.environment(devices=devices),
                "FLINK_GPU_E2E_TASKMANAGER": name,
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "PYTHONPATH": package_root(),
            }
            flink.start_taskmanager(name, env)
        flink.wait_for_free_slots(slots, "the cluster to come up", taskmanagers=len(taskmanagers))
    except BaseException:
        flink.stop()
        raise
    return flink


def fail(cluster, message):
    pytest.fail(f"{message}\n\nCluster logs (tails):\n{cluster.log_tail(80)}", pytrace=False)


@dataclass
class JobRun:
    """What one run of gpu_job.py left: the subtasks' reports, and what the test saw while it ran."""

    mode: str
    opened: list = field(default_factory=list)  # open() reports
    closed: list = field(default_factory=list)  # close() reports
    gauges: dict = field(default_factory=dict)  # (operator, subtask) -> {REST metric id: value}
    gauge_ids: dict = field(default_factory=dict)  # (operator, subtask) -> every "<op>.gpu.*" id it has
    bound_while_running: dict = field(default_factory=dict)  # BindingSnapshot.by_taskmanager()
    bound_after: dict = field(default_factory=dict)
    first_attempt: list = field(default_factory=list)  # a restarted job's first open() reports
    bound_before_restart: dict = field(default_factory=dict)
    problem: str | None = None  # why the run is unusable: each test that needs it fails with this


def subtask_of(report):
    """(operator, subtask index): a subtask's key in the REST API and in :class:`JobRun`."""
    return report["operator"], report["subtask"]


def run_job(cluster, mode, parallelism, subtasks_per_gpu=1, groups=(None,), gauges=False, restart=None) -> JobRun:
    """Runs gpu_job.py (``groups``: an operator per entry, in that slot sharing group; None: the default):
    waits for every open() report, reads the gauges from REST (``gauges``) and the bindings file while
    the subtasks wait, then lets them finish and collects the close() reports. Once per cluster.

    ``restart``: ``"kill-worker"`` SIGKILLs the Python worker of subtask 0, ``"fail-task"`` makes subtask 0
    fail, once every subtask has bound; Flink restarts the job once, and ``opened``/``closed`` are the
    restarted attempt's reports (``first_attempt``: the first attempt's open() reports)."""
    key = (mode, parallelism, subtasks_per_gpu, tuple(groups), restart)
    if key in cluster.runs:
        return cluster.runs[key]
    results = cluster.work / f"results-{len(cluster.runs)}-{mode}"
    results.mkdir()
    release = results / "release"
    spec = {
        "mode": mode,
        "results": str(results),
        "parallelism": parallelism,
        "subtasks_per_gpu": subtasks_per_gpu,
        "release": str(release),
        "groups": list(groups),
    }
    if restart is not None:
        spec.update(restarts=1, fail=str(results / "fail"))
    run = cluster.runs[key] = JobRun(mode)
    job_id = None
    try:
        job_id = cluster.submit_python_job(JOB, [json.dumps(spec)], env={"PYTHONPATH": package_root()})
        expected = parallelism * len(groups)
        attempt = 0
        run.opened = wait_for_reports(cluster, job_id, results, "open", expected, attempt, timeout=180)
        if restart is not None:
            run.first_attempt, run.bound_before_restart = run.opened, bound_now(cluster)
            if restart == "kill-worker":
                (victim,) = [r["pid"] for r in run.opened if subtask_of(r) == (OPERATOR, 0)]
                os.kill(victim, signal.SIGKILL)
            else:
                Path(spec["fail"]).touch()
            attempt = 1
            run.opened = wait_for_reports(cluster, job_id, results, "open", expected, attempt, timeout=180)
        if gauges and not any("error" in r or "bind_error" in r for r in run.opened):  # else nothing to read
            read_gauges(cluster, job_id, run, timeout=60)
        run.bound_while_running = bound_now(cluster)
        release.touch()
        state = cluster.wait_for_job_end(job_id, timeout=180)
        cluster.check_daemons(f"the end of job {job_id}", f"it had ended {state}")
        if state != "FINISHED":
            raise RuntimeError(f"The job ended {state}:\n{cluster.job_failure(job_id)}")
        run.closed = wait_for_reports(cluster, job_id, results, "close", expected, attempt, timeout=30)
        run.bound_after = bound_now(cluster)
    except (RuntimeError, TimeoutError, OSError, ValueError, LookupError) as error:
        run.problem = f"{mode} mode, job {job_id}: {error}"
    finally:
        release.touch()
        if job_id is not None:
            cluster.cancel_job(job_id)
    return run


def bound_now(cluster) -> dict:
    """The bindings file now: TaskManager pid -> live holder -> its GPUs."""
    return binding.snapshot(cluster.bindings_file).by_taskmanager()


def wait_for_reports(cluster, job_id, results, kind, expected, attempt, timeout) -> list:
    """The ``kind`` (open, close) reports of the subtasks' attempt ``attempt``, once all ``expected`` are there."""
    seen = {"reports": [], "state": "not asked yet"}

    def all_there():
        reports = [json.loads(path.read_text()) for path in sorted(results.glob(f"{kind}-*.json"))]
        reports = seen["reports"] = [r for r in reports if r.get("attempt", 0) == attempt]
        if len(reports) >= expected:
            if len(reports) > expected:
                raise RuntimeError(
                    f"{len(reports)} {kind}() reports of attempt {attempt}, expected {expected}: {reports}"
                )
            return reports
        state = seen["state"] = cluster.job_state(job_id)
        if state in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(
                f"The job ended {state} with {len(reports)} of {expected} {kind}() reports of "
                f"attempt {attempt}:\n{cluster.job_failure(job_id)}"
            )
        return None

    try:
        return wait_until(all_there, f"{expected} {kind}() reports of attempt {attempt} are there", timeout, 0.2)
    except AssertionError as error:  # the run's problem (run_job): what was there at the end
        raise TimeoutError(f"{error} (job {seen['state']}): {seen['reports']}") from None


def read_gauges(cluster, job_id, run, timeout):
    """Polls each subtask's REST metrics until the gauges of the GPU it bound are all there."""
    deadline = time.monotonic() + timeout  # one bound for all the subtasks' waits
    vertices = {}
    for report in run.opened:
        operator, subtask = subtask_of(report)
        if operator not in vertices:
            vertices[operator] = cluster.vertex(job_id, operator)["id"]
        wanted = [f"{operator}.gpu.{index}.{gauge}" for index in report["bound"] for gauge in GAUGE_RANGES]
        run.gauges[operator, subtask] = gauges_shown(
            cluster, job_id, vertices[operator], (operator, subtask), wanted, deadline - time.monotonic()
        )
        listed = cluster.rest(f"/jobs/{job_id}/vertices/{vertices[operator]}/subtasks/{subtask}/metrics")
        run.gauge_ids[operator, subtask] = sorted(
            entry["id"] for entry in listed if entry["id"].startswith(f"{operator}.gpu.")
        )


def gauges_shown(cluster, job_id, vertex_id, key, wanted, limit):
    """The values of the metric ids ``wanted`` of subtask ``key`` (operator, index), once REST shows them all."""
    operator, subtask = key
    shown = {}

    def all_shown():
        shown.clear()
        shown.update(cluster.subtask_metrics(job_id, vertex_id, subtask, wanted))
        return dict(shown) if len(shown) == len(wanted) else None

    try:
        return wait_until(all_shown, f"subtask {subtask} of {operator} shows the gauges {wanted}", max(limit, 0), 0.5)
    except AssertionError as error:
        raise TimeoutError(f"{error}; it shows {shown}") from None


def usable(cluster, run, *, binds=True):
    """Fails the test with the run's problem, or the subtasks' errors (``binds``: binding errors too)."""
    if run.problem is not None:
        fail(cluster, run.problem)
    keys = ("error", "bind_error") if binds else ("error",)
    errors = [r[key] for r in run.opened + run.closed for key in keys if key in r]
    if errors:
        fail(cluster, f"The operator failed in {run.mode} mode:\n" + "\n".join(errors))
    return run


def check(cluster, run, assertions):
    try:
        assertions()
    except AssertionError as error:
        fail(cluster, f"{run.mode} mode: {error}\nreports: {json.dumps(run.opened + run.closed, indent=1)}")


def coordination_sets(cluster) -> dict:
    """TaskManager JVM pid -> the GPU indices its discovery claimed in the coordination file."""
    held = coordination.snapshot(cluster.coordination_file).holders()
    by_jvm = {}
    for index, pids in held.items():
        assert len(pids) == 1, f"GPU {index} is held by several TaskManagers: {pids}"
        by_jvm.setdefault(pids[0], set()).add(index)
    return by_jvm


def check_binding_report(run, report, jvm_pid):
    """One subtask's binding: one GPU of its TaskManager, named the way its mode names it."""
    (index,) = report["bound"]
    assert index in {info["index"] for info in report["infos"]}, report
    assert [info["index"] for info in report["bound_infos"]] == [index]
    if run.mode == "thread":
        # Flink's Java infos have only the index; CUDA numbers the JVM's GPUs in PCI order (the simulator's
        # bus ids follow the indices)
        assert report["cuda_visible_devices"] == index
        assert report["devices"] == [int(index)]
        assert report["holder"] == f"slot {report['slot']} (thread {report['thread']})"
        assert report["pid"] == jvm_pid
    else:
        # the worker set CUDA_VISIBLE_DEVICES to its binding: its one GPU is CUDA device 0
        assert report["cuda_visible_devices"] == SIM_UUID.format(int(index))
        assert report["devices"] == [0]
        assert report["holder"] == f"pid {report['pid']}"
        assert report["holder_pid"] == jvm_pid and report["pid"] != jvm_pid


def holder_of(run, report):
    """The subtask's holder as the bindings file names it: its worker process, or its slot."""
    return f"pid {report['pid']}" if run.mode == "process" else f"slot {report['slot']}"


def holders_of(run, reports):
    """Holder -> the GPUs it bound, for the subtasks ``reports``."""
    return {holder_of(run, r): tuple(r["bound"]) for r in reports}


@pytest.fixture(scope="class")
def cluster(request, tmp_path_factory):
    """The cluster of the test's class (``CLUSTER``: slots, TaskManager name -> simulated GPUs), up for
    that class only: the next class's cluster starts after it stopped."""
    slots, taskmanagers = request.cls.CLUSTER
    flink = start_cluster(tmp_path_factory.mktemp(request.cls.__name__), slots, taskmanagers)
    try:
        yield flink
    finally:
        flink.stop()


class TestTwoTaskManagers:
    """2 TaskManagers x 2 slots, each given 2 of the host's 4 GPUs (coordination on); parallelism 4."""

    CLUSTER = (2, {"tm1": 4, "tm2": 4})
    PARALLELISM = 4

    def job(self, cluster, mode):
        return run_job(cluster, mode, self.PARALLELISM, gauges=True)

    @pytest.mark.parametrize("mode", MODES)
    def test_each_taskmanagers_subtasks_see_its_own_two_gpus(self, cluster, mode):
        run = usable(cluster, self.job(cluster, mode), binds=False)
        check(cluster, run, lambda: self.check_infos(cluster, run))

    def check_infos(self, cluster, run):
        jvm_pid = {name: cluster.taskmanager_pid(name) for name in cluster.names}
        by_jvm = coordination_sets(cluster)  # what discovery recorded: two GPUs per JVM, none shared
        assert len(run.opened) == self.PARALLELISM
        seen = {}
        for report in run.opened:
            name = report["taskmanager"]
            assert report["mode"] == run.mode, report
            assert report["reason"] is None, report["reason"]
            indices = {info["index"] for info in report["infos"]}
            assert len(indices) == 2, f"{name} subtask saw {report['infos']}"
            assert seen.setdefault(name, indices) == indices, f"the subtasks of {name} disagree"
            assert indices == by_jvm.get(jvm_pid[name]), (
                f"{name} (JVM pid {jvm_pid[name]}) saw {sorted(indices)}; the coordination file says {by_jvm}"
            )
            if run.mode == "thread":
                # the function runs inside the TaskManager JVM, and Flink's Java GPUInfo has only the index
                assert report["pid"] == jvm_pid[name]
                assert all(info.keys() == {"index"} for info in report["infos"])
            else:
                # a Python worker below the JVM; the GPUs are the JVM's, completed from NVML
                assert report["pid"] != jvm_pid[name] and report["holder_pid"] == jvm_pid[name]
                for info in report["infos"]:
                    assert info["uuid"] == SIM_UUID.format(int(info["index"]))
                    assert info["name"] == "NVIDIA Simulated GPU"
        assert set(seen) == set(cluster.names), f"subtasks ran only on {sorted(seen)}"
        assert seen["tm1"].isdisjoint(seen["tm2"]), seen
        assert seen["tm1"] | seen["tm2"] <= {"0", "1", "2", "3"}

    @pytest.mark.parametrize("mode", MODES)
    def test_each_subtask_binds_its_own_gpu_of_its_taskmanagers_set(self, cluster, mode):
        run = usable(cluster, self.job(cluster, mode))
        check(cluster, run, lambda: self.check_bindings(cluster, run))

    def check_bindings(self, cluster, run):
        jvm_pid = {name: cluster.taskmanager_pid(name) for name in cluster.names}
        by_jvm = coordination_sets(cluster)
        bound = [report["bound"][0] for report in run.opened]
        assert len(set(bound)) == self.PARALLELISM, f"the four subtasks bound {bound}: not distinct"
        assert sorted(r["subtask"] for r in run.opened) == list(range(self.PARALLELISM))
        for report in run.opened:
            check_binding_report(run, report, jvm_pid[report["taskmanager"]])
            assert report["bound"][0] in by_jvm[jvm_pid[report["taskmanager"]]], report
        # one holder per slot: distinct workers (process mode) or allocation ids (thread mode)
        holders = holders_of(run, run.opened)
        assert len(holders) == self.PARALLELISM, holders
        # the bindings file while the subtasks waited: each TaskManager's two holders, one GPU each
        expected = {}
        for report in run.opened:
            expected.setdefault((jvm_pid[report["taskmanager"]], None), {})[holder_of(run, report)] = tuple(
                report["bound"]
            )
        assert run.bound_while_running == expected, run.bound_while_running
        # every release() in close(), and the workers are gone: nothing left bound
        assert all(r.get("released", "").endswith("released)") for r in run.closed), run.closed
        assert all(r["held_until_release"] for r in run.closed), "a subtask stopped waiting before the test looked"
        assert run.bound_after == {}, run.bound_after
        if run.mode == "thread":
            # the task's thread binds in open() and lives until close(): the slot holds while the task runs
            opened = {(r["operator"], r["subtask"]): r["thread"] for r in run.opened}
            assert all(opened[r["operator"], r["subtask"]] == r["thread"] for r in run.closed), run.closed
        # gpus[subtask % 2] collides on a TaskManager exactly when Flink placed two subtasks of one parity there
        # (subtasks {0, 2} and {1, 3}); where it placed them is Flink's choice, so judge what it chose
        by_tm = {}
        for report in run.opened:
            by_tm.setdefault(report["taskmanager"], []).append(report)
        for name, reports in by_tm.items():
            parities = Counter(r["subtask"] % 2 for r in reports)
            picks = Counter(r["modulo_pick"] for r in reports)
            assert (max(picks.values()) > 1) == (max(parities.values()) > 1), (name, reports)
            assert len({r["bound"][0] for r in reports}) == len(reports)

    @pytest.mark.parametrize("mode", MODES)
    def test_gpu_gauges_are_read_back_from_the_rest_api_while_the_job_runs(self, cluster, mode):
        run = usable(cluster, self.job(cluster, mode))
        check(cluster, run, lambda: check_gauges(run, self.PARALLELISM))


def check_gauges(run, parallelism):
    assert len(run.gauges) == parallelism, run.gauges
    for report in run.opened:
        operator, subtask = subtask_of(report)
        (index,) = report["bound"]
        prefix = f"{operator}.gpu.{index}."
        # only the bound GPU's gauges, under the key-value group gpu=<index>
        assert run.gauge_ids[operator, subtask] == sorted(prefix + g for g in GAUGE_RANGES), run.gauge_ids
        for gauge, allowed in GAUGE_RANGES.items():
            value = run.gauges[operator, subtask][prefix + gauge]
            where = f"{prefix}{gauge} of subtask {subtask}"
            assert re.fullmatch(r"-?[0-9]+", value), f"{where} is {value!r}, not an integer"
            assert int(value) in allowed, f"{where} is {value}, outside {allowed}"


class TestOneTaskManagerSharingTwoGpus:
    """1 TaskManager x 4 slots with 2 GPUs (coordination on)."""

    CLUSTER = (4, {"tm1": 2})

    @pytest.mark.parametrize("mode", MODES)
    def test_subtasks_per_gpu_2_binds_each_gpu_exactly_twice(self, cluster, mode):
        run = usable(cluster, run_job(cluster, mode, parallelism=4, subtasks_per_gpu=2))
        check(cluster, run, lambda: self.check_shared(cluster, run))

    def check_shared(self, cluster, run):
        jvm_pid = cluster.taskmanager_pid("tm1")
        assert Counter(r["bound"][0] for r in run.opened) == {"0": 2, "1": 2}
        for report in run.opened:
            check_binding_report(run, report, jvm_pid)
        holders = holders_of(run, run.opened)
        assert len(holders) == 4, f"four slots, four holders: {holders}"
        assert run.bound_while_running == {(jvm_pid, None): holders}, run.bound_while_running
        assert run.bound_after == {}, run.bound_after

    # bind-gpus and bind-gpus-3 in the default slot sharing group (one slot, two tasks), bind-gpus-2 in a
    # group of its own (a second slot): parallelism 1, so every subtask has index 0
    GROUPS = (None, "own-slot", None)

    def operators_job(self, cluster, mode):
        return run_job(cluster, mode, parallelism=1, groups=self.GROUPS)

    @pytest.mark.parametrize("mode", MODES)
    def test_subtask_index_modulo_collides_where_bind_gpus_does_not(self, cluster, mode):
        """Two operators' subtask 0 in two slots of the one TaskManager: ``gpus[0 % 2]`` gives both GPU 0,
        whatever Flink's placement (subtasks 0..3 on two TaskManagers collide only when Flink puts 0 and 2
        on one of them, which it does in some runs and not others). ``bind_gpus`` gives the two slots the
        two GPUs."""
        run = usable(cluster, self.operators_job(cluster, mode))
        check(cluster, run, lambda: self.check_modulo_collides(cluster, run))

    def check_modulo_collides(self, cluster, run):
        by_operator = {r["operator"]: r for r in run.opened}
        operators = [OPERATOR, f"{OPERATOR}-2", f"{OPERATOR}-3"]
        assert sorted(subtask_of(r) for r in run.opened) == [(name, 0) for name in operators]
        first, other = by_operator[OPERATOR], by_operator[f"{OPERATOR}-2"]
        assert [first["modulo_pick"], other["modulo_pick"]] == ["0", "0"], "gpus[subtask % n] should collide"
        assert sorted(first["bound"] + other["bound"]) == ["0", "1"], "bind_gpus should not"
        assert holder_of(run, first) != holder_of(run, other)
        for report in run.opened:
            check_binding_report(run, report, cluster.taskmanager_pid("tm1"))

    @pytest.mark.parametrize("mode", MODES)
    def test_operators_of_one_slot_share_its_binding(self, cluster, mode):
        """bind-gpus-3 runs in bind-gpus's slot as a task of its own: in process mode in the same Python
        worker (PyFlink's one per slot), in thread mode on another thread with the same allocation id.
        It gets the slot's GPU, and the slot keeps it until both have released."""
        run = usable(cluster, self.operators_job(cluster, mode))
        check(cluster, run, lambda: self.check_slot_shared(cluster, run))

    def check_slot_shared(self, cluster, run):
        by_operator = {r["operator"]: r for r in run.opened}
        first, same_slot = by_operator[OPERATOR], by_operator[f"{OPERATOR}-3"]
        assert holder_of(run, same_slot) == holder_of(run, first)
        assert same_slot["bound"] == first["bound"]
        if run.mode == "thread":
            assert same_slot["thread"] != first["thread"]
        assert run.bound_while_running == {(cluster.taskmanager_pid("tm1"), None): holders_of(run, run.opened)}
        assert len(holders_of(run, run.opened)) == 2
        assert run.bound_after == {}, run.bound_after

    @pytest.mark.parametrize("mode, restart", [("process", "kill-worker"), ("thread", "fail-task")])
    def test_a_restarted_job_binds_again_after_a_holder_died(self, cluster, mode, restart):
        """Parallelism 2 binds both GPUs; then subtask 0's Python worker is SIGKILLed (process mode: nobody
        calls release) or subtask 0 fails (thread mode: its task thread ends). Flink restarts the job, and
        the new attempt binds both GPUs again: nothing of the first attempt is left bound."""
        run = usable(cluster, run_job(cluster, mode, parallelism=2, restart=restart))
        check(cluster, run, lambda: self.check_restarted(cluster, run))

    def check_restarted(self, cluster, run):
        jvm_pid = cluster.taskmanager_pid("tm1")
        for attempt, reports in enumerate((run.first_attempt, run.opened)):
            assert sorted(r["bound"][0] for r in reports) == ["0", "1"], f"attempt {attempt}: {reports}"
            assert all(r["attempt"] == attempt for r in reports)
        assert run.bound_before_restart == {(jvm_pid, None): holders_of(run, run.first_attempt)}
        assert run.bound_while_running == {(jvm_pid, None): holders_of(run, run.opened)}
        if run.mode == "process":
            # new workers: the killed one and its peer (torn down for the restart) are gone
            assert not {r["pid"] for r in run.first_attempt} & {r["pid"] for r in run.opened}
            assert not any(os.path.exists(f"/proc/{r['pid']}") for r in run.first_attempt)
        for report in run.opened:
            check_binding_report(run, report, jvm_pid)
        assert run.bound_after == {}, run.bound_after
