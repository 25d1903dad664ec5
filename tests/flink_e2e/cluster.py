"""A real standalone Flink cluster (JobManager + TaskManagers) from the apache-flink wheel's bin/.

Each process gets its own conf dir (its own FLINK_CONF_DIR), log dir and pid dir under one work
directory; the JVMs run in the foreground (``start-foreground`` execs the JVM, so the pid we spawn
is the JVM's) in their own process groups, and :meth:`StandaloneCluster.stop` ends them by pid
whatever state they are in.

Every process (and the ``flink run`` client) takes its jars from one lib directory of the work
directory: the distribution's ``lib/`` plus ``opt/flink-python``. PyFlink ships flink-python with
each job, so without it in ``lib/`` each job loads pemja (thread mode's embedded CPython) in its own
user-code class loader; the JVM then refuses pemja's native library to every later job's class loader
("already loaded in another classloader"), and pemja's fallback fails on Java 17
(``NoSuchFieldException: loadedLibraryNames``): a TaskManager could run one thread-mode job only.
From ``lib/`` (parent-first, as everything under ``org.apache.flink``) it is loaded once per JVM.

REST metrics (docs: Flink's REST API): ``/jobs/<jid>/vertices/<vid>/subtasks/<i>/metrics`` lists the
subtask's metric ids, ``?get=<id>,<id>`` gives their values (strings; ids it does not know are left
out, so a test polls until all are there). A user metric's id is ``<operator name>.<groups>.<name>``;
a key-value group ``add_group("gpu", "0")`` contributes both parts (``gpu.0``), and the query service
replaces ``.``, ``,``, `` `` and ``:`` inside each part with ``_``. The JobManager fetches metrics from
the TaskManagers at most every ``metrics.fetcher.update-interval`` (10 s by default; 1 s here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from typing_extensions import Self


def flink_home() -> Path:
    """The Flink distribution inside the installed ``apache-flink`` wheel (``pyflink/``)."""
    import pyflink

    home = Path(pyflink.__file__).resolve().parent
    if not (home / "bin" / "jobmanager.sh").is_file():
        raise RuntimeError(f"{home} has no bin/jobmanager.sh: is apache-flink-libraries installed?")
    return home


def lib_dir(home: Path, work_dir: Path) -> Path:
    """``work_dir/lib``: links to the distribution's ``lib/*.jar`` and ``opt/flink-python*.jar``
    (why: the module docstring)."""
    lib = work_dir / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    jars = sorted((home / "lib").glob("*.jar")) + sorted((home / "opt").glob("flink-python*.jar"))
    if not any(jar.name.startswith("flink-python") for jar in jars):
        raise RuntimeError(f"{home / 'opt'} has no flink-python*.jar: is apache-flink-libraries installed?")
    for jar in jars:
        link = lib / jar.name
        if not link.is_symlink():
            link.symlink_to(jar)
    return lib


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _java_opts(home: Path) -> str:
    """The JVM flags of the distribution's own config.yaml (Java 17 needs its --add-opens)."""
    with open(home / "conf" / "config.yaml") as f:
        default = yaml.safe_load(f)
    return default["env"]["java"]["opts"]["all"]


class FlinkProcess:
    def __init__(self, role: str, popen: subprocess.Popen, conf_dir: Path, log_dir: Path, console: Path):
        self.role = role
        self.popen = popen
        self.work_dir = console.parent  # its working directory: where a JVM crash report lands
        self.conf_dir = conf_dir
        self.log_dir = log_dir
        self.console = console

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = 60) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*")) + [self.console]:
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()
                parts.append(f"--- {path} (last {min(lines, len(text))} of {len(text)} lines) ---")
                parts.extend(text[-lines:])
        return "\n".join(parts)


