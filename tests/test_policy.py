"""The one discovery and the one bind (flink_gpu.policy, csrc/policy/): typed records, one call each, against
the simulator in a process of their own (NVML reads its spec once per process)."""

import json

from conftest import run_python, simulated_env

DISCOVER = r"""
import json, os
from flink_gpu import nvml, policy
library = nvml.open_library()
indices = [d.gpu_index for d in library.devices().devices]
args = json.loads(os.environ["POLICY_ARGS"])
try:
    outcome = policy.discover(library, args["amount"], indices, owner=os.getpid(), busy_gpus=args["busy"],
                              coordination_file=args.get("file"))
except (TypeError, ValueError) as error:
    print(json.dumps({"error": [type(error).__name__, str(error)]}))
else:
    left_out = [[gpu.index, gpu.why] for gpu in outcome.left_out]
    print(json.dumps({"type": type(outcome).__name__, "chosen": outcome.chosen, "order": outcome.order,
                      "added": outcome.added, "left_out": left_out, "shortage": outcome.shortage}))
"""

SPEC = {"devices": [{"health": {"inforom_corrupted": True}}, {}, {}]}


def discover(**args):
    env = dict(simulated_env(spec=SPEC), POLICY_ARGS=json.dumps({"busy": "avoid", **args}))
    proc = run_python(DISCOVER, env=env)
    return json.loads(proc.stdout)


def test_a_discovery_is_one_typed_record_of_the_chosen_the_order_and_what_was_left_out():
    got = discover(amount=2)
    assert got["type"] == "DiscoveryOutcome"
    assert got["chosen"] == ["1", "2"] and got["order"] == ["1", "2"]
    assert got["left_out"] == [["0", "unhealthy: InfoROM corrupted"]]
    assert got["shortage"] is None and got["added"] == []


def test_too_few_usable_gpus_are_the_records_shortage_naming_each_one_left_out():
    got = discover(amount=3)
    assert got["chosen"] == []
    assert got["shortage"] == (
        "Could not get enough GPU resources: 3 GPUs requested, but 2 of the 3 devices NVML lists are usable: GPU 0 "
        "is left out (unhealthy: InfoROM corrupted)."
    )


def test_a_coordinated_discovery_claims_in_the_file_it_is_given(tmp_path):
    path = tmp_path / "coordination"
    got = discover(amount=1, file=str(path))
    assert got["chosen"] == ["1"] and got["added"] == ["1"]
    assert path.read_text().split()[0] == "1"


def test_a_bad_busy_gpus_value_or_amount_is_a_clear_error():
    assert discover(amount=1, busy="sometimes")["error"] == [
        "ValueError",
        "Unknown busy-gpus value 'sometimes': use one of avoid, exclude, ignore.",
    ]
    assert discover(amount=-1)["error"][0] == "ValueError"
