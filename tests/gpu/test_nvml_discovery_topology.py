"""The NVML backend's choice of two or more GPUs by how they are joined (issue 46): on every simulated
topology a coordinated claim lands on a best joined set of the best health/busy class, also when others
hold part of the host; ``topology: ignore`` is Flink's index order; the topology is read once per process,
never for a claim of one, with O(GPUs x links) NVML calls.

"Best" is computed here from the profile's JSON alone (the simulator's documented spec: ``pcie`` and
``nvlinks``), by brute force over the sets: the most NVLinks summed over the set's pairs, then the best
worst PCIe level of a pair. Each scenario runs in a fresh Python process (NVML starts once per process).
"""

import itertools
import json
import os
import subprocess
import sys

import pytest

from conftest import child_env
from flink_gpu import simulator

TOPOLOGIES = (
    "h100-hgx-8",
    "h100-hgx-8-linkdown",
    "rtx3090-bridged-4",
    "rtx3090-bridged-4-linkdown",
    "a100-nvlink-pairs-4",
    "l40s-2socket-4",
)

#: the NVML functions of a topology read; a claim of one and ``topology: ignore`` make none of them
TOPOLOGY_CALLS = ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus")
TOPOLOGY_PREFIX = "nvmlDeviceGetNvLink"


def topology_calls(counted):
    """{function: calls, all devices together} of the topology functions in simulator counters."""
    return {
        function: sum(per_device.values())
        for function, per_device in counted["calls"].items()
        if function in TOPOLOGY_CALLS or function.startswith(TOPOLOGY_PREFIX)
    }


def instant(spec):
    """``spec`` without its latency model: the scenarios are many, the answer does not depend on it."""
    return {key: value for key, value in spec.items() if key != "latency_ms"}


def profile_spec(name):
    with open(simulator.profile_path(name), encoding="utf-8") as handle:
        return instant(json.load(handle))


# --- the independent model of the spec: PCIe levels, NVLinks per pair, health classes ---------------------

PIX, PXB, PHB, NODE, SYS = 1, 2, 3, 4, 5  # INTERNAL (one board) is 0; lower is closer


def pcie_level(a, b):
    """The common PCIe ancestor of two spec devices, as the simulator documents it."""
    pa, pb = a.get("pcie"), b.get("pcie")
    if pa is None and pb is None:
        return PHB  # each on a switch of its own under the shared host bridge
    pa, pb = pa or {}, pb or {}
    if pa.get("board") is not None and pa.get("board") == pb.get("board"):
        return 0
    sa, sb = pa.get("switches", []), pb.get("switches", [])
    if sa and sb and sa[-1] == sb[-1]:
        return PIX
    if set(sa) & set(sb):
        return PXB
    if pa.get("host_bridge", "shared") == pb.get("host_bridge", "shared"):
        return PHB
    if pa.get("numa_node", 0) == pb.get("numa_node", 0):
        return NODE
    return SYS


def active(links):
    return [link for link in links if link.get("active", True)]


def nvlinks_between(devices, i, j):
    """Active NVLinks joining GPUs i and j: a bridge's links as both ends count them (the fewer), plus the
    links each has to the NVSwitches both reach (the fewer of the two sums)."""
    li, lj = active(devices[i].get("nvlinks", [])), active(devices[j].get("nvlinks", []))
    direct = min(
        sum(1 for link in li if link.get("to", {}).get("gpu") == j),
        sum(1 for link in lj if link.get("to", {}).get("gpu") == i),
    )

    def switches(links):
        out = {}
        for link in links:
            bus = link.get("to", {}).get("switch")
            if bus is not None:
                out[bus] = out.get(bus, 0) + 1
        return out

    si, sj = switches(li), switches(lj)
    shared = set(si) & set(sj)
    return direct + min(sum(si[s] for s in shared), sum(sj[s] for s in shared))


def degraded(device):
    """The nvlink check: some but not all NVLinks inactive is degraded (all inactive only in an NVSwitch
    fabric, and none of these profiles has that)."""
    links = device.get("nvlinks", [])
    inactive = len(links) - len(active(links))
    return 0 < inactive < len(links)