class StandaloneCluster:
    """JobManager plus TaskManagers on this host; ``with StandaloneCluster(...) as c:`` stops it."""

    def __init__(self, work_dir: Path, base_conf: dict, taskmanagers: list[dict]):
        """``base_conf``: flat keys for every process; ``taskmanagers``: per TaskManager a dict
        with ``conf`` (extra flat keys) and ``env`` (extra environment variables)."""
        self.home = flink_home()
        self.work_dir = Path(work_dir)
        self.rpc_port = free_port()
        self.rest_port = free_port()
        self.java_opts = _java_opts(self.home)
        self.base_conf = {
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.bind-host": "localhost",
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": self.rest_port,
            "taskmanager.host": "localhost",
            "taskmanager.bind-host": "localhost",
            "env.java.opts.all": self.java_opts,
            # small: 2 cores and 24 GiB shared with other work
            "jobmanager.memory.process.size": "1024m",
            # a test that reads metrics from REST waits about this long for each update
            "metrics.fetcher.update-interval": 1000,
            "taskmanager.memory.process.size": "1536m",
            "parallelism.default": 1,
            **base_conf,
        }
        self.taskmanager_specs = taskmanagers
        self.lib_dir: Path | None = None
        self.jobmanager: FlinkProcess | None = None
        self.taskmanagers: list[FlinkProcess] = []

    # -- configuration ---------------------------------------------------------------------------

    def write_conf(self, name: str, extra: dict | None = None) -> Path:
        conf_dir = self.work_dir / name / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        for pattern in ("log4j*.properties", "logback*.xml"):
            for source in (self.home / "conf").glob(pattern):
                (conf_dir / source.name).write_bytes(source.read_bytes())
        conf = {**self.base_conf, **(extra or {})}
        with open(conf_dir / "config.yaml", "w") as f:
            yaml.safe_dump(conf, f, default_flow_style=False, sort_keys=True)
        return conf_dir

    def _env(self, name: str, conf_dir: Path, extra: dict | None = None) -> tuple[dict, Path]:
        log_dir = self.work_dir / name / "log"
        log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            {
                "FLINK_HOME": str(self.home),
                "FLINK_CONF_DIR": str(conf_dir),
                "FLINK_LOG_DIR": str(log_dir),
                "FLINK_PID_DIR": str(self.work_dir / name),
                "FLINK_IDENT_STRING": name,
            }
        )
        if self.lib_dir is not None:
            env["FLINK_LIB_DIR"] = str(self.lib_dir)
        env.update(extra or {})
        return env, log_dir

    def _start(self, role: str, name: str, script: str, conf_extra=None, env_extra=None) -> FlinkProcess:
        conf_dir = self.write_conf(name, conf_extra)
        env, log_dir = self._env(name, conf_dir, env_extra)
        console = self.work_dir / name / "console.out"
        with open(console, "wb") as out:
            popen = subprocess.Popen(
                [str(self.home / "bin" / script), "start-foreground"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir / name,
                start_new_session=True,
            )
        return FlinkProcess(role, popen, conf_dir, log_dir, console)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.lib_dir = lib_dir(self.home, self.work_dir)
        self.jobmanager = self._start("jobmanager", "jobmanager", "jobmanager.sh")
        for number, spec in enumerate(self.taskmanager_specs, start=1):
            name = f"taskmanager-{number}"
            conf = {"taskmanager.resource-id": name, **spec.get("conf", {})}
            self.taskmanagers.append(self._start("taskmanager", name, "taskmanager.sh", conf, spec.get("env")))
        self.wait_for_taskmanagers(len(self.taskmanagers), timeout)

    def processes(self) -> list[FlinkProcess]:
        return ([self.jobmanager] if self.jobmanager else []) + self.taskmanagers

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every JVM, then SIGKILL whatever is left of its process group (Python workers)."""
        for process in self.processes():
            if process.popen.poll() is None:
                try:
                    os.kill(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for process in self.processes():
            try:
                process.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # the group was created for this JVM (start_new_session): its leader's pid names it
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                process.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- REST ------------------------------------------------------------------------------------

    def rest(self, path: str, timeout: float = 10.0, method: str = "GET"):
        url = f"http://localhost:{self.rest_port}{path}"
        request = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode("utf-8")
        return json.loads(body) if body else None

    def _check_alive(self) -> None:
        for process in self.processes():
            code = process.popen.poll()
            if code is not None:
                raise RuntimeError(
                    f"The {process.role} (pid {process.pid}) exited with code {code} during start-up.\n{self.logs()}"
                )

    def wait_for_taskmanagers(self, count: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                registered = self.rest("/taskmanagers").get("taskmanagers", [])
                if len(registered) >= count:
                    return registered
                last_error = f"{len(registered)} of {count} TaskManagers registered"
            except (urllib.error.URLError, OSError, ValueError) as error:  # not up yet; retry
                last_error = f"REST /taskmanagers: {error}"
            time.sleep(1.0)
        raise TimeoutError(f"The Flink cluster did not come up within {timeout:.0f} s ({last_error}).\n{self.logs()}")

    def check_taskmanagers_alive(self) -> None:
        """Raises RuntimeError naming each TaskManager JVM that exited (and its crash report, if any)."""
        dead = [
            f"{tm.role} pid {tm.pid} exited with {tm.popen.returncode}"
            + "".join(f"; crash report {report}" for report in sorted(tm.work_dir.glob("hs_err_pid*.log")))
            for tm in self.taskmanagers
            if tm.popen.poll() is not None
        ]
        if dead:
            raise RuntimeError("; ".join(dead))

    def logs(self, lines: int = 60) -> str:
        return "\n".join(p.log_tail(lines) for p in self.processes())

    # -- jobs ------------------------------------------------------------------------------------

    def client_conf_dir(self) -> Path:
        return self.write_conf("client")

    def submit_python_job(self, script: Path, args: list[str], env: dict | None = None, timeout: float = 300.0) -> str:
        """``flink run -d -py script args``: submits the job detached and returns its job id."""
        conf_dir = self.client_conf_dir()
        run_env, _ = self._env("client", conf_dir, env)
        command = [
            str(self.home / "bin" / "flink"),
            "run",
            "-d",
            "-pyclientexec",
            sys.executable,
            "-pyexec",
            sys.executable,
            "-py",
            str(script),
            *args,
        ]
        proc = subprocess.run(
            command,
            env=run_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.work_dir / "client",
        )
        found = re.search(r"Job has been submitted with JobID ([0-9a-f]{32})", proc.stdout)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(
                f"flink run -d -py {script.name} exited with {proc.returncode} without a job id."
                f"\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
            )
        return found.group(1)

    def job_state(self, job_id: str) -> str:
        """The job's state, from ``/jobs/<jid>/status``: unlike ``/jobs/<jid>`` it does not make the
        JobManager fetch metrics from the TaskManagers. Fetching calls every gauge; PyFlink 2.3's own
        thread-mode gauges call into the task's Python interpreter through pemja, which the task frees
        when it ends while its gauges are still registered, and a fetch at that moment crashes the JVM
        (SIGSEGV in take_gil / _PyEvalFramePushAndInit on a flink-metrics thread). The binding's gauges
        are Java-held values in thread mode, so they cannot; polling the state keeps the tests from
        depending on that."""
        return self.rest(f"/jobs/{job_id}/status")["status"]

    def job_failure(self, job_id: str) -> str:
        """The root exception of a failed job (what the web UI's Exceptions tab shows first)."""
        exceptions = self.rest(f"/jobs/{job_id}/exceptions")
        history = exceptions.get("exceptionHistory", {}).get("entries", [])
        root = history[0].get("stacktrace") if history else None
        return root or json.dumps(exceptions)[:4000]

    def wait_for_job_end(self, job_id: str, timeout: float) -> str:
        """Polls until the job is FINISHED, FAILED or CANCELED and returns that state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state in ("FINISHED", "FAILED", "CANCELED"):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"Job {job_id} is still {state} after {timeout:.0f} s.\n{self.logs(80)}")
            time.sleep(0.5)

    def cancel_job(self, job_id: str) -> None:
        """Cancels the job if it still runs (a failed test must not leave its slots taken)."""
        try:
            if self.job_state(job_id) not in ("FINISHED", "FAILED", "CANCELED"):
                self.rest(f"/jobs/{job_id}?mode=cancel", method="PATCH")
                self.wait_for_job_end(job_id, 60)
        except (urllib.error.URLError, OSError, ValueError, TimeoutError):
            pass  # the cluster is torn down after the tests anyway

    def vertex(self, job_id: str, operator_name: str) -> dict:
        """The job vertex running operator ``operator_name`` (a chain's name joins its operators' with " -> ")."""
        for vertex in self.rest(f"/jobs/{job_id}")["vertices"]:
            if operator_name in vertex["name"].split(" -> "):
                return vertex
        raise LookupError(f"Job {job_id} has no vertex named {operator_name!r}.")

    def subtask_metrics(self, job_id: str, vertex_id: str, subtask: int, ids: list[str]) -> dict[str, str]:
        """The values (strings) of those metric ids that subtask ``subtask`` of the vertex has now."""
        query = ",".join(ids)
        values = self.rest(f"/jobs/{job_id}/vertices/{vertex_id}/subtasks/{subtask}/metrics?get={query}")
        return {entry["id"]: entry["value"] for entry in values}
