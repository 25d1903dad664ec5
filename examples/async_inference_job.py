r"""A PyFlink job whose async function batches concurrent requests to a model on its subtask's own GPU; or, with
``--function map``, the same model behind a MapFunction, one request per call: the same requests, to compare.

    python examples/run_async_inference.py    # a local cluster on simulated GPUs: both jobs, and the table

or on a cluster of yours (docs/flink-cluster.md), once per function::

    flink run -pyclientexec "$(which python)" -pyexec "$(which python)" \
        -py examples/async_inference_job.py --function async

Needs PyFlink's async functions (``AsyncDataStream``, ``AsyncFunction``: apache-flink 2.2 and later,
FLINK-38190). What they do, which this job relies on:

* Process mode only: PyFlink (2.2, 2.3) refuses an async function in thread mode when the job is built, so
  the job sets ``python.execution-mode: process``.
* ``open(runtime_context)`` runs once per subtask, before any request, as a MapFunction's does; the function
  binds its GPU there (``bind_gpus(ctx, "gpu", ...)``), sets the worker's environment, registers the GPU
  gauges and loads the model: gpu_inference_job.py's ``GpuModelFunction``, shared by both functions here.
  ``close()`` releases the GPU.
* ``async_invoke(value)`` is a coroutine; PyFlink runs it on an asyncio event loop in a thread of its own
  and emits the list it returns. At most ``--capacity`` requests of a subtask are in flight (its input
  waits beyond that); one not answered within ``--timeout-s`` fails the job (``timeout()``'s default).
* Flink ends a bundle (``python.fn-execution.bundle.size`` records or ``bundle.time`` ms; process mode
  ships the gauges then) only once every request in flight is answered: a bundle smaller than the
  capacity would cap the batches, so the job sets it to 1000 records (1 s).

Each async request awaits ``RequestBatcher.submit`` (request_batcher.py): one model call
(``Model.predict_batch``) answers up to ``--batch`` waiting requests, formed as soon as that many wait or
``--wait-ms`` after the first of them arrived. Without CUDA the model is a CPU stand-in that takes
``--call-ms`` per call plus ``--input-ms`` per input, as a GPU's launch cost and its cost per input would,
so that batching pays off here as on a GPU; with PyTorch on a GPU its own time counts.

Requests: ``--records`` per subtask (``--parallelism`` subtasks), each due ``1/--rate`` s after the one
before it (``--rate 0``: all at once); a ``pace`` map holds each until it is due, so that a request's
latency counts from then, waiting behind slower ones included. Each answer is a JSON line (Flink's print
sink: the TaskManager's .out file) with ``function``, ``subtask``, ``gpus``, ``model``, ``record``,
``score``, ``due`` and ``done`` (Unix seconds) and ``batch`` (the requests its model call served).
run_async_inference.py reads them and prints latency (p50, p99) and throughput of both functions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gpu_inference_job
import request_batcher
from gpu_inference_job import OPERATOR, GpuModelFunction, features
from pyflink.common import Configuration, Time, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import MapFunction
from request_batcher import RequestBatcher

try:
    from pyflink.datastream import AsyncDataStream, AsyncFunction
except ImportError:  # before apache-flink 2.2
    sys.exit(
        "async_inference_job.py needs PyFlink's async functions (AsyncDataStream), which apache-flink 2.2 and "
        "later have: pip install 'apache-flink>=2.2'."
    )

FUNCTIONS = ("map", "async")
#: Both functions' jobs: a bundle ends only once every request in flight is answered (see above).
BUNDLE = {"python.fn-execution.bundle.size": "1000", "python.fn-execution.bundle.time": "1000"}


class Pace(MapFunction):
    """Holds the requests of its subtask until each is due (``rate`` per second from its first) and adds that
    time: ``(record, due)``. A request already late passes at once, its due time unchanged."""

    def __init__(self, rate: float):
        self.rate = rate
        self.first = None
        self.seen = 0

    def map(self, record: int) -> "tuple[int, float]":
        now = time.time()
        if self.first is None:
            self.first = now
        due = self.first + (self.seen / self.rate if self.rate > 0 else 0.0)
        self.seen += 1
        if due > now:
            time.sleep(due - now)
        return record, due


def answer(function: GpuModelFunction, name: str, record: int, due: float, score: float, batch: int) -> str:
    """A request's answer, as the JSON line described above."""
    return json.dumps(
        {
            "function": name,
            "subtask": function.subtask,
            "gpus": list(function.gpus.indices),
            "model": function.model.kind,
            "record": record,
            "score": score,
            "due": due,
            "done": time.time(),
            "batch": batch,
        }
    )


