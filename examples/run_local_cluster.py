"""Start a local standalone Flink cluster on simulated GPUs, run gpu_inference_job.py on it in process
and in thread mode, print the bindings and the GPU gauges, and stop everything it started.

    python examples/run_local_cluster.py [--gpus 4] [--slots 2] [--seconds 12] [--modes process,thread]
        [--keep DIR] [--start-timeout 300] [--flink-home DIR]

Needs ``pip install apache-flink`` (its wheel carries a Flink distribution: bin/, lib/, opt/,
plugins/external-resource-gpu; ``--flink-home`` or ``$FLINK_HOME`` names another one) and Java 11 or
later. Each wait for the cluster ends as soon as what it waits for is there (``--start-timeout``
is only its bound) and says what it saw last; a JVM of the cluster that exits ends it at once.
Nothing outside a temporary directory is written (``--keep DIR`` writes there instead and keeps
it: configuration, logs, coordination file), and the cluster takes free ports, not Flink's 6123 and
8081 (a cluster of yours keeps running). Whichever way the script ends (an error, Ctrl-C, SIGTERM,
SIGHUP, its output piped into ``head`` that exits), it stops the processes it started and removes its
temporary directory. The steps are those of docs/flink-cluster.md:

1. ``conf/config.yaml``: the distribution's own (its JVM options), plus the GPU resource: Flink's
   Java GPU plugin running ``flink-gpu-discovery`` in coordination mode, ``amount`` GPUs per
   TaskManager, ``slots`` slots.
2. A ``lib/`` of the distribution's jars plus ``opt/flink-python-*.jar`` unless lib/ has it already
   (thread mode runs a second job on a Java 17 TaskManager only with flink-python in lib/), through
   ``FLINK_LIB_DIR``.
3. The TaskManager's environment: what ``flink-gpu --simulate N taskmanager-env`` prints (the
   simulator, ``CUDA_DEVICE_ORDER``, ``PYTHONPATH`` for thread mode), then ``bin/start-cluster.sh``,
   and a wait until the TaskManager has registered all of its slots, free.
4. ``flink run -d -py gpu_inference_job.py --memory "4 gb"`` per mode, once the slots it needs are
   free; while it runs, the gauges from REST and the bindings from ``flink-gpu list``. Then, from the TaskManager's
   logs, when each binding began and ended: a binding ends at the subtask's ``close()``, and a GPU
   released there is bound again by the next subtask (the same GPU under another holder, later:
   reuse, not sharing).
5. ``bin/stop-cluster.sh``, then whatever of its processes is left (found by its configuration
   directory on their command lines, and by Flink's pid files) is killed by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "gpu_inference_job.py"
OPERATOR = "infer"  # gpu_inference_job.OPERATOR
# per GPU: README, "GPU gauges"; memoryLimit because each slot asks MEMORY of its GPU
GAUGES = ("utilization", "memoryUsed", "temperature", "power", "health", "memoryLimit")
MEMORY = "4 gb"  # gpu_inference_job.py --memory
# The upper bound of each wait for the cluster (--start-timeout; a wait ends as soon as what it waits
# for is there): a JVM that starts in 5 s on an idle machine takes a minute or more on two loaded cores.
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 120


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived: the script unwinds (stopping the cluster) as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum, frame):
    raise Interrupted(signum)


def say(*parts: object, err: bool = False) -> None:
    """print() that survives a reader that went away (``| head``): later output goes to /dev/null,
    and the BrokenPipeError goes up once so that the script stops."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(*parts, file=stream, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        raise


def say_while_stopping(*parts: object) -> None:
    try:
        say(*parts)
    except BrokenPipeError:
        pass  # nobody reads any more; stopping goes on


