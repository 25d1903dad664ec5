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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flink_gpu.deploy.local_cluster import START_TIMEOUT_S, LocalCluster, flink_home, gpu_resource
from flink_gpu.deploy.taskmanager_env import discovery_executable, taskmanager_environment
from flink_gpu.errors import LocalClusterError

HERE = Path(__file__).resolve().parent
JOB = HERE / "gpu_inference_job.py"
OPERATOR = "infer"  # gpu_inference_job.OPERATOR
# per GPU: README, "GPU gauges"; memoryLimit because each slot asks MEMORY of its GPU
GAUGES = ("utilization", "memoryUsed", "temperature", "power", "health", "memoryLimit")
MEMORY = "4 gb"  # gpu_inference_job.py --memory
BINDINGS_LOG = "bindings.jsonl"  # gpu_inference_job.py --bindings-log, in the work directory


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


def start_cluster(home: Path, work: Path, gpus: int, slots: int, start_timeout: float) -> LocalCluster:
    """Steps 1-3: the configuration with the GPU resource (``slots`` GPUs per TaskManager), lib/, the
    TaskManager's environment (``flink-gpu --simulate N taskmanager-env``); the cluster is not started yet."""
    discovery = discovery_executable()
    if discovery is None:
        sys.exit("flink-gpu-discovery is not installed beside this Python (pip install flink-gpu).")
    conf = {"taskmanager.numberOfTaskSlots": slots, **gpu_resource(slots, work / "gpu-coordination", discovery)}
    return LocalCluster(home, work, conf, env=taskmanager_environment(devices=gpus), start_timeout=start_timeout)


def bring_up(cluster: LocalCluster, slots: int) -> None:
    say(f"== bin/start-cluster.sh (FLINK_CONF_DIR={cluster.conf_dir})")
    cluster.start()
    (taskmanager, *_) = cluster.wait_for_free_slots(slots, what="the cluster to come up")
    say(
        f"   TaskManager {taskmanager['id']} registered, {taskmanager['slotsNumber']} slots "
        f"({taskmanager['freeSlots']} free); JobManager RPC port {cluster.rpc_port}, "
        f"web UI http://localhost:{cluster.rest_port}"
    )


def run_job(cluster: LocalCluster, mode: str, parallelism: int, seconds: float) -> None:
    """Step 4: the job in ``mode``; while it runs, its gauges from REST and the bindings from flink-gpu list."""
    cluster.wait_for_free_slots(parallelism, what=f"the slots of the {mode}-mode job")
    say(f"\n== flink run -d -py {JOB.name} --mode {mode} --parallelism {parallelism}")
    job_id = cluster.submit_python_job(
        JOB,
        ["--mode", mode, "--parallelism", str(parallelism), "--seconds", str(seconds), "--memory", MEMORY]
        + ["--bindings-log", str(cluster.work / BINDINGS_LOG)],
    )
    gauges = cluster.gpu_gauges(job_id, OPERATOR, parallelism, len(GAUGES), timeout=seconds + cluster.start_timeout)
    for subtask, values in sorted(gauges.items()):
        say(f"   subtask {subtask}: " + ", ".join(f"{name} {value}" for name, value in sorted(values.items())))
    # `flink-gpu list` finds the coordination file through FLINK_CONF_DIR, as in a shell set up for the cluster
    say("   flink-gpu list (the bindings section):")
    listing = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list"], env=cluster.env, capture_output=True, text=True, timeout=120
    )
    bindings = listing.stdout.split("Bindings", 1)
    say("     Bindings" + bindings[1].rstrip().replace("\n", "\n     ") if len(bindings) > 1 else listing.stdout)
    state = cluster.wait_for_job_end(job_id, timeout=seconds + cluster.start_timeout)
    say(f"   job {job_id}: {state}")
    if state != "FINISHED":
        raise RuntimeError(f"The {mode}-mode job ended {state}:\n{cluster.job_failure(job_id)}")


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


def stop(cluster: LocalCluster) -> None:
    """Step 5: bin/stop-cluster.sh, then whatever of the cluster is left, killed by pid."""
    if not cluster.stops:
        return
    jvms = cluster.stop(say=say_while_stopping)
    say_while_stopping(f"   stopped: {', '.join(f'pid {pid}' for pid in jvms) or 'nothing was running'}")


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
    try:
        home = flink_home(args.flink_home)
    except LocalClusterError as error:
        sys.exit(str(error))
    # SIGTERM and SIGHUP unwind like Ctrl-C, through the `finally` that stops the cluster
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="flink-gpu-example-"))
    cluster = None
    status = 0
    try:
        work.mkdir(parents=True, exist_ok=True)
        cluster = start_cluster(home, work, args.gpus, args.slots, args.start_timeout)
        bring_up(cluster, args.slots)
        for mode in args.modes.split(","):
            run_job(cluster, mode, parallelism=args.slots, seconds=args.seconds)
        say("\n== the TaskManager's log: one line per binding")
        for line in cluster.log_lines(r"Bound .* to .* of the TaskManager"):
            say(f"   {line}")
        say(
            "\n== when each GPU was bound and released (a binding ends at close(); the next subtask binds the\n"
            "   GPU again: the same GPU under another holder, later, is reuse, not sharing)"
        )
        for line in binding_timeline(cluster.work / BINDINGS_LOG):
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
            stop(cluster)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say_while_stopping(f"   kept {work}")
    return status


if __name__ == "__main__":
    sys.exit(main())
