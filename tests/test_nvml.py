"""flink_gpu.nvml's topology read on the simulator's public layouts: the matrix as `nvidia-smi topo -m` shows it,
each GPU's NVLinks, read once per process, and the nvlink health check it judges."""

import json

import pytest

from conftest import run_python, simulated_env

READ = """
import json
from flink_gpu import nvml, simulator

def calls():
    return sum(n for by_gpu in simulator.counters()["calls"].values() for n in by_gpu.values())

library = nvml.open_library()
simulator.reset_counters()
first = nvml.topology()
first_calls = calls()
simulator.reset_counters()
second = nvml.topology([0, 1])
second_calls = calls()
states = library.states(1, topology=first)
print(json.dumps({
    "gpus": first.gpus,
    "matrix": first.matrix,
    "nvlinks": [[n.known, n.count, n.inactive, n.to_switch] for n in first.nvlinks],
    "numa": first.numa,
    "stalls": first.stalls,
    "calls": [first.calls, first_calls, second.calls, second_calls],
    "second": second.matrix,
    "between": [first.between(0, 2).cell, first.between(0, 1).pcie],
    "best": first.best_set([0, 1, 3], 2),
    "nvlink_check": [[c.outcome, c.finding] for s in states for c in s.checks if c.name == "nvlink"],
    "health": [s.health for s in states],
}))
"""


def read(profile):
    return json.loads(run_python(READ, env=simulated_env(profile=profile)).stdout)


def test_a_bridged_pcie_host_reads_as_nvidia_smi_shows_it_once_per_process():
    got = read("rtx3090-bridged-4")
    assert got["gpus"] == [0, 1, 2, 3]
    assert got["matrix"] == [
        ["X", "PHB", "NV4", "NODE"],
        ["PHB", "X", "NODE", "NV4"],
        ["NV4", "NODE", "X", "PHB"],
        ["NODE", "NV4", "PHB", "X"],
    ]
    assert got["nvlinks"] == [[True, 4, 0, False]] * 4
    assert got["numa"] == [None] * 4  # no sysfs entry for a simulated bus id
    assert got["stalls"] == []
    first_record, first_counted, second_record, second_counted = got["calls"]
    assert first_counted >= first_record > 0  # gpus None: the enumeration's calls as well
    assert second_record == second_counted == 0  # kept: the second read makes no NVML call
    assert got["second"] == [["X", "PHB"], ["PHB", "X"]]
    assert got["between"] == ["NV4", "PHB"]
    assert got["best"] == [1, 3]  # of 0, 1, 3 the bridged pair
    assert got["nvlink_check"] == [["ok", None]] * 4
    assert got["health"] == ["ok"] * 4


def test_an_hgx_host_joins_every_pair_by_eighteen_nvlinks_through_its_switches():
    got = read("h100-hgx-8")
    assert got["matrix"] == [["X" if a == b else "NV18" for b in range(8)] for a in range(8)]
    assert got["nvlinks"] == [[True, 18, 0, True]] * 8
    assert got["calls"][3] == 0


def test_the_nvlink_check_judges_inactive_links_and_says_why_it_does_not_apply():
    down = read("h100-hgx-8-linkdown")
    assert down["nvlink_check"][5] == ["finding", "4 of 18 NVLinks inactive"]
    assert down["health"][5] == "degraded: 4 of 18 NVLinks inactive"
    # a PCIe board whose bridge trains no link: nothing to judge, and why
    pairs = read("a100-nvlink-pairs-4")
    assert pairs["nvlink_check"][2] == ["not applicable", "no active NVLink"]
    assert pairs["health"][2] == "ok"


def test_a_bad_gpu_number_is_refused_naming_it():
    proc = run_python("from flink_gpu import nvml\nnvml.topology([-1])", env=simulated_env(devices=2), check=False)
    assert "A GPU's NVML number is a whole number of at least 0, got -1." in proc.stderr


@pytest.mark.parametrize("topology", ["x", 3])
def test_states_refuse_a_topology_that_is_not_one(topology):
    code = f"from flink_gpu import nvml\nnvml.open_library().states(1, topology={topology!r})"
    proc = run_python(code, env=simulated_env(devices=2), check=False)
    assert "topology must be a Topology from Nvml.topology()" in proc.stderr