def flink_home(given: "str | None") -> Path:
    if given:
        home = Path(given).resolve()
    else:
        try:
            import pyflink
        except ImportError:
            sys.exit("This example needs a Flink distribution: pip install apache-flink")
        home = Path(pyflink.__file__).resolve().parent
    if not (home / "bin" / "start-cluster.sh").is_file():
        sys.exit(f"{home} has no bin/start-cluster.sh: pip install apache-flink (with apache-flink-libraries)")
    if shutil.which("java") is None:
        sys.exit("This example needs Java 11 or later on PATH (Flink runs on the JVM).")
    return home


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_configuration(home: Path, work: Path, gpus_per_taskmanager: int, slots: int, ports: "dict[str, int]") -> Path:
    """conf/: the distribution's config.yaml flattened, with the GPU resource; log4j files; masters, workers."""
    from flink_gpu import Configuration
    from flink_gpu.deploy.taskmanager_env import discovery_executable

    discovery = discovery_executable()
    if discovery is None:
        sys.exit("flink-gpu-discovery is not installed beside this Python (pip install flink-gpu).")
    conf = Configuration.from_yaml(home / "conf" / "config.yaml").to_dict()
    conf.update(
        {
            **ports,
            "taskmanager.numberOfTaskSlots": slots,
            "taskmanager.memory.process.size": "1536m",
            "jobmanager.memory.process.size": "1024m",
            "metrics.fetcher.update-interval": 1000,  # REST shows new metric values after at most 1 s
            "external-resources": "gpu",
            "external-resource.gpu.amount": gpus_per_taskmanager,
            "external-resource.gpu.driver-factory.class": "org.apache.flink.externalresource.gpu.GPUDriverFactory",
            "external-resource.gpu.param.discovery-script.path": discovery,
            "external-resource.gpu.param.discovery-script.args": (
                f"--enable-coordination-mode --coordination-file {work / 'gpu-coordination'}"
            ),
        }
    )
    conf_dir = work / "conf"
    conf_dir.mkdir(parents=True)
    with open(conf_dir / "config.yaml", "w") as f:
        for key, value in sorted(conf.items()):
            f.write(f"{key}: {json.dumps(str(value))}\n")  # a JSON string is a YAML string
    for pattern in ("log4j*.properties", "logback*.xml"):
        for source in (home / "conf").glob(pattern):
            shutil.copy(source, conf_dir / source.name)
    (conf_dir / "masters").write_text(f"localhost:{ports['rest.port']}\n")  # start-cluster.sh passes this port on
    (conf_dir / "workers").write_text("localhost\n")
    return conf_dir


def lib_dir(home: Path, work: Path) -> Path:
    """lib's jars, and opt's flink-python unless lib has one already (as docs/flink-cluster.md advises)."""
    lib = work / "lib"
    lib.mkdir()
    jars = sorted((home / "lib").glob("*.jar"))
    if not any(jar.name.startswith("flink-python") for jar in jars):
        jars += sorted((home / "opt").glob("flink-python*.jar"))
    for jar in jars:
        (lib / jar.name).symlink_to(jar)
    return lib


