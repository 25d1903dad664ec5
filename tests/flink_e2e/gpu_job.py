"""PyFlink job for the cluster test: every subtask reports the GPUs flink_gpu.pyflink finds and binds.

Usage (through ``flink run -py``): gpu_job.py <spec JSON>, the spec holding

* ``mode``: ``thread`` or ``process`` (``python.execution-mode``);
* ``results``: the directory each subtask writes its reports into (one JSON file per report);
* ``parallelism``: of the operator ``bind-gpus``;
* ``subtasks_per_gpu``: passed to ``bind_gpus``;
* ``release``: a file; the second record of each subtask waits until it exists (at most ``hold_s``
  seconds), so the job runs, its GPUs bound and its gauges registered, until the test has looked;
* ``fail`` (optional): a file; once it exists, subtask 0 of ``bind-gpus`` fails its first attempt
  while it waits (the others stop waiting); ``restarts`` (optional): restart attempts (fixed delay,
  1 s) after a failure;
* ``gauges`` (default true): whether ``open()`` registers the binding's gauges;
* ``groups`` (default ``[null]``): one operator per entry, all of that parallelism, named ``bind-gpus``,
  ``bind-gpus-2``, ...; an entry names the operator's slot sharing group (null: the default group).
  Operators after the first are not chained: each runs as a task of its own, in the slot of its group
  that holds the subtasks of its index (a second operator of the default group shares the first's
  slots; one of another group takes slots of its own).

``open()`` writes ``open-*.json``: which TaskManager it runs in (the environment variable the test gives
each TaskManager), its operator, subtask index, pid and thread, the infos of
``get_external_resource_infos`` (or the reason for none), what ``bind_gpus(ctx, "gpu", count=1)`` bound
(indices, cuda_visible_devices, devices, holder) and what ``gpus[subtask % n]`` would have picked;
then it registers the binding's gauges. ``close()`` releases the binding and writes ``close-*.json``.
An exception is reported (with its traceback) as ``error``, or ``bind_error`` when binding failed,
instead of failing the job opaquely.

How PyFlink 2.3 runs these (what the cluster test found):

* process mode: ``open()`` and ``map()`` run on a worker thread of the Python worker process,
  ``close()`` on its main thread; one worker per slot (all Python operators of the slot share it) as
  long as ``python.fn-execution.memory.managed`` is true, the default (false: one per operator). The
  worker is a grandchild of the TaskManager JVM (through ``pyflink-udf-runner.sh``) and its
  environment names no slot. ``ctx.get_metrics_group()`` is a Python-side group: a gauge is called
  when a bundle finishes, and its value reaches Flink with that bundle's results, so Flink shows the
  value of the last finished bundle. An idle operator's gauges do not change, and a gauge that raises
  fails the bundle, and with it the task. The job sets ``python.fn-execution.bundle.size`` to 1, so the
  first record's bundle delivers the gauges before the second record waits.
* thread mode: ``open()``, ``map()`` and ``close()`` run on the task's own JVM thread
  (``threading.get_native_id()`` is that thread's id; it lives as long as the task), the context is
  the Java ``StreamingRuntimeContext`` behind ``ctx._runtime_context``: its ``getTaskInfo()`` gives the
  subtask index and ``getAllocationIDAsString()`` (one allocation id per slot, shared by the subtasks
  of one slot), while PyFlink's own ``get_index_of_this_subtask()`` and the other ``get_*`` calls fail
  (``getIndexOfThisSubtask`` was removed from the Java context in Flink 2.0). The function's
  ``close()`` runs only when the input ends: a failed or cancelled task closes its interpreter
  without calling it (its thread ends all the same). PyFlink's own gauges are Java gauges around the
  Python callable: Flink calls them when it reports or answers a metric query, on its
  ``flink-metrics-*`` thread, through pemja with the task thread's interpreter state. A call after the
  task closed its interpreter, before its metric group is closed, crashes the JVM (seen twice). So the
  binding's thread-mode gauges are Java-held values (PyFlink's ``distribution``) that ``map()``
  refreshes with ``update_metrics()``; Flink's threads never call Python for them.
  Cancelling interrupts the task thread, which Python code does not notice: a peer of a failed
  subtask stays CANCELING until its Python returns, so the waits here also end once ``fail`` exists.
"""

import json
import os
import sys
import threading
import time
import traceback
import uuid

from pyflink.common import Configuration, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import MapFunction, RuntimeContext

OPERATOR = "bind-gpus"


def info_properties(infos):
    return sorted(
        ({key: info.get_property(key) for key in info.get_keys()} for info in infos),
        key=lambda properties: int(properties["index"]),
    )


