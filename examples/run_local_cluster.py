"""Start a local standalone Flink cluster on simulated GPUs, run gpu_inference_job.py on it in process
and in thread mode, print the bindings and the GPU gauges, and stop everything it started.

    python examples/run_local_cluster.py [--gpus 4] [--taskmanagers 1] [--slots 2] [--subtasks-per-gpu 1]
        [--memory "4 gb"] [--seconds 12] [--modes process,thread] [--keep DIR] [--start-timeout 300]
        [--flink-home DIR]

``--taskmanagers N`` TaskManagers on this host of ``--gpus`` simulated GPUs, each with ``--slots``
slots, claim their GPUs through one coordination file; ``--subtasks-per-gpu K`` lets K slots share a
GPU (bind_gpus's ``subtasks_per_gpu``), so that each TaskManager claims ``ceil(slots / K)`` GPUs
(``external-resource.gpu.amount``); ``--memory SIZE`` is what each slot asks of its GPU (a Flink memory
size). The layout is checked before anything starts: the TaskManagers' GPUs must be on the host
(``taskmanagers * amount <= gpus``) and the requests of the slots that share a GPU must fit its memory
(the simulated GPU's, as NVML reads it); a mistake ends the script at once, in a few lines naming the
option to change, before any JVM starts.

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
   TaskManager, ``slots`` slots; ``conf/workers``: ``localhost`` once per TaskManager.
2. A ``lib/`` of the distribution's jars plus ``opt/flink-python-*.jar`` unless lib/ has it already
   (thread mode runs a second job on a Java 17 TaskManager only with flink-python in lib/), through
   ``FLINK_LIB_DIR``.
3. The TaskManagers' environment: what ``flink-gpu --simulate N taskmanager-env`` prints (the
   simulator, ``CUDA_DEVICE_ORDER``, ``PYTHONPATH`` for thread mode), then ``bin/start-cluster.sh``,
   and a wait until every TaskManager has registered all of its slots, free.
4. ``flink run -d -py gpu_inference_job.py --memory SIZE --subtasks-per-gpu K`` per mode, once the
   slots it needs are free, with a subtask per slot of the cluster; while it runs, the gauges from REST
   (and which GPUs serve several subtasks at once) and the bindings from ``flink-gpu list``. Then, from
   the TaskManagers' logs, when each binding began and ended: a binding ends at the subtask's
   ``close()``, and a GPU released there is bound again by the next subtask (the same GPU under
   another holder, later: reuse); holders of one GPU at the same time share it.
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
from typing import Mapping, NamedTuple

from flink_gpu.deploy.local_cluster import START_TIMEOUT_S, LocalCluster, flink_home, gpu_resource
from flink_gpu.deploy.taskmanager_env import SIMULATOR_KEYS, discovery_executable, taskmanager_environment
from flink_gpu.errors import LocalClusterError

HERE = Path(__file__).resolve().parent
JOB = HERE / "gpu_inference_job.py"
OPERATOR = "infer"  # gpu_inference_job.OPERATOR
# per GPU: README, "GPU gauges"; memoryLimit because each slot asks --memory of its GPU
GAUGES = ("utilization", "memoryUsed", "temperature", "power", "health", "memoryLimit")
MEMORY = "4 gb"  # the default of --memory, passed on to gpu_inference_job.py
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


# -- the options and the layout they make, checked before anything starts ------------------------------


def whole_number(text: str) -> int:
    """argparse's type of --gpus, --taskmanagers, --slots: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def subtasks_per_gpu(text: str) -> int:
    """argparse's type of --subtasks-per-gpu: what bind_gpus accepts as ``subtasks_per_gpu``."""
    from flink_gpu.binding import checked_counts

    try:
        share = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    try:
        return checked_counts(1, share, holders_name="subtasks_per_gpu")[1]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def memory_request(text: str) -> str:
    """argparse's type of --memory: a request bind_gpus accepts (Flink's memory size grammar, above 0)."""
    from flink_gpu.binding import checked_memory

    try:
        checked_memory(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


class Layout(NamedTuple):
    """How the cluster's slots sit on the simulated GPUs."""

    amount: int  # GPUs per TaskManager (external-resource.gpu.amount): enough for its slots, k per GPU
    slots_per_gpu: int  # the most slots on one GPU: bind_gpus binds the least-shared GPU first


class LayoutError(ValueError):
    """A layout that cannot work, saying why and which option to change."""


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def check_layout(gpus: int, taskmanagers: int, slots: int, per_gpu: int, memory: int, gpu_memory: int) -> Layout:
    """The layout of ``taskmanagers`` TaskManagers of ``slots`` slots, at most ``per_gpu`` on one GPU, each
    asking ``memory`` bytes of it, on ``gpus`` simulated GPUs of ``gpu_memory`` bytes; LayoutError when
    the TaskManagers would discover too few GPUs or a GPU's slots would ask more than it has."""
    from flink_gpu.flink.grammars import format_memory_size as size

    amount = -(-slots // per_gpu)
    if taskmanagers * amount > gpus:
        each = gpus // taskmanagers  # the GPUs a TaskManager could have
        remedies = [f"raise --gpus to {taskmanagers * amount}"]
        if each >= 1:
            remedies += [f"lower --slots to {each * per_gpu}", f"raise --subtasks-per-gpu to {-(-slots // each)}"]
        elif gpus >= amount:
            remedies.append(f"lower --taskmanagers to {gpus // amount}")
        need = (
            f"need {_count(amount, 'GPU')} each, {taskmanagers * amount} in all"
            if taskmanagers > 1
            else f"needs {_count(amount, 'GPU')}"
        )
        remedy = ", ".join(remedies[:-1]) + ", or " + remedies[-1] if len(remedies) > 1 else remedies[0]
        raise LayoutError(
            f"{_count(taskmanagers, 'TaskManager')} (--taskmanagers) of {_count(slots, 'slot')} (--slots), at "
            f"most {per_gpu} on one GPU (--subtasks-per-gpu), {need}; the host has {_count(gpus, 'simulated GPU')}"
            f" (--gpus): {remedy}."
        )
    on_one = -(-slots // amount)
    if memory > gpu_memory:
        raise LayoutError(
            f"A slot asks {size(memory)} of its GPU (--memory), more than a simulated GPU's {size(gpu_memory)}: "
            f"lower --memory to {size(gpu_memory)} or less."
        )
    if on_one * memory > gpu_memory:
        fits = gpu_memory // memory  # the most slots whose requests fit one GPU
        gpus_then = taskmanagers * -(-slots // fits)
        raise LayoutError(
            f"{on_one} slots on one GPU (--subtasks-per-gpu {per_gpu}), each asking {size(memory)} (--memory), "
            f"ask {size(on_one * memory)} of it, more than a simulated GPU's {size(gpu_memory)}: lower --memory "
            f"to {size(gpu_memory // on_one)} or less, or --subtasks-per-gpu to {fits}"
            + (f" with --gpus {gpus_then}." if gpus_then > gpus else ".")
        )
    return Layout(amount, on_one)


def simulated_gpu_memory(env: "Mapping[str, str]") -> int:
    """The memory of the smallest simulated GPU, as NVML reads it in the TaskManagers' environment ``env``:
    read by a child process (NVML starts once per process, with the variables it sees then)."""
    read = (
        "from flink_gpu.nvml import open_library\n"
        "print(min(device.memory_total or 0 for device in open_library().devices().devices))"
    )
    simulator = {key: env[key] for key in SIMULATOR_KEYS if key in env}  # this flink_gpu, on those GPUs
    child = subprocess.run(
        [sys.executable, "-c", read], env={**os.environ, **simulator}, capture_output=True, text=True, timeout=120
    )
    if child.returncode != 0:
        sys.exit(f"run_local_cluster: cannot read the simulated GPUs' memory:\n{child.stderr.strip()}")
    return int(child.stdout)


# -- the cluster and the jobs ---------------------------------------------------------------------------


def start_cluster(
    home: Path, work: Path, env: "Mapping[str, str]", args: argparse.Namespace, layout: Layout
) -> LocalCluster:
    """Steps 1-3: the configuration with the GPU resource (``layout.amount`` GPUs per TaskManager), lib/,
    the TaskManagers' environment ``env``; the cluster is not started yet."""
    discovery = discovery_executable()
    if discovery is None:
        sys.exit("flink-gpu-discovery is not installed beside this Python (pip install flink-gpu).")
    conf = {
        "taskmanager.numberOfTaskSlots": args.slots,
        **gpu_resource(layout.amount, work / "gpu-coordination", discovery),
    }
    return LocalCluster(home, work, conf, env=env, start_timeout=args.start_timeout, taskmanagers=args.taskmanagers)


def bring_up(cluster: LocalCluster, args: argparse.Namespace, layout: Layout) -> None:
    say(f"== bin/start-cluster.sh (FLINK_CONF_DIR={cluster.conf_dir})")
    each = "one GPU each" if layout.slots_per_gpu == 1 else f"up to {layout.slots_per_gpu} on one GPU"
    say(
        f"   {_count(args.taskmanagers, 'TaskManager')} on {_count(args.gpus, 'simulated GPU')}, "
        f"{'each ' if args.taskmanagers > 1 else ''}claiming {layout.amount} (external-resource.gpu.amount) for "
        f"its {_count(args.slots, 'slot')}, {each}"
    )
    cluster.start()
    for taskmanager in cluster.wait_for_free_slots(
        args.slots, what="the cluster to come up", taskmanagers=args.taskmanagers
    ):
        say(
            f"   TaskManager {taskmanager['id']} registered, {taskmanager['slotsNumber']} slots "
            f"({taskmanager['freeSlots']} free)"
        )
    say(f"   JobManager RPC port {cluster.rpc_port}, web UI http://localhost:{cluster.rest_port}")


def gpu_index(metric_id: str) -> str:
    """The GPU of a gauge's id, ``<operator>.gpu.<index>.<gauge>``."""
    return metric_id.split(".gpu.", 1)[1].rsplit(".", 1)[0]


def run_job(cluster: LocalCluster, mode: str, args: argparse.Namespace) -> None:
    """Step 4: the job in ``mode``, a subtask per slot; while it runs, its gauges from REST and the bindings
    from flink-gpu list."""
    parallelism = args.slots * args.taskmanagers
    cluster.wait_for_free_slots(args.slots, what=f"the slots of the {mode}-mode job", taskmanagers=args.taskmanagers)
    say(f"\n== flink run -d -py {JOB.name} --mode {mode} --parallelism {parallelism}")
    job_id = cluster.submit_python_job(
        JOB,
        ["--mode", mode, "--parallelism", str(parallelism), "--seconds", str(args.seconds)]
        + ["--memory", args.memory, "--subtasks-per-gpu", str(args.subtasks_per_gpu)]
        + ["--bindings-log", str(cluster.work / BINDINGS_LOG)],
    )
    gauges = cluster.gpu_gauges(
        job_id, OPERATOR, parallelism, len(GAUGES), timeout=args.seconds + cluster.start_timeout
    )
    serving: "dict[str, list[int]]" = {}
    for subtask, values in sorted(gauges.items()):
        say(f"   subtask {subtask}: " + ", ".join(f"{name} {value}" for name, value in sorted(values.items())))
        for gpu in sorted({gpu_index(name) for name in values}):
            serving.setdefault(gpu, []).append(subtask)
    shared = [f"GPU {gpu}: subtasks {', '.join(map(str, s))}" for gpu, s in sorted(serving.items()) if len(s) > 1]
    if shared:
        say("   serving several subtasks at once (sharing): " + "; ".join(shared))
    # `flink-gpu list` finds the coordination file through FLINK_CONF_DIR, as in a shell set up for the cluster
    say("   flink-gpu list (the bindings section):")
    listing = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list"], env=cluster.env, capture_output=True, text=True, timeout=120
    )
    bindings = listing.stdout.split("Bindings", 1)
    say("     Bindings" + bindings[1].rstrip().replace("\n", "\n     ") if len(bindings) > 1 else listing.stdout)
    state = cluster.wait_for_job_end(job_id, timeout=args.seconds + cluster.start_timeout)
    say(f"   job {job_id}: {state}")
    if state != "FINISHED":
        raise RuntimeError(f"The {mode}-mode job ended {state}:\n{cluster.job_failure(job_id)}")


def binding_timeline(path: Path) -> "list[str]":
    """gpu_inference_job's bind and release events (``--bindings-log``), by time, then the holders that
    held one GPU at the same time (sharing)."""
    try:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return [f"(no {path}: no subtask bound a GPU)"]
    events.sort(key=lambda e: e["at"])
    lines = [
        f"{time.strftime('%H:%M:%S', time.localtime(e['at']))}.{int(e['at'] * 1000) % 1000:03d}  "
        f"GPU {e['gpus']} {e['event']:<8} {e['holder']} ({OPERATOR} subtask {e['subtask']})"
        for e in events
    ]
    holding: "dict[str, list[str]]" = {}  # GPU -> its holders now
    gained: "set[str]" = set()  # the GPUs that gained a holder since one was last released
    for e in events:
        now = holding.setdefault(e["gpus"], [])
        if e["event"] == "bound":
            now.append(e["holder"])
            gained.add(e["gpus"])
            continue
        if len(now) > 1 and e["gpus"] in gained:  # the most holders at once, until this release
            lines.append(f"GPU {e['gpus']} held by {', '.join(now)} at once (shared)")
        gained.discard(e["gpus"])
        if e["holder"] in now:
            now.remove(e["holder"])
    return lines


def stop(cluster: LocalCluster) -> None:
    """Step 5: bin/stop-cluster.sh, then whatever of the cluster is left, killed by pid."""
    if not cluster.stops:
        return
    jvms = cluster.stop(say=say_while_stopping)
    say_while_stopping(f"   stopped: {', '.join(f'pid {pid}' for pid in jvms) or 'nothing was running'}")


def parse_arguments(argv: "list[str] | None") -> "tuple[argparse.Namespace, Layout, dict[str, str]]":
    """The options, the layout they make and the TaskManagers' environment; a mistake in any of them ends
    the script here (argparse's usage and one message naming the option, exit status 2)."""
    from flink_gpu.binding import checked_memory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=whole_number, default=4, help="simulated GPUs of the host (default: 4)")
    parser.add_argument(
        "--taskmanagers", metavar="N", type=whole_number, default=1, help="TaskManagers on the host (default: 1)"
    )
    parser.add_argument("--slots", type=whole_number, default=2, help="slots of each TaskManager (default: 2)")
    parser.add_argument(
        "--subtasks-per-gpu",
        metavar="K",
        type=subtasks_per_gpu,
        default=1,
        help="slots that may share one GPU (bind_gpus's subtasks_per_gpu; default: 1, a GPU per slot)",
    )
    parser.add_argument(
        "--memory",
        metavar="SIZE",
        type=memory_request,
        default=MEMORY,
        help=f"GPU memory each slot asks of its GPU, a Flink memory size (default: {MEMORY!r})",
    )
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
    modes = args.modes.split(",")
    if not modes or any(mode not in ("process", "thread") for mode in modes):
        parser.error(f"argument --modes: {args.modes!r} is not a comma-separated list of process and thread")
    try:
        env = taskmanager_environment(devices=args.gpus)
        gpu_memory = simulated_gpu_memory(env)
    except ValueError as error:  # more GPUs than the simulator has
        parser.error(f"argument --gpus: {error}")
    except FileNotFoundError as error:  # no simulator in this installation
        sys.exit(f"run_local_cluster: {error}")
    memory = checked_memory(args.memory)
    assert memory is not None  # --memory always has a value, checked by memory_request
    try:
        layout = check_layout(args.gpus, args.taskmanagers, args.slots, args.subtasks_per_gpu, memory, gpu_memory)
    except LayoutError as error:
        parser.error(str(error))
    return args, layout, env


def main(argv: "list[str] | None" = None) -> int:
    args, layout, env = parse_arguments(argv)
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
        cluster = start_cluster(home, work, env, args, layout)
        bring_up(cluster, args, layout)
        for mode in args.modes.split(","):
            run_job(cluster, mode, args)
        say("\n== the TaskManagers' logs: one line per binding")
        for line in cluster.log_lines(r"Bound .* to .* of the TaskManager"):
            say(f"   {line}")
        say(
            "\n== when each GPU was bound and released (a binding ends at close(); the next subtask binds the\n"
            "   GPU again: the same GPU under another holder, later, is reuse; holders at once share it)"
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
