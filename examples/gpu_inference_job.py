"""A PyFlink DataStream inference job that gives every subtask its own GPU.

Submit it to a cluster whose TaskManagers discover GPUs (docs/flink-cluster.md; run_local_cluster.py
starts one on simulated GPUs)::

    flink run -pyclientexec "$(which python)" -pyexec "$(which python)" -py examples/gpu_inference_job.py --mode process

``--mode process`` (PyFlink's default: a Python worker process per slot) or ``thread`` (Python runs
inside the TaskManager JVM). ``--parallelism`` subtasks (at most the cluster's slots), each
``--records`` records, spread over about ``--seconds`` seconds so that there is time to watch the
gauges (``flink-gpu list``, Flink's web UI or REST API).

What each subtask does in ``open()``, in this order:

1. ``bind_gpus(ctx, "gpu", subtasks_per_gpu=k, memory=m)``: one of its TaskManager's GPUs for its slot,
   none shared with another slot (``--subtasks-per-gpu k`` lets k slots share one; ``--memory "4 gb"``
   asks that much of the GPU's memory for the slot, and a GPU is bound only where the slots' requests
   fit it). Flink itself gives every slot all of the
   TaskManager's GPUs; picking ``gpus[subtask_index % n]`` collides across TaskManagers.
2. Process mode: ``CUDA_VISIBLE_DEVICES`` set to the bound GPU before anything starts CUDA (so
   ``cuda:0`` is that GPU), and ``pin_to_gpus`` pins the worker process to the GPU's local CPUs.
   With a memory request the worker also starts with ``binding.memory_environment()`` (MPS's limit where
   an MPS daemon serves the host, JAX's and CuPy's), and once PyTorch is up ``apply_memory_limit()``
   caps its allocator: an allocation past the request fails in this subtask, not in another one.
   Thread mode: the process is the TaskManager JVM, shared by every slot, so none of this can be set per
   subtask; the model uses ``torch.device(f"cuda:{binding.devices[0]}")`` instead, and a memory request
   is an admission rule there (docs/design.md §9.3, Memory).
3. ``register_metrics``: gauges ``utilization``, ``memoryUsed``, ``temperature``, ``power`` and
   ``health`` (0 ok, 1 degraded, 2 unhealthy or lost, 3 unknown) per bound GPU, named
   ``<operator>.gpu.<index>.<gauge>`` in Flink's REST API. Process mode ships them when a bundle ends,
   hence the small ``python.fn-execution.bundle.size`` / ``bundle.time`` below; thread mode pushes them
   from ``map()`` with ``update_metrics()``.
4. A log line with the binding's holder and time; ``close()`` releases the GPU and logs when
   (``--bindings-log FILE`` also appends both as JSON lines to FILE on the TaskManager's host:
   process mode's log lines from ``close()`` may not reach the TaskManager's log, the worker is
   ending). A binding lasts from ``open()`` to ``close()``: a subtask that finishes gives its GPU
   back, and the next subtask to open binds it again, so a short job's subtasks may show the same
   GPU one after the other (GPUs 0, 2, 0, 2 for four subtasks): reuse, never two at once
   (run_local_cluster.py prints these events by time).
5. The model: PyTorch when it is installed (a small linear layer on the GPU), else numpy (on the CPU,
   a stand-in for a model so that the job runs anywhere), else pure Python.

These steps are ``GpuModelFunction``'s ``open()`` and ``close()``; ``Infer``, this job's MapFunction, adds
``map()``. async_inference_job.py builds on them too: an async function that batches concurrent requests
to the model (PyFlink 2.2 and later, process mode), against a MapFunction on the same requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

from pyflink.common import Configuration, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import Function, MapFunction, RuntimeContext

OPERATOR = "infer"
FEATURES = 16
# process mode: into the TaskManager's .log (through PyFlink's PythonWorker logger)
LOG = logging.getLogger("gpu_inference_job")


class Model:
    """y = tanh(W x), W fixed: on the bound GPU with PyTorch, else on the CPU.

    ``predict_batch`` answers many inputs in one call, as a GPU does. On the CPU (a stand-in for a model, so
    that the job runs anywhere) each call also takes ``stand_in_cost`` = (seconds per call, seconds per input),
    as a GPU's launch and transfer cost and its cost per input would, so that batching pays off as it would
    on a GPU (async_inference_job.py measures it); the MapFunction job's default costs nothing.
    """

    def __init__(self, device_ordinal: "int | None", stand_in_cost: "tuple[float, float]" = (0.0, 0.0)):
        self.stand_in_cost = stand_in_cost
        try:
            import torch
        except ImportError:
            torch = None
        self.kind = "pure-python"
        if torch is not None and torch.cuda.is_available():
            # process mode: CUDA_VISIBLE_DEVICES shows the bound GPU only, so it is cuda:0;
            # thread mode: binding.devices[0] is its ordinal in the TaskManager JVM
            self.torch = torch
            self.device = torch.device(f"cuda:{device_ordinal or 0}")
            generator = torch.Generator().manual_seed(7)
            self.weights = torch.rand((FEATURES, FEATURES), generator=generator).to(self.device)
            self.kind = f"torch on {self.device}"
            return
        try:
            import numpy
        except ImportError:
            numpy = None
        self.numpy = numpy
        if numpy is not None:
            self.weights = numpy.random.default_rng(7).random((FEATURES, FEATURES))
            self.kind = "numpy (CPU stand-in)"
        else:
            import random

            rng = random.Random(7)
            self.weights = [[rng.random() for _ in range(FEATURES)] for _ in range(FEATURES)]

    def predict_batch(self, inputs: "list[list[float]]") -> "list[float]":
        """One call for all ``inputs`` (each FEATURES long): their scores, in order."""
        if self.kind.startswith("torch"):
            x = self.torch.tensor(inputs, device=self.device)
            return [float(y) for y in self.torch.tanh(x @ self.weights.T).sum(dim=1).cpu()]
        per_call, per_input = self.stand_in_cost
        if per_call or per_input:
            time.sleep(per_call + per_input * len(inputs))  # sleeping frees the GIL, as waiting for a GPU does
        if self.numpy is not None:
            return [float(y) for y in self.numpy.tanh(self.numpy.asarray(inputs) @ self.weights.T).sum(axis=1)]
        import math

        return [
            sum(math.tanh(sum(w * x for w, x in zip(row, features, strict=True))) for row in self.weights)
            for features in inputs
        ]

    def predict(self, features: "list[float]") -> float:
        return self.predict_batch([features])[0]


def features(record: int) -> "list[float]":
    """The model's input for a record."""
    return [((record * 31 + i) % 97) / 97 for i in range(FEATURES)]


