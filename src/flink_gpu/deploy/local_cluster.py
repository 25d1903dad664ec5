"""A real standalone Flink cluster on this host, from a Flink distribution (the apache-flink wheel's, or
another named): examples/run_local_cluster.py and the cluster tests drive Flink through it.

Everything lives in one work directory: ``conf/`` (the distribution's ``config.yaml`` flattened, with
the caller's keys, free ports and small memory sizes), ``lib/``, ``log/``, Flink's pid files, and a
``<name>/conf`` per TaskManager started on its own. The JVMs are started by the distribution's own
daemon scripts (``bin/start-cluster.sh``, or ``bin/jobmanager.sh start`` and ``bin/taskmanager.sh
start`` for TaskManagers of different environments), each script in a process group of its own, and
:meth:`LocalCluster.stop` runs the matching stop scripts, then kills by pid whatever of the cluster is
left (found by Flink's pid files, those process groups, and the work directory on a JVM's command line).

``lib/`` holds the distribution's jars plus ``opt/flink-python`` unless ``lib/`` has it already. PyFlink
ships flink-python with each job, so without it in ``lib/`` each job loads pemja (thread mode's embedded
CPython) in its own user-code class loader; the JVM then refuses pemja's native library to every later
job's class loader ("already loaded in another classloader"), and pemja's fallback fails on Java 17
(``NoSuchFieldException: loadedLibraryNames``): a TaskManager could run one thread-mode job only. From
``lib/`` (parent-first, as everything under ``org.apache.flink``) it is loaded once per JVM.

REST metrics (Flink's REST API): ``/jobs/<jid>/vertices/<vid>/subtasks/<i>/metrics`` lists the subtask's
metric ids, ``?get=<id>,<id>`` gives their values (strings; ids it does not know are left out, so a
caller polls until all are there). A user metric's id is ``<operator name>.<groups>.<name>``; a
key-value group ``add_group("gpu", "0")`` contributes both parts (``gpu.0``), and the query service
replaces ``.``, ``,``, `` `` and ``:`` inside each part with ``_``. The JobManager fetches metrics from
the TaskManagers at most every ``metrics.fetcher.update-interval`` (1 s here).

Each wait ends as soon as what it waits for is there (its timeout is only a bound) and says what it saw
last; a JVM of the cluster that exits ends it at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

from flink_gpu.errors import LocalClusterError

__all__ = ["ENDED", "LocalCluster", "flink_home", "gpu_resource"]

T = TypeVar("T")

#: The states of a job that has ended.
ENDED = ("FINISHED", "FAILED", "CANCELED")
#: The bound of each wait for the cluster: a JVM that starts in 5 s on an idle machine takes a minute or
#: more on two loaded cores.
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 120
#: What the REST API, not up yet or going down, may raise: a wait goes on.
REST_ERRORS = (urllib.error.URLError, OSError, ValueError)


def flink_home(given: Optional[str] = None) -> Path:
    """The Flink distribution: ``given``, else the one inside the installed apache-flink wheel; Java on PATH."""
    if given:
        home = Path(given).resolve()
    else:
        try:
            import pyflink  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except ImportError:
            raise LocalClusterError("This example needs a Flink distribution: pip install apache-flink") from None
        home = Path(pyflink.__file__).resolve().parent
    if not (home / "bin" / "start-cluster.sh").is_file():
        raise LocalClusterError(
            f"{home} has no bin/start-cluster.sh: pip install apache-flink (with apache-flink-libraries)"
        )
    if shutil.which("java") is None:
        raise LocalClusterError("This example needs Java 11 or later on PATH (Flink runs on the JVM).")
    return home


def gpu_resource(amount: int, coordination_file: Path, discovery: str) -> "dict[str, object]":
    """The keys of the GPU resource: Flink's Java GPU plugin running ``discovery`` (flink-gpu-discovery)
    in coordination mode on ``coordination_file``, ``amount`` GPUs per TaskManager."""
    return {
        "external-resources": "gpu",
        "external-resource.gpu.amount": amount,
        "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
        "external-resource.gpu.param.discovery-script.path": discovery,
        "external-resource.gpu.param.discovery-script.args": (
            f"--enable-coordination-mode --coordination-file {coordination_file}"
        ),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(condition: "Callable[[], Optional[T]]", timed_out: "Callable[[], str]", limit: float, interval: float) -> T:
    """``condition()``'s first value that is not None; TimeoutError(``timed_out()``) once ``limit`` s passed."""
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(timed_out())
        time.sleep(interval)


