"""PyFlink job for the cluster test: every map subtask reports the GPUs flink_gpu.pyflink finds.

Usage (through ``flink run -py``): gpu_job.py <thread|process> <results dir> <parallelism>

Each subtask writes one JSON file into the results dir from ``open()``: which TaskManager it runs in
(the environment variable the test gives each TaskManager), its pid, and the infos or the reason.
"""

import json
import os
import sys
import uuid

from pyflink.common import Configuration, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import MapFunction, RuntimeContext


class ReportGpus(MapFunction):
    def __init__(self, results_dir: str):
        self.results_dir = results_dir

    def open(self, runtime_context: RuntimeContext):
        from flink_gpu.pyflink import get_external_resource_infos, lookup_external_resource_infos

        report = {"taskmanager": os.environ.get("FLINK_GPU_E2E_TASKMANAGER"), "pid": os.getpid()}
        try:
            lookup = lookup_external_resource_infos(runtime_context, "gpu")
            infos = get_external_resource_infos(runtime_context, "gpu")
            report.update(
                mode=lookup.mode, reason=lookup.reason, holder_pid=lookup.holder_pid,
                infos=sorted(({key: info.get_property(key) for key in info.get_keys()} for info in infos),
                             key=lambda p: p["index"]))
        except Exception as error:  # reported to the test rather than failing the job opaquely
            import traceback

            report["error"] = "".join(traceback.format_exception(error))
        name = os.path.join(self.results_dir, f"{uuid.uuid4().hex}.json")
        with open(name + ".tmp", "w") as f:
            json.dump(report, f)
        os.rename(name + ".tmp", name)

    def map(self, value):
        return value


def main():
    mode, results_dir, parallelism = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = Configuration()
    config.set_string("python.execution-mode", mode)
    config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_collection(list(range(parallelism * 4)), type_info=Types.INT()) \
        .map(ReportGpus(results_dir), output_type=Types.INT()).set_parallelism(parallelism) \
        .print()
    env.execute(f"flink-gpu e2e ({mode} mode)")


if __name__ == "__main__":
    main()