class GpuModelFunction(Function):
    """``open()`` and ``close()`` of a function that runs the model on its subtask's own GPU (steps 1-5 above):
    ``self.gpus`` (the binding), ``self.model``, ``self.subtask``. Infer adds ``map()``; async_inference_job.py's
    functions add theirs."""

    def __init__(
        self,
        bindings_log: "str | None" = None,
        subtasks_per_gpu: int = 1,
        memory: "str | None" = None,
        stand_in_cost: "tuple[float, float]" = (0.0, 0.0),
    ):
        self.bindings_log = bindings_log
        self.subtasks_per_gpu = subtasks_per_gpu
        self.memory = memory
        self.stand_in_cost = stand_in_cost
        self.gpus = None
        self.model = None
        self.subtask = None

    def open(self, runtime_context: RuntimeContext):
        from flink_gpu import pin_to_gpus
        from flink_gpu.pyflink import bind_gpus

        # logs "Bound <operator> subtask <i> to ..."
        self.gpus = bind_gpus(
            runtime_context, "gpu", count=1, subtasks_per_gpu=self.subtasks_per_gpu, memory=self.memory
        )
        thread_mode = self.gpus.holder.startswith("slot ")  # process mode's holder is "pid <n>"
        if thread_mode:
            ordinal = self.gpus.devices[0]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.gpus.cuda_visible_devices  # before CUDA starts
            os.environ.update(self.gpus.memory_environment())  # MPS, JAX, CuPy limits: empty without memory
            pin_to_gpus(self.gpus.infos)  # this worker process only (in thread mode: the whole JVM)
            ordinal = 0
        self.gpus.register_metrics(runtime_context.get_metrics_group())  # memoryLimit too, with a request
        self.model = Model(ordinal, self.stand_in_cost)
        if self.gpus.memory_limit is not None and self.model.kind.startswith("torch"):
            self.gpus.apply_memory_limit()  # PyTorch's allocator stops at the request
        self.subtask = _subtask_index(runtime_context)
        self._log_binding("bound", time.time())
        # print(): process mode into the TaskManager's .log, thread mode into its .out (docs/flink-cluster.md
        # §5); process mode's print() takes no flush= (PyFlink replaces it with one that has no such argument)
        print(f"{OPERATOR} subtask {self.subtask}: model {self.model.kind}, GPU {','.join(self.gpus.indices)}")

    def close(self):
        if self.gpus is not None:
            released_at = time.time()  # before release(): no later subtask can bind the GPU before this
            self.gpus.release()
            self._log_binding("released", released_at)

    def _log_binding(self, what: str, at: float) -> None:
        gpus = ",".join(self.gpus.indices)
        LOG.info("%s subtask %s: GPU %s %s by %s at %.3f", OPERATOR, self.subtask, gpus, what, self.gpus.holder, at)
        if self.bindings_log:
            line = json.dumps(
                {"at": at, "event": what, "gpus": gpus, "holder": self.gpus.holder, "subtask": self.subtask}
            )
            with open(self.bindings_log, "a") as f:  # one short write of an O_APPEND file: lines do not mix
                f.write(line + "\n")