def score(devices, members):
    """What a set is chosen by: more NVLinks summed over its pairs, then the better worst PCIe level."""
    pairs = list(itertools.combinations(sorted(members), 2))
    return (
        sum(nvlinks_between(devices, i, j) for i, j in pairs),
        -max((pcie_level(devices[i], devices[j]) for i, j in pairs), default=0),
    )


def best_sets(devices, held, amount):
    """Every best joined set of ``amount`` among the free GPUs: the healthy ones first (a degraded GPU only
    when the healthy are too few, and then every healthy one is taken), best score within the last class."""
    free = [i for i in range(len(devices)) if i not in held]
    healthy = [i for i in free if not degraded(devices[i])]
    worse = [i for i in free if degraded(devices[i])]
    if len(healthy) >= amount:
        fixed, pool, need = [], healthy, amount
    else:
        fixed, pool, need = healthy, worse, amount - len(healthy)
    sets = [set(fixed) | set(chosen) for chosen in itertools.combinations(pool, need)]
    best = max(score(devices, s) for s in sets)
    return [s for s in sets if score(devices, s) == best]


# --- claims in a child process: a new coordinated driver per scenario, one NVML start-up ------------------

CLAIMS = r"""
import json, os, sys
from flink_gpu import GPUDriver, simulator
arguments = json.loads(sys.argv[1])
out = []
for path, amount, topology in arguments["claims"]:
    config = {"discovery-mode": "nvml", "topology": topology,
              "discovery-script.args": "--enable-coordination-mode --coordination-file " + path}
    with GPUDriver(config) as driver:
        got = sorted(int(info.index) for info in driver.retrieve_resource_info(amount))
    out.append({"got": got, "counters": simulator.counters()})
print(json.dumps(out))
"""


