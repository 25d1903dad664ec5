"""One contending worker: ``python _contend.py IMPL PATH CYCLES AMOUNT WORKER``.

IMPL is ``flink_gpu`` (new GPUDriver in coordination mode, retrieve, close),
``coordination_api`` (flink_gpu.coordination.claim + release), ``pynvml``
(baseline_pynvml.claim + release) or ``floor`` (only the syscalls, syscall_floor.py; its cycles run in
C, the library compiled beforehand is named by ``FLINK_GPU_BENCH_FLOOR``; WORKER, the worker's number,
is its lease byte). The GPUs are those of the simulator (``FLINK_GPU_SIM_DEVICES``). The worker imports
and initialises NVML first, prints ``ready``, waits for a line on stdin (so that all workers start
together), then runs CYCLES claim + release cycles on the coordination file PATH and prints one JSON
line: the monotonic start and end (CLOCK_MONOTONIC is system-wide, so the parent can compute the wall
time of all workers) and each cycle's latency in nanoseconds.
"""

import json
import os
import sys
import time


def main() -> None:
    impl, path, cycles, amount = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    worker = int(sys.argv[5])
    indices = [str(i) for i in range(int(os.environ["FLINK_GPU_SIM_DEVICES"]))]
    if impl == "flink_gpu":
        from flink_gpu import GPUDriver

        config = {
            "discovery-mode": "nvml",
            "discovery-script.args": f"--enable-coordination-mode --coordination-file {path}",
        }

        def cycle():
            driver = GPUDriver(config)
            got = driver.retrieve_resource_info(amount)
            driver.close()
            return got
    elif impl == "coordination_api":
        from flink_gpu import coordination

        def cycle():
            got = coordination.claim(amount, indices, path=path).taken
            coordination.release(path=path)
            return got
    elif impl == "pynvml":
        import baseline_pynvml  # beside this script, so on sys.path

        def cycle():
            got = baseline_pynvml.claim(amount, path)
            baseline_pynvml.release(path)
            return got
    elif impl == "floor":
        import syscall_floor

        # lines of GPUs nobody else claims, so the workers' claims never collide on the same bytes
        mine = indices[worker * amount : (worker + 1) * amount]
        floor = syscall_floor.Floor(
            os.environ["FLINK_GPU_BENCH_FLOOR"], path, syscall_floor.real_lines(path, amount, mine), slot=32768 + worker
        )
        # no warm-up cycle here: another worker's real claim (in its real_lines) would judge this
        # worker's floor lines dead (their lease byte is free between cycles) and remove them; the
        # measured cycles start only once every worker is ready, with no real claim left
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        latencies = floor.cycles(cycles)
        end = time.monotonic()
        print(json.dumps({"start": start, "end": end, "latencies_ns": latencies}), flush=True)
        return
    else:
        raise SystemExit(f"unknown implementation {impl!r}")

    if len(cycle()) != amount:  # warm-up: NVML initialised, modules imported, caches filled
        raise SystemExit("warm-up claim returned the wrong number of GPUs")
    print("ready", flush=True)
    sys.stdin.readline()
    clock = time.perf_counter_ns
    latencies = []
    start = time.monotonic()
    for _ in range(cycles):
        t0 = clock()
        got = cycle()
        latencies.append(clock() - t0)
        if len(got) != amount:
            raise SystemExit(f"claimed {len(got)} GPUs instead of {amount}")
    end = time.monotonic()
    print(json.dumps({"start": start, "end": end, "latencies_ns": latencies}), flush=True)


if __name__ == "__main__":
    main()