class Infer(GpuModelFunction, MapFunction):
    def __init__(
        self,
        delay_s: float,
        bindings_log: "str | None" = None,
        subtasks_per_gpu: int = 1,
        memory: "str | None" = None,
    ):
        super().__init__(bindings_log, subtasks_per_gpu, memory)
        self.delay_s = delay_s

    def map(self, value: int) -> str:
        self.gpus.update_metrics()  # thread mode: pushes the gauges (at most once a second)
        time.sleep(self.delay_s)  # a real model takes its time; here it leaves time to look
        return json.dumps(
            {
                "subtask": self.subtask,
                "gpus": list(self.gpus.indices),
                "model": self.model.kind,
                "record": value,
                "score": round(self.model.predict(features(value)), 4),
            }
        )


def _subtask_index(runtime_context) -> "int | None":
    """The subtask index: thread mode asks the Java context (PyFlink 2.3's own call is broken there)."""
    java = getattr(runtime_context, "_runtime_context", None)
    if java is not None:
        return int(java.getTaskInfo().getIndexOfThisSubtask())
    return runtime_context.get_index_of_this_subtask()


def subtasks_per_gpu(text: str) -> int:
    """argparse's type of --subtasks-per-gpu: bind_gpus's rule, checked by the client before the job is deployed."""
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
    """argparse's type of --memory: bind_gpus's rule (Flink's memory size grammar, above 0), checked by the
    client: a mistake ends ``flink run`` before the job is deployed, not every subtask's open()."""
    from flink_gpu.binding import checked_memory

    try:
        checked_memory(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def main(argv: "list[str] | None" = None) -> None:
    parser = argparse.ArgumentParser(description="A PyFlink inference job with one GPU per subtask.")
    parser.add_argument(
        "--mode", choices=("process", "thread"), default="process", help="python.execution-mode (default: process)"
    )
    parser.add_argument("--parallelism", type=int, default=2, help="subtasks of the operator (default: 2)")
    parser.add_argument("--records", type=int, default=40, help="records per subtask (default: 40)")
    parser.add_argument("--seconds", type=float, default=10.0, help="about how long the job runs (default: 10)")
    parser.add_argument(
        "--subtasks-per-gpu", type=subtasks_per_gpu, default=1, help="slots that may share one GPU (default: 1)"
    )
    parser.add_argument(
        "--memory",
        metavar="SIZE",
        type=memory_request,
        help="GPU memory each slot asks of its GPU, a Flink memory size such as '4 gb' (default: no request)",
    )
    parser.add_argument(
        "--bindings-log",
        metavar="FILE",
        help="append each bind and release (JSON lines) to FILE on the TaskManager's host",
    )
    args = parser.parse_args(argv)

    config = Configuration()
    config.set_string("python.execution-mode", args.mode)
    # process mode: gauges reach Flink when a bundle ends; the default bundle (100000 records, 1 s)
    # would hold all of a short job's records, and the gauges would show only at its end
    config.set_string("python.fn-execution.bundle.size", "5")
    config.set_string("python.fn-execution.bundle.time", "500")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    records = env.from_collection(list(range(args.parallelism * args.records)), type_info=Types.INT())
    delay = args.seconds / max(args.records, 1)
    records.rebalance().map(
        Infer(delay, args.bindings_log, args.subtasks_per_gpu, args.memory), output_type=Types.STRING()
    ).name(OPERATOR).set_parallelism(args.parallelism).print()
    env.execute(f"flink-gpu example: inference, {args.mode} mode")


if __name__ == "__main__":
    main()