def claim_in_one_process(spec, claims):
    """``claims``: [(coordination file, amount, topology)], made one after the other by one process on the
    simulated host ``spec``: per claim the GPUs it got and the simulator's counters after it."""
    done = simulator.run(
        [sys.executable, "-c", CLAIMS, json.dumps({"claims": [[str(p), a, t] for p, a, t in claims]})],
        spec=spec,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def holds(devices):
    """What other holders hold in the scenarios: nothing, each single GPU, each pair of GPUs (the 4-GPU
    hosts) or a spread of three (the 8-GPU ones)."""
    n = len(devices)
    out = [()] + [(i,) for i in range(n)]
    out += list(itertools.combinations(range(n), 2)) if n <= 4 else [(0, 3, 5), (1, 2, 7), (0, 1), (2, 4)]
    return out


@pytest.mark.parametrize("profile", TOPOLOGIES)
def test_a_claim_of_two_or_four_lands_on_a_best_joined_set_of_the_best_class(tmp_path, profile):
    spec = profile_spec(profile)
    devices = spec["devices"]
    scenarios, claims = [], []
    for k, held in enumerate(holds(devices)):
        for amount in (2, 4):
            if len(devices) - len(held) < amount:
                continue
            path = tmp_path / f"coordination-{k}-{amount}"
            path.write_text("".join(f"{i} {os.getpid()}\n" for i in held))  # a live holder: this test
            scenarios.append((held, amount))
            claims.append((path, amount, "prefer"))
    results = claim_in_one_process(spec, claims)
    wrong = [
        (held, amount, result["got"], [sorted(s) for s in best_sets(devices, set(held), amount)])
        for (held, amount), result in zip(scenarios, results, strict=True)
        if set(result["got"]) not in best_sets(devices, set(held), amount)
    ]
    assert wrong == [], "(held, amount, got, best sets)"
    assert len(results) >= len(devices) + 1  # the scenarios ran


def test_the_model_sees_what_the_profiles_are_made_of():
    """The model above is no tautology: on the bridged profile the best pairs are the bridged ones, which
    index order splits; with a bridge's links half down, its GPUs are degraded and the other pair is best."""
    bridged = profile_spec("rtx3090-bridged-4")["devices"]
    assert [sorted(s) for s in best_sets(bridged, set(), 2)] == [[0, 2], [1, 3]]
    linkdown = profile_spec("rtx3090-bridged-4-linkdown")["devices"]
    assert [sorted(s) for s in best_sets(linkdown, set(), 2)] == [[1, 3]]
    assert [sorted(s) for s in best_sets(profile_spec("a100-nvlink-pairs-4")["devices"], {0}, 2)] == [[2, 3]]
    assert [sorted(s) for s in best_sets(profile_spec("l40s-2socket-4")["devices"], {1}, 2)] == [[2, 3]]


def bridged_8():
    """An 8-GPU PCIe host with NVLink bridges on the pairs 0-2, 1-3, 4-6 and 5-7 (the rtx3090 profile twice,
    the second half on the other socket)."""
    devices = profile_spec("rtx3090-bridged-4")["devices"]
    more = []
    for k, device in enumerate(json.loads(json.dumps(devices))):
        device["nvlinks"] = [{**link, "to": {"gpu": link["to"]["gpu"] + 4}} for link in device["nvlinks"]]
        device["pcie"] = {"host_bridge": f"host bridge {'CD'[k // 2]}", "numa_node": 1}
        more.append(device)
    return {"devices": devices + more}


HOLDING_WORKER = r"""
import json, sys
from flink_gpu import GPUDriver
driver = GPUDriver({"discovery-mode": "nvml",
                    "discovery-script.args": "--enable-coordination-mode --coordination-file " + sys.argv[1]})
print(json.dumps(sorted(int(info.index) for info in driver.retrieve_resource_info(2))), flush=True)
sys.stdin.readline()  # hold until told to go
driver.close()
"""


def test_four_taskmanagers_claiming_two_each_on_a_bridged_host_each_get_a_whole_bridged_pair(tmp_path):
    path = tmp_path / "coordination"
    workers = [
        simulator.popen(
            [sys.executable, "-c", HOLDING_WORKER, str(path)],
            spec=bridged_8(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for _ in range(4)
    ]
    try:
        got = sorted(json.loads(worker.stdout.readline()) for worker in workers)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    assert got == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_topology_ignore_takes_index_order_and_reads_no_topology(tmp_path):
    bridged = profile_spec("rtx3090-bridged-4")
    [prefer] = claim_in_one_process(bridged, [(tmp_path / "a", 2, "prefer")])
    assert prefer["got"] in ([0, 2], [1, 3]) and topology_calls(prefer["counters"]) != {}
    [ignore] = claim_in_one_process(bridged, [(tmp_path / "b", 2, " Ignore ")])  # case and blanks ignored
    assert ignore["got"] == [0, 1]
    assert topology_calls(ignore["counters"]) == {}


def test_a_claim_of_one_reads_no_topology(tmp_path):
    [one] = claim_in_one_process(profile_spec("h100-hgx-8"), [(tmp_path / "c", 1, "prefer")])
    assert one["got"] == [0]
    assert topology_calls(one["counters"]) == {}


def test_a_process_reads_the_topology_once_with_calls_per_gpu_and_link_not_per_pair_per_claim(tmp_path):
    spec = profile_spec("h100-hgx-8")
    gpus, links = len(spec["devices"]), len(spec["devices"][0]["nvlinks"])
    claims = [(tmp_path / f"c{k}", 2, "prefer") for k in range(4)] + [(tmp_path / "d", 4, "prefer")]
    results = claim_in_one_process(spec, claims)
    first = topology_calls(results[0]["counters"])
    assert all(topology_calls(result["counters"]) == first for result in results[1:])  # no call after the first
    per_link = gpus * links
    assert first == {
        "nvmlDeviceGetNvLinkState": per_link,
        "nvmlDeviceGetNvLinkRemoteDeviceType": per_link,
        "nvmlDeviceGetNvLinkRemotePciInfo_v2": per_link,
        "nvmlDeviceGetTopologyCommonAncestor": gpus * (gpus - 1) // 2,
    }