def _is_jvm(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _write_conf(home: Path, conf_dir: Path, conf: "Mapping[str, object]") -> Path:
    """``conf_dir``: ``config.yaml`` (every value a string) and the distribution's log4j and logback files."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    with open(conf_dir / "config.yaml", "w") as f:
        for key, value in sorted(conf.items()):
            f.write(f"{key}: {json.dumps(str(value))}\n")  # a JSON string is a YAML string
    for pattern in ("log4j*.properties", "logback*.xml"):
        for source in (home / "conf").glob(pattern):
            shutil.copy(source, conf_dir / source.name)
    return conf_dir


def _lib_dir(home: Path, work: Path) -> Path:
    """lib's jars, and opt's flink-python unless lib has one already (why: the module docstring)."""
    lib = work / "lib"
    lib.mkdir()
    jars = sorted((home / "lib").glob("*.jar"))
    if not any(jar.name.startswith("flink-python") for jar in jars):
        jars += sorted((home / "opt").glob("flink-python*.jar"))
    for jar in jars:
        (lib / jar.name).symlink_to(jar)
    return lib


class LocalCluster:
    """A JobManager and TaskManagers on this host, in ``work``; :meth:`stop` ends whatever it started."""

    def __init__(
        self,
        home: Path,
        work: Path,
        conf: "Mapping[str, object]",
        env: "Optional[Mapping[str, str]]" = None,
        start_timeout: float = START_TIMEOUT_S,
        taskmanagers: int = 1,
    ):
        """``conf``: keys over the distribution's ``config.yaml`` for every process; ``env``: variables for
        every process (a TaskManager's environment, for :meth:`start`) and the ``flink`` client;
        ``taskmanagers``: the lines of ``conf/workers``, each a TaskManager that :meth:`start` starts here."""
        from flink_gpu.flink.configuration import Configuration

        self.home, self.work, self.start_timeout = home, Path(work), start_timeout
        self.rest_port, self.rpc_port = free_port(), free_port()
        self.conf = {
            **Configuration.from_yaml(home / "conf" / "config.yaml").to_dict(),
            "rest.port": self.rest_port,
            "jobmanager.rpc.port": self.rpc_port,
            "taskmanager.memory.process.size": "1536m",
            "jobmanager.memory.process.size": "1024m",
            "metrics.fetcher.update-interval": 1000,  # REST shows new metric values after at most 1 s
            **conf,
        }
        self.conf_dir = _write_conf(home, self.work / "conf", self.conf)
        (self.conf_dir / "masters").write_text(f"localhost:{self.rest_port}\n")  # start-cluster.sh passes it on
        (self.conf_dir / "workers").write_text("localhost\n" * taskmanagers)
        self.log_dir = self.work / "log"
        self.log_dir.mkdir(exist_ok=True)  # flink-daemon.sh writes into it but does not create it
        self.env = {
            **os.environ,
            **(env or {}),
            "FLINK_HOME": str(home),
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LOG_DIR": str(self.log_dir),
            "FLINK_PID_DIR": str(self.work),
            "FLINK_LIB_DIR": str(_lib_dir(home, self.work)),
        }
        self.stops: "list[tuple[str, tuple[str, ...], dict[str, str]]]" = []  # what stop() runs, last first
        self.groups: "set[int]" = set()  # the process groups of the bin/ scripts run

    # -- the processes ------------------------------------------------------------------------------

    def bin(
        self,
        script: str,
        *args: str,
        env: "Optional[Mapping[str, str]]" = None,
        timeout: Optional[float] = None,
        check: bool = True,
    ) -> "subprocess.CompletedProcess[str]":
        """Runs a script of bin/ in a process group of its own: what it starts in the background (the
        JVMs) stays in that group, which :meth:`pids` finds even when the script was cut short."""
        with subprocess.Popen(
            [str(self.home / "bin" / script), *args],
            env=self.env if env is None else {**self.env, **env},
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # nor does Ctrl-C in a terminal reach it: stop() ends it
        ) as proc:
            self.groups.add(proc.pid)
            try:
                stdout, stderr = proc.communicate(timeout=self.start_timeout if timeout is None else timeout)
            except BaseException:  # a timeout, Ctrl-C, SIGTERM: the script ends here, stop() does the rest
                proc.kill()
                proc.wait()
                raise
        if check and proc.returncode != 0:
            raise LocalClusterError(
                f"bin/{script} {' '.join(args)} exited with {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
            )
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def start(self) -> None:
        """``bin/start-cluster.sh``: the JobManager and a TaskManager per line of ``conf/workers``, all of this
        cluster's environment."""
        self.stops.append(("stop-cluster.sh", (), {}))  # from here on, stop() looks for its processes
        self.bin("start-cluster.sh")

    def start_jobmanager(self) -> None:
        self.stops.append(("jobmanager.sh", ("stop-all",), {}))
        self.bin("jobmanager.sh", "start")

    def start_taskmanager(
        self, name: str, env: "Mapping[str, str]", conf: "Optional[Mapping[str, object]]" = None
    ) -> None:
        """``bin/taskmanager.sh start`` with ``env`` added, the resource id ``name`` and ``conf`` over the
        cluster's keys (in ``<name>/conf``); its pid file and logs are named after ``name``."""
        conf_dir = _write_conf(
            self.home, self.work / name / "conf", {**self.conf, "taskmanager.resource-id": name, **(conf or {})}
        )
        own = {**env, "FLINK_CONF_DIR": str(conf_dir), "FLINK_IDENT_STRING": name}
        self.stops.append(("taskmanager.sh", ("stop-all",), own))
        self.bin("taskmanager.sh", "start", env=own)

    def daemons(self) -> "list[tuple[str, int]]":
        """(role, pid) of each JVM that the daemon scripts started, from Flink's pid files
        (``flink-<ident>-<role>.pid``, written as each is launched)."""
        found = []
        for pid_file in sorted(self.work.glob("flink-*.pid")):
            role = pid_file.stem.rsplit("-", 1)[-1]  # standalonesession, taskexecutor
            found += [
                (
                    "JobManager" if role == "standalonesession" else "TaskManager" if role == "taskexecutor" else role,
                    int(line),
                )
                for line in pid_file.read_text().split()
                if line.isdigit()
            ]
        return found

    def taskmanager_pid(self, name: str) -> int:
        """The JVM of the TaskManager that :meth:`start_taskmanager` started as ``name``."""
        (pid,) = [int(line) for line in (self.work / f"flink-{name}-taskexecutor.pid").read_text().split()]
        return pid

    def pids(self) -> "list[int]":
        """The live processes of the cluster: those of Flink's pid files, every JVM whose command line
        names this work directory (its conf or log dir), and what is left in the process groups of
        the bin/ scripts (a JVM whose pid file an interrupted script had not written yet, the scripts
        themselves, process-mode Python workers)."""
        found = {pid for _, pid in self.daemons()}
        marker = str(self.work).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    group = int(f.read().rsplit(")", 1)[1].split()[2])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if group in self.groups or (marker in cmdline and _is_jvm(int(entry))):
                found.add(int(entry))
        return sorted(pid for pid in found if _alive(pid))

    def stop(self, say: "Callable[[str], None]" = lambda line: None) -> "list[int]":
        """Runs the stop script of each start (``say``: what it does), then kills by pid whatever of the
        cluster is left after STOP_TIMEOUT_S. The JVMs that were running (pids)."""
        pids = set(self.pids())
        jvms = {pid for pid in pids if _is_jvm(pid)}
        while self.stops:
            script, args, env = self.stops.pop()
            say(f"== bin/{' '.join((script, *args))}")
            try:
                self.bin(script, *args, env=env, check=False, timeout=STOP_TIMEOUT_S)
            except (subprocess.TimeoutExpired, OSError) as error:
                say(f"   bin/{script} did not finish ({error}); killing the JVMs")

        def gone() -> Optional[bool]:
            found = self.pids()
            jvms.update(pid for pid in found if pid not in pids and _is_jvm(pid))
            pids.update(found)
            return True if not any(_alive(pid) for pid in pids) else None

        try:
            _wait(gone, lambda: "", STOP_TIMEOUT_S, 0.2)
        except TimeoutError:
            for pid in pids:  # SIGKILL cannot be refused: they end at once
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _wait(gone, lambda: f"pids {sorted(pids)} outlived SIGKILL", STOP_TIMEOUT_S, 0.2)
        return sorted(jvms)

    def check_daemons(self, what: str, seen: str) -> None:
        """Ends a wait at once, saying why, when a JVM of the cluster has exited (nothing would come)."""
        exited = [f"{role} (pid {pid})" for role, pid in self.daemons() if not _alive(pid)]
        if exited:
            reports = "".join(f"\ncrash report: {path}" for path in sorted(self.work.glob("**/hs_err_pid*.log")))
            raise LocalClusterError(
                f"While waiting for {what}, the {' and the '.join(exited)} of the cluster exited; "
                f"at that time {seen}.{reports}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 80) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            text = path.read_text(errors="replace").splitlines()
            parts.append(
                f"--- {path} (last {min(lines, len(text))} of {len(text)} lines) ---\n" + "\n".join(text[-lines:])
            )
        return "\n".join(parts) or f"(no log in {self.log_dir})"

    def log_lines(self, pattern: str) -> "list[str]":
        """The lines of the TaskManagers' log files (.log, and .out where thread mode's Python writes)
        that match ``pattern``."""
        lines = []
        for path in sorted(self.log_dir.glob("*taskexecutor*")):
            lines += [
                line.strip() for line in path.read_text(errors="replace").splitlines() if re.search(pattern, line)
            ]
        return lines

    # -- REST ---------------------------------------------------------------------------------------

    def rest(self, path: str, method: str = "GET", timeout: float = 30.0) -> Any:
        request = urllib.request.Request(f"http://localhost:{self.rest_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode()
        return json.loads(body) if body else None

    def wait_for_free_slots(
        self, slots: int, what: str, taskmanagers: int = 1, timeout: Optional[float] = None
    ) -> "list[dict[str, Any]]":
        """The TaskManagers once ``taskmanagers`` of them have registered ``slots`` free slots each (a
        TaskManager is listed before its slots are reported, and a finished job's slots are freed a
        moment after it ends)."""
        limit = self.start_timeout if timeout is None else timeout
        seen = ["the REST API did not answer"]

        def ready() -> "Optional[list[dict[str, Any]]]":
            self.check_daemons(f"{what} ({slots} free slots)", seen[0])
            try:
                registered = self.rest("/taskmanagers")["taskmanagers"]
            except REST_ERRORS as error:
                seen[0] = f"the REST API on port {self.rest_port} did not answer ({error})"
                return None
            free = [tm for tm in registered if tm.get("freeSlots", 0) >= slots]
            if len(free) >= taskmanagers:
                return free
            seen[0] = "; ".join(
                f"TaskManager {tm['id']} had registered {tm.get('slotsNumber', 0)} slots, "
                f"{tm.get('freeSlots', 0)} of them free"
                for tm in registered
            ) or ("the JobManager answered, no TaskManager had registered")
            return None

        return _wait(
            ready,
            lambda: f"Waited {limit:.0f} s for {what} ({slots} free slots); at the end {seen[0]}.\n{self.log_tail()}",
            limit,
            0.5,
        )

    # -- jobs ---------------------------------------------------------------------------------------

    def submit_python_job(self, script: Path, args: "Sequence[str]", env: "Optional[Mapping[str, str]]" = None) -> str:
        """``flink run -d -py script args`` with this interpreter: submits the job detached; its job id."""
        proc = self.bin(
            "flink",
            "run",
            "-d",
            "-pyclientexec",
            sys.executable,
            "-pyexec",
            sys.executable,
            "-py",
            str(script),
            *args,
            env=env,
            check=False,
        )
        found = re.search(r"JobID ([0-9a-f]{32})", proc.stdout)
        if proc.returncode != 0 or found is None:
            raise LocalClusterError(
                f"flink run -d -py {script.name} exited with {proc.returncode} without a job id."
                f"\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
            )
        return found.group(1)

    def job_state(self, job_id: str) -> str:
        """The job's state, from ``/jobs/<jid>/status``: unlike ``/jobs/<jid>`` it does not make the
        JobManager fetch metrics from the TaskManagers. Fetching calls every gauge; PyFlink 2.3's own
        thread-mode gauges call into the task's Python interpreter through pemja, which the task frees
        when it ends while its gauges are still registered, and a fetch at that moment crashes the JVM
        (SIGSEGV in take_gil / _PyEvalFramePushAndInit on a flink-metrics thread). The binding's gauges
        are Java-held values in thread mode, so they cannot; polling the state keeps the callers from
        depending on that."""
        state: str = self.rest(f"/jobs/{job_id}/status")["status"]
        return state

    def wait_for_job_end(self, job_id: str, timeout: float) -> str:
        """The job's state once it is FINISHED, FAILED or CANCELED."""
        state = ["not known yet"]

        def ended() -> Optional[str]:
            self.check_daemons(f"the end of job {job_id}", f"it was {state[0]}")
            state[0] = self.job_state(job_id)
            return state[0] if state[0] in ENDED else None

        return _wait(ended, lambda: f"Job {job_id} is still {state[0]} after {timeout:.0f} s.", timeout, 0.5)

    def job_failure(self, job_id: str, timeout: float = 60) -> str:
        """The failed job's first exception (the JobManager records it a moment after the job ends)."""

        def recorded() -> Optional[str]:
            entries = self.rest(f"/jobs/{job_id}/exceptions").get("exceptionHistory", {}).get("entries", [])
            return str(entries[0].get("stacktrace", "")) if entries else None

        try:
            return _wait(recorded, lambda: "", timeout, 0.5)
        except TimeoutError:
            return f"(the JobManager recorded no exception within {timeout:.0f} s)\n{self.log_tail()}"

    def cancel_job(self, job_id: str) -> None:
        """Cancels the job if it still runs (a caller that failed must not leave its slots taken)."""
        try:
            if self.job_state(job_id) not in ENDED:
                self.rest(f"/jobs/{job_id}?mode=cancel", method="PATCH")
                self.wait_for_job_end(job_id, 60)
        except (*REST_ERRORS, TimeoutError, LocalClusterError):
            pass  # the cluster is stopped after this anyway

    def vertex(self, job_id: str, operator_name: str) -> "dict[str, Any]":
        """The job vertex running operator ``operator_name`` (a chain's name joins its operators' with " -> ")."""
        for vertex in self.rest(f"/jobs/{job_id}")["vertices"]:
            if operator_name in vertex["name"].split(" -> "):
                found: "dict[str, Any]" = vertex
                return found
        raise LookupError(f"Job {job_id} has no vertex named {operator_name!r}.")

    def gpu_gauges(
        self, job_id: str, operator: str, parallelism: int, gauges: int, timeout: float
    ) -> "dict[int, dict[str, str]]":
        """Per subtask of ``operator``, its "<operator>.gpu.<index>.<gauge>" values, once every subtask
        has ``gauges`` of them (while the job runs: one that ends first is an error)."""
        found: "dict[int, dict[str, str]]" = {}

        def shown() -> "Optional[dict[int, dict[str, str]]]":
            self.check_daemons(f"the gauges of job {job_id}", f"the gauges of {len(found)} subtasks had shown")
            state = self.job_state(job_id)
            if state in ENDED:
                raise LocalClusterError(
                    f"The job ended {state} before its gauges showed in REST:\n{self.job_failure(job_id)}"
                )
            vertex = self.vertex(job_id, operator)
            for subtask in range(parallelism):
                base = f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{subtask}/metrics"
                ids = [m["id"] for m in self.rest(base) if ".gpu." in m["id"]]
                if ids:
                    found[subtask] = self.subtask_metrics(job_id, vertex["id"], subtask, ids)
            complete = len(found) == parallelism and all(len(values) == gauges for values in found.values())
            return found if complete else None

        return _wait(
            shown,
            lambda: f"The gauges of {parallelism} subtasks did not show in REST within {timeout:.0f} s (got {found}).",
            timeout,
            1.0,
        )

    def subtask_metrics(self, job_id: str, vertex_id: str, subtask: int, ids: "Sequence[str]") -> "dict[str, str]":
        """The values (strings) of those metric ids that subtask ``subtask`` of the vertex has now."""
        query = ",".join(ids)
        values = self.rest(f"/jobs/{job_id}/vertices/{vertex_id}/subtasks/{subtask}/metrics?get={query}")
        return {entry["id"]: entry["value"] for entry in values}
