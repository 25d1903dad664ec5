"""Start a local standalone Flink cluster on simulated GPUs, run async_inference_job.py there twice on the same
requests (the model behind a MapFunction, then behind the async function that batches), and print the latency
and throughput of each.

    python examples/run_async_inference.py [--records 200] [--rate 200] [--batch 32] [--wait-ms 5]
        [--capacity 100] [--timeout-s 60] [--call-ms 20] [--input-ms 1]
        [--gpus 4] [--slots 2] [--keep DIR] [--start-timeout 300] [--flink-home DIR]

Needs apache-flink 2.2 or later (PyFlink's async functions) and Java 11 or later, as run_local_cluster.py does;
the cluster is set up the same way (a TaskManager of ``--slots`` slots with one GPU each, through
src/flink_gpu/deploy/local_cluster.py), in a temporary directory (``--keep DIR``: there, kept), and stopped
however the script ends. Both jobs run in process mode (PyFlink's async functions run in no other), one
after the other, ``--slots`` subtasks each, with the same ``--records`` per subtask due at ``--rate`` per
second. Their answers (the print sink's lines in the TaskManager's .out file) must answer every request
once, with the same score from both functions; then, per function: the requests, latency from due to
answered (p50, p99), throughput (requests over the time from the first due to the last answer), the model
calls and the largest batch. A MapFunction serves one request per call and, once requests come faster than
one call takes, every later request waits behind the ones before it; the async function serves all those
waiting with one call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import async_inference_job  # exits, saying so, on a PyFlink without async functions (before apache-flink 2.2)

from flink_gpu.deploy.local_cluster import START_TIMEOUT_S, LocalCluster, flink_home, gpu_resource
from flink_gpu.deploy.taskmanager_env import discovery_executable, taskmanager_environment
from flink_gpu.errors import LocalClusterError

JOB = Path(async_inference_job.__file__).resolve()
#: the table's rows: the job's --function, and what it is called
FUNCTIONS = {"map": "MapFunction, a call per request", "async": "async function, batched"}


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived: the script unwinds (stopping the cluster) as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum, frame):
    raise Interrupted(signum)


def say(text: str) -> None:
    """print() that survives a reader that went away (``| head``): the BrokenPipeError goes up once, so that
    the script stops, and later output (the clean-up's) goes to /dev/null."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise


def say_while_stopping(text: str) -> None:
    try:
        say(text)
    except BrokenPipeError:
        pass  # nobody reads any more; stopping goes on


def percentile(values: "list[float]", share: float) -> float:
    """The nearest-rank percentile: the smallest value that ``share`` of the values do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def answers_of(cluster: LocalCluster, function: str) -> "list[dict[str, object]]":
    """The answers of the ``function`` job: JSON lines of the TaskManager's .out (Flink's print sink may put
    "<subtask>> " before each)."""
    lines = cluster.log_lines(rf'"function": "{function}"')
    return [json.loads(line[line.index("{") :]) for line in lines]


def check_answers(answers: "dict[str, list[dict[str, object]]]", requests: int) -> None:
    """Every request answered once by each function, with the same score (to rounding: a batch multiplies
    matrices where a single request multiplies a vector)."""
    scores: "dict[str, dict[int, float]]" = {}
    for function, found in answers.items():
        records = sorted(int(a["record"]) for a in found)
        if records != list(range(requests)):
            missing = sorted(set(range(requests)) - set(records))
            repeated = sorted({r for r in records if records.count(r) > 1})
            raise RuntimeError(
                f"The {function} job answered {len(records)} of {requests} requests "
                f"(missing: {missing[:10]}, answered more than once: {repeated[:10]})."
            )
        scores[function] = {int(a["record"]): float(a["score"]) for a in found}
    # float32 on a GPU: one input alone and the same input in a batch differ in the last bits (about 1e-7)
    differ = [r for r in range(requests) if not math.isclose(scores["map"][r], scores["async"][r], rel_tol=1e-5)]
    if differ:
        r = differ[0]
        raise RuntimeError(
            f"The two functions scored {len(differ)} requests differently, request {r} "
            f"{scores['map'][r]} (map) and {scores['async'][r]} (async)."
        )


def table(answers: "dict[str, list[dict[str, float]]]") -> "list[str]":
    """Per function: requests, latency from due to answered (p50, p99), throughput (per subtask, its requests
    over the time from its first due to its last answer; summed), model calls, the largest batch."""
    rows = [
        f"{'':<34}{'requests':>9}{'p50 ms':>10}{'p99 ms':>10}{'requests/s':>12}{'model calls':>13}{'largest batch':>15}"
    ]
    for function, found in answers.items():
        latencies = [(a["done"] - a["due"]) * 1000 for a in found]
        throughput = 0.0
        for subtask in {a["subtask"] for a in found}:
            own = [a for a in found if a["subtask"] == subtask]
            throughput += len(own) / (max(a["done"] for a in own) - min(a["due"] for a in own))
        calls = round(sum(1 / a["batch"] for a in found))  # a call that served n requests: n answers of batch n
        rows.append(
            f"{FUNCTIONS[function]:<34}{len(found):>9}{percentile(latencies, 0.5):>10.1f}"
            f"{percentile(latencies, 0.99):>10.1f}{throughput:>12.1f}{calls:>13}"
            f"{max(int(a['batch']) for a in found):>15}"
        )
    return rows


def main(argv: "list[str] | None" = None) -> int:
    requests = async_inference_job.request_options()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[requests])
    parser.add_argument("--gpus", type=int, default=4, help="simulated GPUs of the host (default: 4)")
    parser.add_argument("--slots", type=int, default=2, help="slots (one GPU and one subtask each) (default: 2)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (configuration, logs, answers)")
    parser.add_argument(
        "--start-timeout",
        metavar="S",
        type=float,
        default=START_TIMEOUT_S,
        help=f"the longest wait for the cluster, its slots and each job (default: {START_TIMEOUT_S})",
    )
    parser.add_argument(
        "--flink-home",
        metavar="DIR",
        default=os.environ.get("FLINK_HOME"),
        help="the Flink distribution (default: $FLINK_HOME, else the one in the apache-flink package)",
    )
    args = parser.parse_args(argv)
    async_inference_job.check_request_options(parser, args)
    if args.slots < 1:
        parser.error(f"--slots must be 1 or more, not {args.slots}")
    if args.slots > args.gpus:
        parser.error(f"--slots {args.slots} needs as many GPUs, and --gpus is {args.gpus}")
    try:
        home = flink_home(args.flink_home)
    except LocalClusterError as error:
        sys.exit(str(error))
    discovery = discovery_executable()
    if discovery is None:
        sys.exit("flink-gpu-discovery is not installed beside this Python (pip install flink-gpu).")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="flink-gpu-async-"))
    cluster = None
    status = 0
    try:
        work.mkdir(parents=True, exist_ok=True)
        conf = {
            "taskmanager.numberOfTaskSlots": args.slots,
            **gpu_resource(args.slots, work / "gpu-coordination", discovery),
        }
        cluster = LocalCluster(
            home, work, conf, env=taskmanager_environment(devices=args.gpus), start_timeout=args.start_timeout
        )
        say(f"== bin/start-cluster.sh (FLINK_CONF_DIR={cluster.conf_dir})")
        cluster.start()
        job_args = ["--parallelism", str(args.slots)]
        for dest in vars(requests.parse_args([])):  # the same requests, model and batches for both jobs
            job_args += [f"--{dest.replace('_', '-')}", str(getattr(args, dest))]
        for function in FUNCTIONS:
            cluster.wait_for_free_slots(args.slots, what=f"the slots of the {function} job")
            say(f"== flink run -d -py {JOB.name} --function {function}")
            job_id = cluster.submit_python_job(
                JOB, ["--function", function, "--bindings-log", str(work / f"bindings-{function}.jsonl"), *job_args]
            )
            state = cluster.wait_for_job_end(job_id, timeout=cluster.start_timeout)
            say(f"   job {job_id}: {state}")
            if state != "FINISHED":
                raise RuntimeError(f"The {function} job ended {state}:\n{cluster.job_failure(job_id)}")
        answers = {function: answers_of(cluster, function) for function in FUNCTIONS}
        check_answers(answers, args.slots * args.records)
        model = answers["async"][0]["model"]
        cost = f", {args.call_ms:g} ms a call + {args.input_ms:g} ms an input" if "CPU" in str(model) else ""
        say(
            f"\n== {args.slots} subtasks x {args.records} requests due at {args.rate:g}/s each;"
            f" the model: {model}{cost};"
            f"\n   async: batches of up to {args.batch} requests, formed within {args.wait_ms:g} ms. Every request was"
            " answered once by each function, with the same score."
        )
        for row in table(answers):
            say(f"   {row}")
    except BrokenPipeError:
        status = 128 + signal.SIGPIPE  # the reader went away (`| head`): stop quietly, as a shell tool would
    except (RuntimeError, TimeoutError, OSError) as error:
        status = 1
        print(f"run_async_inference: {error}" + (f"\nlogs: {cluster.log_dir}" if cluster else ""), file=sys.stderr)
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except Interrupted as interrupted:
        status = 128 + interrupted.signum
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second one must not cut the clean-up short
        if cluster is not None and cluster.stops:
            jvms = cluster.stop(say=say_while_stopping)
            say_while_stopping(f"   stopped: {', '.join(f'pid {pid}' for pid in jvms) or 'nothing was running'}")
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say_while_stopping(f"   kept {work}")
    return status


if __name__ == "__main__":
    sys.exit(main())