class MappedInfer(GpuModelFunction, MapFunction):
    """One model call per request, the way gpu_inference_job.py's ``Infer`` calls it."""

    def map(self, value: "tuple[int, float]") -> str:
        record, due = value
        return answer(self, "map", record, due, self.model.predict(features(record)), 1)


class BatchedInfer(GpuModelFunction, AsyncFunction):
    """The requests in flight, batched to one model call each ``batch`` of them (or each ``wait_s``)."""

    def __init__(self, batch: int, wait_s: float, bindings_log: "str | None", stand_in_cost: "tuple[float, float]"):
        super().__init__(bindings_log, stand_in_cost=stand_in_cost)
        self.batch, self.wait_s = batch, wait_s
        self.batcher = None

    def open(self, runtime_context):
        super().open(runtime_context)  # binds the GPU, registers the gauges, loads the model
        # PyFlink starts the event loop after open(): the batcher takes it at its first request
        self.batcher = RequestBatcher(self.model.predict_batch, self.batch, self.wait_s)

    async def async_invoke(self, value: "tuple[int, float]") -> "list[str]":
        record, due = value
        served = await self.batcher.submit(features(record))
        return [answer(self, "async", record, due, served.result, served.batch)]

    def close(self):
        if self.batcher is not None:
            self.batcher.close()
        super().close()


def request_options() -> argparse.ArgumentParser:
    """The options of the requests, the model and the batches: this job's, and run_async_inference.py's, which
    passes them on to both of its jobs."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--records", type=int, default=200, help="requests per subtask (default: 200)")
    parser.add_argument(
        "--rate", type=float, default=200.0, help="requests due per second per subtask; 0: all at once (default: 200)"
    )
    parser.add_argument("--batch", type=int, default=32, help="async: most requests per model call (default: 32)")
    parser.add_argument(
        "--wait-ms", type=float, default=5.0, help="async: longest wait for a batch to fill (default: 5)"
    )
    parser.add_argument(
        "--capacity", type=int, default=100, help="async: requests in flight per subtask (default: 100)"
    )
    parser.add_argument("--timeout-s", type=float, default=60.0, help="async: a request's time limit (default: 60)")
    parser.add_argument("--call-ms", type=float, default=20.0, help="CPU stand-in: time per model call (default: 20)")
    parser.add_argument("--input-ms", type=float, default=1.0, help="CPU stand-in: time per input (default: 1)")
    return parser


def check_request_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exits through ``parser.error`` (usage and the option at fault) on a value out of range."""
    for name in ("records", "batch", "capacity"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, not {getattr(args, name)}")
    for name in ("rate", "wait_ms", "call_ms", "input_ms"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be 0 or more, not {getattr(args, name)}")
    if args.timeout_s <= 0:
        parser.error(f"--timeout-s must be more than 0, not {args.timeout_s}")


def main(argv: "list[str] | None" = None) -> None:
    parser = argparse.ArgumentParser(
        description="A PyFlink job that batches async requests to a model on a GPU.", parents=[request_options()]
    )
    parser.add_argument("--function", choices=FUNCTIONS, default="async", help="async (default) or map")
    parser.add_argument("--parallelism", type=int, default=2, help="subtasks of the operator (default: 2)")
    parser.add_argument(
        "--bindings-log", metavar="FILE", help="append each bind and release (JSON lines) to FILE on the TaskManager"
    )
    args = parser.parse_args(argv)
    check_request_options(parser, args)
    if args.parallelism < 1:
        parser.error(f"--parallelism must be 1 or more, not {args.parallelism}")

    config = Configuration()
    config.set_string("python.execution-mode", "process")  # async functions run in process mode only
    for key, value in BUNDLE.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    for module in (gpu_inference_job, request_batcher):  # the workers import them (the functions' bases)
        env.add_python_file(str(Path(module.__file__).resolve()))
    cost = (args.call_ms / 1000, args.input_ms / 1000)
    records = env.from_collection(list(range(args.parallelism * args.records)), type_info=Types.INT())
    requests = (
        records.rebalance()
        .map(Pace(args.rate), output_type=Types.TUPLE([Types.INT(), Types.DOUBLE()]))
        .name("pace")
        .set_parallelism(args.parallelism)
    )
    if args.function == "map":
        answers = requests.map(MappedInfer(args.bindings_log, stand_in_cost=cost), output_type=Types.STRING())
    else:
        answers = AsyncDataStream.unordered_wait(
            requests,
            BatchedInfer(args.batch, args.wait_ms / 1000, args.bindings_log, cost),
            Time.milliseconds(int(args.timeout_s * 1000)),
            args.capacity,
            Types.STRING(),
        )
    answers.name(OPERATOR).set_parallelism(args.parallelism).print()
    env.execute(f"flink-gpu example: inference, {args.function} function")


if __name__ == "__main__":
    main()
