"""GPU discovery on the simulator's latency model (issue 32; latency_model.py has the host, the profiles
and the paths): Flink's stock script with an nvidia-smi stand-in built against the simulator,
``flink-gpu-discovery``, and the in-process driver's first call in a fresh interpreter and its warm calls,
claiming 1 and 2 of 8 GPUs, in one interleaved run; medians and NVML call counts per path in
``extra_info``. With ``--benchmark-disable`` (CI's smoke run) one round on the profiles that take
milliseconds, which still checks every path's answer and counts.

How many queries a claim makes is asserted by tests/gpu/test_nvml_discovery.py
(test_a_claim_asks_each_needed_query_once_per_gpu_and_no_more), not here: these counts are figures.
"""

from __future__ import annotations

import os
import subprocess

import latency_model
import pytest

from flink_gpu import nvml, simulator

SMI_QUERY = ["--query-gpu=index", "--format=csv,noheader"]  # what nvidia-gpu-discovery.sh asks


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return latency_model.build_standin(tmp_path_factory.mktemp("standin"))


def test_the_nvidia_smi_standin_answers_the_indices_nvml_gives_with_only_init_count_handle_and_index(standin, tmp_path):
    # the session's simulator (conftest.py): what flink-gpu's NVML reads is what the stand-in prints
    counters_file = tmp_path / "counters.json"
    env = {**os.environ, "FLINK_GPU_SIM_COUNTERS_FILE": str(counters_file)}
    done = subprocess.run([str(standin)] + SMI_QUERY, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    indices = [device.index for device in nvml.open_library().devices().devices]
    assert len(indices) > 1
    assert done.stdout.splitlines() == [str(i) for i in indices]
    calls = {
        function: sum(per_device.values())
        for function, per_device in simulator.counters(counters_file)["calls"].items()
    }
    n = len(indices)
    assert calls == {
        "nvmlInit_v2": 1,
        "nvmlDeviceGetCount_v2": 1,
        "nvmlDeviceGetHandleByIndex_v2": n,
        "nvmlDeviceGetIndex": n,
    }


def test_the_nvidia_smi_standin_refuses_a_query_it_does_not_answer(standin):
    # were Flink's script to ask anything else, the stock path would no longer be measured: say so
    done = subprocess.run(
        [str(standin), "--query-gpu=index,uuid", "--format=csv"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--query-gpu=index --format=csv,noheader" in done.stderr and done.stdout == ""


TOPOLOGY_CALLS = {
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
}


@pytest.mark.benchmark(group="latency-model")
def test_latency_model_interleaved(benchmark, stock_script):
    if benchmark.disabled:  # each path once, on the profiles that take milliseconds
        rounds, profiles, warm_up = 1, latency_model.SMOKE_PROFILES, False
    else:
        rounds, profiles, warm_up = latency_model.ROUNDS, tuple(latency_model.PROFILES), True
    results = benchmark.pedantic(latency_model.run, args=(rounds, profiles, warm_up), rounds=1, iterations=1)

    for profile in profiles:
        for amount in latency_model.AMOUNTS:
            # the stand-in makes what it was written to make, on every profile
            assert results.calls(profile, amount, "stock") == {
                "nvmlInit_v2": 1,
                "nvmlDeviceGetCount_v2": 1,
                "nvmlDeviceGetHandleByIndex_v2": latency_model.GPUS,
                "nvmlDeviceGetIndex": latency_model.GPUS,
            }
            for path in latency_model.PATHS:
                if not latency_model.measured(path, amount):
                    continue
                assert len(results.samples[profile, amount, path]) == rounds
                assert results.calls(profile, amount, path), path  # each path reached the simulator's NVML
                # a fresh process's claim of 2 under topology prefer reads the topology; a claim of 1, the
                # topology-ignore paths and a warm worker (it read it on its first claim) read none
                reads = {f for f in results.calls(profile, amount, path) if f in TOPOLOGY_CALLS}
                fresh = path.startswith(("discovery-", "first-"))
                expected = amount == 2 and fresh and path not in latency_model.TOPOLOGY_PATHS
                assert bool(reads) == expected, (profile, amount, path, reads)
    benchmark.extra_info["median_ms"] = {
        f"{profile} | {amount} | {path}": results.median_ms(profile, amount, path)
        for profile in profiles
        for amount in latency_model.AMOUNTS
        for path in latency_model.PATHS
        if latency_model.measured(path, amount)
    }
    benchmark.extra_info["times"] = latency_model.times_table(results)
    benchmark.extra_info["calls"] = latency_model.calls_table(results)
