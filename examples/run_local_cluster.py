"""Start a local standalone Flink cluster on simulated GPUs, run gpu_inference_job.py on it in process
and in thread mode, print the bindings and the GPU gauges, and stop everything it started.

    python examples/run_local_cluster.py [--gpus 4] [--slots 2] [--seconds 12] [--keep DIR]

Needs ``pip install apache-flink`` (its wheel carries a Flink distribution: bin/, lib/, opt/,
plugins/external-resource-gpu) and Java 11 or later. Nothing outside a temporary directory is written
(``--keep DIR`` writes there instead and keeps it: configuration, logs, coordination file). The steps
are those of docs/flink-cluster.md:

1. ``conf/config.yaml``: the distribution's own (its JVM options), plus the GPU resource: Flink's
   Java GPU plugin running ``flink-gpu-discovery`` in coordination mode, ``amount`` GPUs per
   TaskManager, ``slots`` slots.
2. A ``lib/`` of the distribution's jars plus ``opt/flink-python-*.jar`` (thread mode runs a
   second job on a Java 17 TaskManager only with flink-python in lib/), through ``FLINK_LIB_DIR``.
3. The TaskManager's environment: what ``flink-gpu --simulate N taskmanager-env`` prints (the
   simulator, ``CUDA_DEVICE_ORDER``, ``PYTHONPATH`` for thread mode), then ``bin/start-cluster.sh``.
4. ``flink run -d -py gpu_inference_job.py`` per mode; while it runs, the gauges from REST and the
   bindings from ``flink-gpu list``; the "Bound ..." lines from the TaskManager's log.
5. ``bin/stop-cluster.sh``, then whatever of its processes is left is killed by pid.
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
GAUGES = ("utilization", "memoryUsed", "temperature", "power", "health")  # per GPU: README, "GPU gauges"


def flink_home() -> Path:
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


def write_configuration(home: Path, work: Path, gpus_per_taskmanager: int, slots: int, rest_port: int) -> Path:
    """conf/: the distribution's config.yaml flattened, with the GPU resource; log4j files; masters, workers."""
    from flink_gpu import Configuration
    from flink_gpu.taskmanager_env import discovery_executable

    discovery = discovery_executable()
    if discovery is None:
        sys.exit("flink-gpu-discovery is not installed beside this Python (pip install flink-gpu).")
    conf = Configuration.from_yaml(home / "conf" / "config.yaml").to_dict()
    conf.update(
        {
            "rest.port": rest_port,
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
    (conf_dir / "masters").write_text(f"localhost:{rest_port}\n")  # start-cluster.sh passes this port on
    (conf_dir / "workers").write_text("localhost\n")
    return conf_dir


def lib_dir(home: Path, work: Path) -> Path:
    lib = work / "lib"
    lib.mkdir()
    for jar in sorted((home / "lib").glob("*.jar")) + sorted((home / "opt").glob("flink-python*.jar")):
        (lib / jar.name).symlink_to(jar)
    return lib


class Cluster:
    def __init__(self, home: Path, work: Path, gpus: int, gpus_per_taskmanager: int, slots: int):
        from flink_gpu.taskmanager_env import taskmanager_environment

        self.home, self.work = home, work
        self.rest_port = free_port()
        self.conf_dir = write_configuration(home, work, gpus_per_taskmanager, slots, self.rest_port)
        self.coordination_file = work / "gpu-coordination"
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

    def bin(self, script: str, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(self.home / "bin" / script), *args],
            env=self.env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"bin/{script} {' '.join(args)} exited with {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def rest(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"http://localhost:{self.rest_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
        return json.loads(body) if body else None

    def start(self, timeout: float = 120) -> None:
        print(f"== bin/start-cluster.sh (FLINK_CONF_DIR={self.conf_dir})", flush=True)
        self.bin("start-cluster.sh")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                taskmanagers = self.rest("/taskmanagers")["taskmanagers"]
                if taskmanagers:
                    print(
                        f"   TaskManager {taskmanagers[0]['id']} registered, {taskmanagers[0]['slotsNumber']} slots, "
                        f"web UI http://localhost:{self.rest_port}",
                        flush=True,
                    )
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass  # not up yet
            time.sleep(1)
        raise TimeoutError(
            f"The cluster did not come up within {timeout:.0f} s; logs: {self.log_dir}\n{self.log_tail()}"
        )

    def pids(self) -> "list[int]":
        """The JVMs of the cluster, from Flink's pid files."""
        found = []
        for pid_file in self.work.glob("flink-*.pid"):
            found += [int(line) for line in pid_file.read_text().split() if line.isdigit()]
        return found

    def stop(self) -> None:
        pids = self.pids()
        print("== bin/stop-cluster.sh", flush=True)
        self.bin("stop-cluster.sh", check=False)
        deadline = time.monotonic() + 30
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        print(f"   stopped: {', '.join(f'pid {pid}' for pid in pids) or 'nothing was running'}", flush=True)

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            text = path.read_text(errors="replace").splitlines()
            parts.append(f"--- {path} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    # -- a job ----------------------------------------------------------------------------------

    def run_job(self, mode: str, parallelism: int, seconds: float) -> None:
        print(f"\n== flink run -d -py {JOB.name} --mode {mode} --parallelism {parallelism}", flush=True)
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
            timeout=300,
        )
        found = re.search(r"JobID ([0-9a-f]{32})", proc.stdout)
        if found is None:
            raise RuntimeError(f"flink run printed no job id:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        job_id = found.group(1)
        gauges = self.wait_for_gauges(job_id, parallelism, timeout=seconds + 60)
        for subtask, values in sorted(gauges.items()):
            print(f"   subtask {subtask}: " + ", ".join(f"{name} {value}" for name, value in sorted(values.items())))
        # `flink-gpu list` finds the coordination file through FLINK_CONF_DIR, as in a shell set up for the cluster
        print("   flink-gpu list (the bindings section):")
        listing = subprocess.run(
            [sys.executable, "-m", "flink_gpu.cli", "list"], env=self.env, capture_output=True, text=True, timeout=60
        )
        bindings = listing.stdout.split("Bindings", 1)
        print("     Bindings" + bindings[1].rstrip().replace("\n", "\n     ") if len(bindings) > 1 else listing.stdout)
        state = self.wait_for_end(job_id, timeout=seconds + 120)
        print(f"   job {job_id}: {state}")
        if state != "FINISHED":
            raise RuntimeError(f"The {mode}-mode job ended {state}:\n{self.job_failure(job_id)}")

    def wait_for_gauges(self, job_id: str, parallelism: int, timeout: float) -> "dict[int, dict[str, str]]":
        """Per subtask, its "<operator>.gpu.<index>.<gauge>" values, once every subtask has all four."""
        deadline = time.monotonic() + timeout
        found: "dict[int, dict[str, str]]" = {}
        while time.monotonic() < deadline:
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
            state = self.rest(f"/jobs/{job_id}/status")["status"]
            if state in ("FINISHED", "FAILED", "CANCELED"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"Job {job_id} did not end within {timeout:.0f} s.")

    def job_failure(self, job_id: str) -> str:
        entries = self.rest(f"/jobs/{job_id}/exceptions").get("exceptionHistory", {}).get("entries", [])
        return entries[0].get("stacktrace", "") if entries else "(no exception recorded)"

    def binding_lines(self) -> "list[str]":
        """The "Bound ..." INFO lines of flink_gpu.pyflink in the TaskManager's log files."""
        lines = []
        for path in sorted(self.log_dir.glob("*taskexecutor*")):
            lines += [
                line.strip()
                for line in path.read_text(errors="replace").splitlines()
                if "Bound " in line and "to " in line and "of the TaskManager" in line
            ]
        return lines


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
    args = parser.parse_args(argv)
    home = flink_home()
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="flink-gpu-example-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(home, work, args.gpus, gpus_per_taskmanager=args.slots, slots=args.slots)
    try:
        cluster.start()
        for mode in args.modes.split(","):
            cluster.run_job(mode, parallelism=args.slots, seconds=args.seconds)
        print("\n== the TaskManager's log: one line per binding")
        for line in cluster.binding_lines():
            print(f"   {line}")
    except (RuntimeError, TimeoutError) as error:
        print(f"run_local_cluster: {error}\nlogs: {cluster.log_dir}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"   kept {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