class Cluster:
    def __init__(self, home: Path, work: Path, gpus: int, gpus_per_taskmanager: int, slots: int, start_timeout: float):
        from flink_gpu.deploy.taskmanager_env import taskmanager_environment

        self.home, self.work, self.slots, self.start_timeout = home, work, slots, start_timeout
        self.rest_port, self.rpc_port = free_port(), free_port()
        ports = {"rest.port": self.rest_port, "jobmanager.rpc.port": self.rpc_port}
        self.conf_dir = write_configuration(home, work, gpus_per_taskmanager, slots, ports)
        self.coordination_file = work / "gpu-coordination"
        self.bindings_log = work / "bindings.jsonl"  # gpu_inference_job.py --bindings-log
        self.log_dir = work / "log"
        self.log_dir.mkdir(exist_ok=True)  # flink-daemon.sh writes into it but does not create it
        # what `eval "$(flink-gpu --simulate N taskmanager-env)"` would export in a shell
        self.env = {
            **os.environ,
            **taskmanager_environment(devices=gpus),
            "FLINK_HOME": str(home),
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LOG_DIR": str(self.log_dir),
            "FLINK_PID_DIR": str(work),
            "FLINK_LIB_DIR": str(lib_dir(home, work)),
        }
        self.started = False
        self.groups: "set[int]" = set()  # the process groups of the bin/ scripts run

    def bin(self, script: str, *args: str, timeout: "float | None" = None, check: bool = True):
        """Runs a script of bin/ in a process group of its own: what it starts in the background (the
        JVMs) stays in that group, which :meth:`pids` finds even when the script was cut short."""
        with subprocess.Popen(
            [str(self.home / "bin" / script), *args],
            env=self.env,
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
            raise RuntimeError(
                f"bin/{script} {' '.join(args)} exited with {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
            )
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def rest(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"http://localhost:{self.rest_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
        return json.loads(body) if body else None

    def start(self) -> None:
        say(f"== bin/start-cluster.sh (FLINK_CONF_DIR={self.conf_dir})")
        self.started = True  # from here on, stop() looks for its processes
        self.bin("start-cluster.sh")
        taskmanager = self.wait_for_free_slots(self.slots, what="the cluster to come up")
        say(
            f"   TaskManager {taskmanager['id']} registered, {taskmanager['slotsNumber']} slots "
            f"({taskmanager['freeSlots']} free); JobManager RPC port {self.rpc_port}, "
            f"web UI http://localhost:{self.rest_port}"
        )

    def wait_for_free_slots(self, slots: int, what: str, timeout: "float | None" = None) -> dict:
        """The TaskManager once it has registered ``slots`` free slots (a TaskManager is listed before
        its slots are reported, and a finished job's slots are freed a moment after it ends). A JVM
        of the cluster that exits ends the wait at once; the wait's bound says what was seen last."""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        seen = "the REST API did not answer"
        while True:
            self.check_daemons(f"{what} ({slots} free slots)", seen)
            try:
                taskmanagers = self.rest("/taskmanagers")["taskmanagers"]
                if not taskmanagers:
                    seen = "the JobManager answered, no TaskManager had registered"
                for taskmanager in taskmanagers:
                    if taskmanager.get("freeSlots", 0) >= slots:
                        return taskmanager
                    seen = (
                        f"TaskManager {taskmanager['id']} had registered {taskmanager.get('slotsNumber', 0)} "
                        f"slots, {taskmanager.get('freeSlots', 0)} of them free"
                    )
            except (urllib.error.URLError, OSError, ValueError) as error:
                seen = f"the REST API on port {self.rest_port} did not answer ({error})"
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Waited {timeout:.0f} s for {what} ({slots} free slots); at the end {seen}.\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def check_daemons(self, what: str, seen: str) -> None:
        """Ends a wait at once, saying why, when a JVM of the cluster has exited (nothing would come)."""
        exited = [f"{role} (pid {pid})" for role, pid in self.daemons() if not _alive(pid)]
        if exited:
            raise RuntimeError(
                f"While waiting for {what}, the {' and the '.join(exited)} of the cluster exited; "
                f"at that time {seen}.\n{self.log_tail()}"
            )

    def daemons(self) -> "list[tuple[str, int]]":
        """(role, pid) of each JVM that start-cluster.sh started, from Flink's pid files
        (``flink-<user>-<role>.pid``, written as each is launched)."""
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

    def pids(self) -> "list[int]":
        """The live processes of the cluster: those of Flink's pid files, every JVM whose command line
        names this work directory (its conf or log dir), and what is left in the process groups of
        the bin/ scripts (a JVM whose pid file an interrupted start-cluster.sh had not written yet,
        the scripts themselves, process-mode Python workers)."""
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

    def stop(self) -> None:
        if not self.started:
            return
        pids = set(self.pids())
        jvms = {pid for pid in pids if _is_jvm(pid)}  # what "stopped:" names
        say_while_stopping("== bin/stop-cluster.sh")
        try:
            self.bin("stop-cluster.sh", check=False, timeout=STOP_TIMEOUT_S)
        except (subprocess.TimeoutExpired, OSError) as error:
            say_while_stopping(f"   bin/stop-cluster.sh did not finish ({error}); killing the JVMs")
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while True:
            found = self.pids()
            jvms.update(pid for pid in found if pid not in pids and _is_jvm(pid))
            pids.update(found)
            left = [pid for pid in pids if _alive(pid)]
            if not left:
                break
            if time.monotonic() > deadline:
                for pid in left:  # SIGKILL cannot be refused: they end at once
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
        say_while_stopping(f"   stopped: {', '.join(f'pid {pid}' for pid in sorted(jvms)) or 'nothing was running'}")

    def log_tail(self, lines: int = 80) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            text = path.read_text(errors="replace").splitlines()
            parts.append(
                f"--- {path} (last {min(lines, len(text))} of {len(text)} lines) ---\n" + "\n".join(text[-lines:])
            )
        return "\n".join(parts) or f"(no log in {self.log_dir})"

    # -- a job ----------------------------------------------------------------------------------

    def run_job(self, mode: str, parallelism: int, seconds: float) -> None:
        self.wait_for_free_slots(parallelism, what=f"the slots of the {mode}-mode job")
        say(f"\n== flink run -d -py {JOB.name} --mode {mode} --parallelism {parallelism}")
        proc = self.bin(
            "flink",
            "run",
            "-d",
            "-pyclientexec",
            sys.executable,
            "-pyexec",
            sys.executable,
            "-py",
            str(JOB),
            "--mode",
            mode,
            "--parallelism",
            str(parallelism),
            "--seconds",
            str(seconds),
            "--memory",
            MEMORY,
            "--bindings-log",
            str(self.bindings_log),
        )
        found = re.search(r"JobID ([0-9a-f]{32})", proc.stdout)
        if found is None:
            raise RuntimeError(f"flink run printed no job id:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        job_id = found.group(1)
        gauges = self.wait_for_gauges(job_id, parallelism, timeout=seconds + self.start_timeout)
        for subtask, values in sorted(gauges.items()):
            say(f"   subtask {subtask}: " + ", ".join(f"{name} {value}" for name, value in sorted(values.items())))
        # `flink-gpu list` finds the coordination file through FLINK_CONF_DIR, as in a shell set up for the cluster
        say("   flink-gpu list (the bindings section):")
        listing = subprocess.run(
            [sys.executable, "-m", "flink_gpu.cli", "list"], env=self.env, capture_output=True, text=True, timeout=120
        )
        bindings = listing.stdout.split("Bindings", 1)
        say("     Bindings" + bindings[1].rstrip().replace("\n", "\n     ") if len(bindings) > 1 else listing.stdout)
        state = self.wait_for_end(job_id, timeout=seconds + self.start_timeout)
        say(f"   job {job_id}: {state}")
        if state != "FINISHED":
            raise RuntimeError(f"The {mode}-mode job ended {state}:\n{self.job_failure(job_id)}")

    def wait_for_gauges(self, job_id: str, parallelism: int, timeout: float) -> "dict[int, dict[str, str]]":
        """Per subtask, its "<operator>.gpu.<index>.<gauge>" values, once every subtask has all of GAUGES."""
        deadline = time.monotonic() + timeout
        found: "dict[int, dict[str, str]]" = {}
        while time.monotonic() < deadline:
            self.check_daemons(f"the gauges of job {job_id}", f"the gauges of {len(found)} subtasks had shown")
            state = self.rest(f"/jobs/{job_id}/status")["status"]
            if state in ("FAILED", "CANCELED", "FINISHED"):
                raise RuntimeError(
                    f"The job ended {state} before its gauges showed in REST:\n{self.job_failure(job_id)}"
                )
            vertices = [v for v in self.rest(f"/jobs/{job_id}")["vertices"] if OPERATOR in v["name"].split(" -> ")]
            for vertex in vertices:
                for subtask in range(parallelism):
                    base = f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{subtask}/metrics"
                    ids = [m["id"] for m in self.rest(base) if ".gpu." in m["id"]]
                    if ids:
                        values = self.rest(f"{base}?get={','.join(ids)}")
                        found[subtask] = {entry["id"]: entry["value"] for entry in values}
            if len(found) == parallelism and all(len(values) == len(GAUGES) for values in found.values()):
                return found
            time.sleep(1)
        raise TimeoutError(
            f"The gauges of {parallelism} subtasks did not show in REST within {timeout:.0f} s (got {found})."
        )

    def wait_for_end(self, job_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_daemons(f"the end of job {job_id}", "it was running")
            state = self.rest(f"/jobs/{job_id}/status")["status"]
            if state in ("FINISHED", "FAILED", "CANCELED"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"Job {job_id} did not end within {timeout:.0f} s.")

    def job_failure(self, job_id: str, timeout: float = 60) -> str:
        """The failed job's first exception (the JobManager records it a moment after the job ends)."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.rest(f"/jobs/{job_id}/exceptions").get("exceptionHistory", {}).get("entries", [])
            if entries:
                return entries[0].get("stacktrace", "")
            if time.monotonic() > deadline:
                return f"(the JobManager recorded no exception within {timeout:.0f} s)\n{self.log_tail()}"
            time.sleep(0.5)

    def log_lines(self, pattern: str) -> "list[str]":
        """The lines of the TaskManager's log files (.log, and .out where thread mode's Python
        writes) that match ``pattern``."""
        lines = []
        for path in sorted(self.log_dir.glob("*taskexecutor*")):
            lines += [
                line.strip() for line in path.read_text(errors="replace").splitlines() if re.search(pattern, line)
            ]
        return lines


def binding_timeline(path: Path) -> "list[str]":
    """gpu_inference_job's bind and release events (``--bindings-log``), by time."""
    try:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return [f"(no {path}: no subtask bound a GPU)"]
    return [
        f"{time.strftime('%H:%M:%S', time.localtime(e['at']))}.{int(e['at'] * 1000) % 1000:03d}  "
        f"GPU {e['gpus']} {e['event']:<8} {e['holder']} ({OPERATOR} subtask {e['subtask']})"
        for e in sorted(events, key=lambda e: e["at"])
    ]


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


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=4, help="simulated GPUs of the host (default: 4)")
    parser.add_argument("--slots", type=int, default=2, help="slots of the TaskManager, one GPU each (default: 2)")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long each job runs (default: 12)")
    parser.add_argument(
        "--modes", default="process,thread", help="the execution modes to run (default: process,thread)"
    )
    parser.add_argument(
        "--keep", metavar="DIR", default=None, help="work in DIR and keep it (configuration, logs, coordination file)"
    )
    parser.add_argument(
        "--start-timeout",
        metavar="S",
        type=float,
        default=START_TIMEOUT_S,
        help=f"the longest wait for the cluster, its slots and each job's steps (default: {START_TIMEOUT_S})",
    )
    parser.add_argument(
        "--flink-home",
        metavar="DIR",
        default=os.environ.get("FLINK_HOME"),
        help="the Flink distribution (default: $FLINK_HOME, else the one in the apache-flink package)",
    )
    args = parser.parse_args(argv)
    home = flink_home(args.flink_home)
    # SIGTERM and SIGHUP unwind like Ctrl-C, through the `finally` that stops the cluster
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="flink-gpu-example-"))
    cluster = None
    status = 0
    try:
        work.mkdir(parents=True, exist_ok=True)
        cluster = Cluster(
            home, work, args.gpus, gpus_per_taskmanager=args.slots, slots=args.slots, start_timeout=args.start_timeout
        )
        cluster.start()
        for mode in args.modes.split(","):
            cluster.run_job(mode, parallelism=args.slots, seconds=args.seconds)
        say("\n== the TaskManager's log: one line per binding")
        for line in cluster.log_lines(r"Bound .* to .* of the TaskManager"):
            say(f"   {line}")
        say(
            "\n== when each GPU was bound and released (a binding ends at close(); the next subtask binds the\n"
            "   GPU again: the same GPU under another holder, later, is reuse, not sharing)"
        )
        for line in binding_timeline(cluster.bindings_log):
            say(f"   {line}")
    except (RuntimeError, TimeoutError, OSError) as error:
        if isinstance(error, BrokenPipeError):
            status = 128 + signal.SIGPIPE  # the reader went away (`| head`): stop quietly, as a shell tool would
        else:
            status = 1
            try:
                say(f"run_local_cluster: {error}" + (f"\nlogs: {cluster.log_dir}" if cluster else ""), err=True)
            except BrokenPipeError:
                pass
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except Interrupted as interrupted:
        status = 128 + interrupted.signum
    finally:
        # a second Ctrl-C or SIGTERM must not cut the clean-up short
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if status > 128:
            say_while_stopping(f"\nrun_local_cluster: {signal.Signals(status - 128).name}: stopping the cluster")
        if cluster is not None:
            cluster.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say_while_stopping(f"   kept {work}")
    return status


if __name__ == "__main__":
    sys.exit(main())