class BindGpus(MapFunction):
    def __init__(self, spec: dict, operator: str):
        self.spec = spec
        self.operator = operator
        self.binding = None
        self.records = 0
        self.report = {}

    def write(self, kind: str, report: dict) -> None:
        name = os.path.join(self.spec["results"], f"{kind}-{uuid.uuid4().hex}.json")
        with open(name + ".tmp", "w") as f:
            json.dump(report, f)
        os.rename(name + ".tmp", name)

    def open(self, runtime_context: RuntimeContext):
        report = {
            "taskmanager": os.environ.get("FLINK_GPU_E2E_TASKMANAGER"),
            "operator": self.operator,
            "pid": os.getpid(),
            "thread": threading.get_native_id(),
        }
        self.report = report
        for step, key in ((self.describe, "error"), (self.bind, "bind_error")):
            try:
                step(runtime_context, report)
            except Exception as error:
                report[key] = "".join(traceback.format_exception(error))
                break
        self.write("open", report)

    def describe(self, runtime_context, report):
        from flink_gpu.pyflink import lookup_external_resource_infos

        java_context = getattr(runtime_context, "_runtime_context", None)
        if java_context is not None:
            task = java_context.getTaskInfo()
            report.update(
                subtask=int(task.getIndexOfThisSubtask()),
                attempt=int(task.getAttemptNumber()),
                slot=str(task.getAllocationIDAsString()),
            )
        else:
            report.update(
                subtask=runtime_context.get_index_of_this_subtask(),
                attempt=runtime_context.get_attempt_number(),
                slot=None,
            )
        lookup = lookup_external_resource_infos(runtime_context, "gpu")
        report.update(
            mode=lookup.mode, reason=lookup.reason, holder_pid=lookup.holder_pid, infos=info_properties(lookup.infos)
        )
        # what users write today: job-wide subtask index modulo the TaskManager's GPUs
        indices = [info["index"] for info in report["infos"]]
        report["modulo_pick"] = indices[report["subtask"] % len(indices)] if indices else None

    def bind(self, runtime_context, report):
        from flink_gpu.pyflink import bind_gpus

        self.binding = bind_gpus(runtime_context, "gpu", count=1, subtasks_per_gpu=self.spec["subtasks_per_gpu"])
        report.update(
            bound=list(self.binding.indices),
            bound_infos=info_properties(self.binding.infos),
            holder=self.binding.holder,
            cuda_visible_devices=self.binding.cuda_visible_devices,
        )
        if report["mode"] == "process":
            # what a process-mode worker does before CUDA starts: see only its own GPU
            os.environ["CUDA_VISIBLE_DEVICES"] = self.binding.cuda_visible_devices
        report["devices"] = list(self.binding.devices)
        if self.spec["gauges"]:
            self.binding.register_metrics(runtime_context.get_metrics_group())

    def map(self, value):
        self.records += 1
        if self.binding is not None:
            self.binding.update_metrics()  # thread mode: the gauges are Java-held values, pushed from here
        if self.records == 2:
            deadline = time.monotonic() + self.spec["hold_s"]
            while not os.path.exists(self.spec["release"]) and time.monotonic() < deadline:
                if self.binding is not None:
                    self.binding.update_metrics()
                if self.failing():
                    if self.operator == OPERATOR and self.report.get("subtask") == 0:
                        raise RuntimeError(f"gpu_job: subtask 0 of {self.operator} fails on purpose (attempt 0)")
                    break  # thread mode: a Python loop does not see Flink cancel the task; stop waiting
                time.sleep(0.05)
            self.report["held_until_release"] = os.path.exists(self.spec["release"])
        return value

    def failing(self) -> bool:
        """The first attempt, once the ``fail`` file exists."""
        return (
            self.spec.get("fail") is not None and self.report.get("attempt") == 0 and os.path.exists(self.spec["fail"])
        )

    def close(self):
        report = {key: self.report.get(key) for key in ("taskmanager", "operator", "subtask", "attempt", "pid")}
        report.update(
            thread=threading.get_native_id(),
            records=self.records,
            held_until_release=self.report.get("held_until_release"),
        )
        try:
            if self.binding is not None:
                self.binding.release()
                report["released"] = repr(self.binding)
        except Exception as error:
            report["error"] = "".join(traceback.format_exception(error))
        self.write("close", report)


def main():
    spec = {"groups": [None], "hold_s": 120, "gauges": True, **json.loads(sys.argv[1])}
    config = Configuration()
    config.set_string("python.execution-mode", spec["mode"])
    config.set_string("python.executable", sys.executable)
    config.set_string("python.fn-execution.bundle.size", "1")  # process mode: gauges reach Flink per record
    if spec.get("restarts"):
        config.set_string("restart-strategy.type", "fixed-delay")
        config.set_string("restart-strategy.fixed-delay.attempts", str(spec["restarts"]))
        config.set_string("restart-strategy.fixed-delay.delay", "1 s")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    parallelism = spec["parallelism"]
    # rebalanced round robin: every subtask gets 4 records, so each reaches the one that waits
    records = env.from_collection(list(range(parallelism * 4)), type_info=Types.INT())
    for number, group in enumerate(spec["groups"], start=1):
        name = OPERATOR if number == 1 else f"{OPERATOR}-{number}"
        mapped = records.map(BindGpus(spec, name), output_type=Types.INT()).name(name).set_parallelism(parallelism)
        if number > 1:
            mapped.disable_chaining()
        if group is not None:
            mapped.slot_sharing_group(group)
        mapped.print()
    env.execute(f"flink-gpu e2e ({spec['mode']} mode, groups {spec['groups']}, p={parallelism})")


if __name__ == "__main__":
    main()
