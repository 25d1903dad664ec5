"""flink-gpu-discovery against Flink's stock nvidia-gpu-discovery.sh (docs/design.md §6.1): for the same
arguments on the same (simulated) host, the same stdout and exit code. The stock script sees the
host through a fake nvidia-smi, ours through the NVML simulator; both report the same 4 GPUs."""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from flink_gpu import coordination, simulator
from support.faults import child_env, holders, line_of
from support.files import make_odd_path
from support.interop import fake_nvidia_smi, stock_env
from support.simulated import NOT_HOST_PIDS, pids_are_hosts, wait_until_inside_a_hang
from support.waiting import SOURCE as WAITING_SOURCE

GPUS = 4


@pytest.fixture
def runners(stock_script, discovery_exe, tmp_path):
    our_env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    our_env.update(simulator.environment(devices=GPUS))
    return {
        "stock": (["bash", str(stock_script)], stock_env(fake_nvidia_smi(tmp_path / "bin", GPUS))),
        "ours": ([discovery_exe], our_env),
    }


def run(runner, args):
    command, env = runner
    proc = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=60)
    return proc.stdout, proc.returncode


@pytest.mark.parametrize(
    "args",
    [
        [],  # usage line, exit 1
        ["2"],
        ["0"],  # nothing printed, exit 0
        ["4"],
        ["5"],  # more than present
        ["2", "null"],  # what Flink passes when discovery-script.args is unset
        ["1", "--foo", "bar", "null"],  # unknown tokens are ignored
        ["2", "--enable-coordination"],  # the typo in Flink's docs: not coordination mode
        ["2", "--coordination-file"],  # no value: the stock script keeps going
        ["2", "--coordination-file", ""],  # an empty value: the same
    ],
)
def test_same_output_and_exit_code_as_the_stock_script(runners, args):
    assert run(runners["ours"], args) == run(runners["stock"], args)


def test_unknown_tokens_are_noted_on_stderr_only(runners):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "2", "--enable-coordination"], env=env, capture_output=True, text=True)
    assert proc.stdout == "0,1\n"
    assert "--enable-coordination" in proc.stderr and "did you mean --enable-coordination-mode" in proc.stderr


def test_an_abbreviated_flag_gets_the_flag_suggested_on_stderr(runners):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "2", "--enable-coord"], env=env, capture_output=True, text=True)
    assert proc.stdout == "0,1\n"
    assert "ignoring unknown argument '--enable-coord' (did you mean --enable-coordination-mode?)" in proc.stderr


def test_an_unrelated_unknown_token_lists_the_known_flags_on_stderr(runners):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "2", "--verbose"], env=env, capture_output=True, text=True)
    assert proc.stdout == "0,1\n"
    assert "'--verbose'" in proc.stderr and "did you mean" not in proc.stderr
    assert "--enable-coordination-mode" in proc.stderr and "--coordination-file PATH" in proc.stderr


@pytest.mark.parametrize("args", [["--coordination-file"], ["--coordination-file", ""]])
def test_a_missing_coordination_file_value_falls_back_to_the_default_with_a_note(runners, args):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "2", *args], env=env, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, "0,1\n")
    assert "--coordination-file has no value" in proc.stderr
    assert "default coordination file /var/tmp/flink-gpu-coordination" in proc.stderr


def test_too_few_gpus_explains_on_stderr(runners):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "5"], env=env, capture_output=True, text=True)
    assert proc.stdout == "Could not get enough GPU resources.\n"
    assert "5 GPUs requested, but 4 of the 4 devices NVML lists are usable." in proc.stderr


def test_a_bad_amount_is_an_error_not_an_empty_answer(runners):
    command, env = runners["ours"]
    proc = subprocess.run([*command, "two"], env=env, capture_output=True, text=True)
    assert (proc.stdout, proc.returncode) == ("", 1)
    assert "'two'" in proc.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_in_place_of_the_amount_prints_the_usage_and_after_it_is_an_unknown_argument(runners, tmp_path, flag):
    """`flink-gpu-discovery --help` was an error ("the GPU amount must be a non-negative integer"). Flink passes the
    amount first, so --help after it stays an argument the script ignores, as the stock script does."""
    command, env = runners["ours"]
    no_nvml = {**env, "FLINK_GPU_NVML_LIBRARY": str(tmp_path / "missing-libnvidia-ml.so.1")}  # none is asked
    proc = subprocess.run([*command, flag], env=no_nvml, capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("Usage: flink-gpu-discovery <amount> [--enable-coordination-mode] ")
    for text in (
        "--coordination-file PATH",
        "default: /var/tmp/flink-gpu-coordination",
        "--busy-gpus VALUE",
        "avoid, exclude, ignore",
        "--topology VALUE",
        "prefer, ignore",
        "--nvml-timeout DURATION",
        "default 5 s",
        '"Could not get enough GPU resources."',
        "Exit codes: 0 ",
    ):
        assert text in proc.stdout, text
    coord = tmp_path / "coord"
    more = subprocess.run(
        [*command, flag, "2", "--enable-coordination-mode", "--coordination-file", coord],
        env=no_nvml,
        capture_output=True,
        text=True,
    )
    assert (more.returncode, more.stdout) == (0, proc.stdout) and not coord.exists()
    after = subprocess.run([*command, "2", flag], env=env, capture_output=True, text=True)
    assert (after.returncode, after.stdout) == (0, "0,1\n")
    assert f"ignoring unknown argument '{flag}'" in after.stderr


class TaskManager:
    """A long-lived parent for one discovery run: the owner recorded in the coordination file."""

    def __init__(self, runner, args):
        command, env = runner
        self.proc = subprocess.Popen(
            ["sh", "-c", '"$@"; echo "rc=$?"; exec sleep 600', "sh", *command, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        lines = []
        for line in self.proc.stdout:
            if line.startswith("rc="):
                self.result = ("".join(lines), int(line[3:]))
                return
            lines.append(line)
        raise AssertionError(f"the discovery parent ended early: {lines}")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def test_coordinated_claim_sequences_match(runners, tmp_path):
    """The same sequence of TaskManagers on two files, one per implementation."""
    outcomes = {}
    for name, runner in runners.items():
        path = str(tmp_path / f"coordination-{name}")

        def claim(amount, runner=runner, path=path):  # this round's (called within it)
            return TaskManager(runner, [str(amount), "--enable-coordination-mode", "--coordination-file", path])

        owners = []
        try:
            owners.append(claim(2))  # 0,1
            owners.append(claim(1))  # 2
            owners.append(claim(2))  # only 3 is free: fails, writes nothing
            owners[0].kill()  # 0,1 become reclaimable
            owners.append(claim(2))  # free 3 first, then the dead owner's 0
            owners.append(claim(1))  # 1 is left
            outcomes[name] = [owner.result for owner in owners]
            with open(path) as f:
                holders = sorted((line.split()[0], int(line.split()[1])) for line in f)
            pids = {owner.proc.pid: i for i, owner in enumerate(owners)}
            outcomes[name + " holders"] = [(index, pids[pid]) for index, pid in holders]
        finally:
            for owner in owners:
                owner.kill()
    assert (
        outcomes["ours"]
        == outcomes["stock"]
        == [("0,1\n", 0), ("2\n", 0), ("Could not get enough GPU resources.\n", 1), ("3,0\n", 0), ("1\n", 0)]
    )
    # the file says the same: who holds what after the sequence
    assert outcomes["ours holders"] == outcomes["stock holders"] == [("0", 3), ("1", 4), ("2", 1), ("3", 3)]


def test_the_parent_asking_again_keeps_its_gpus(runners, tmp_path):
    """Where we depart from the stock script on purpose (docs/design.md §5.2): a TaskManager that runs
    discovery twice gets the same GPUs instead of two more."""
    command, env = runners["ours"]
    path = str(tmp_path / "coordination")
    script = '"$@"; "$@"; echo "rc=$?"'
    proc = subprocess.run(
        ["sh", "-c", script, "sh", *command, "2", "--enable-coordination-mode", "--coordination-file", path],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout == "0,1\n0,1\nrc=0\n"


def test_an_answer_that_cannot_be_written_is_a_failure(runners):
    """Flink reads the indices from stdout: exit 0 with nothing delivered would start a
    TaskManager without its GPUs and no reason."""
    command, env = runners["ours"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*command, "2"], env=env, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1
    assert "cannot write the GPU indices" in proc.stderr


@pytest.mark.parametrize(
    "amount", ["9223372036854775808", "18446744073709551617", "99999999999999999999", "1" + "0" * 40]
)
@pytest.mark.parametrize("coordinated", [False, True])
def test_an_amount_beyond_64_bits_is_too_many_gpus(runners, tmp_path, amount, coordinated):
    """Like the largest amount both read (below): not enough GPUs. Where we depart from the stock script
    on purpose (docs/design.md §11): its bash wraps such an amount around, so that it printed all four
    GPUs (claiming them in coordination mode) or only the first, exit 0, as the wrapped value fell."""
    path = tmp_path / "coordination"
    args = [amount, "--enable-coordination-mode", "--coordination-file", str(path)] if coordinated else [amount]
    command, env = runners["ours"]
    proc = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.stdout, proc.returncode) == ("Could not get enough GPU resources.\n", 1)
    assert f"{amount} GPUs requested, more than any host has" in proc.stderr
    assert not path.exists()


def test_the_largest_64_bit_amount_is_too_many_gpus_as_in_the_stock_script(runners):
    largest = str(2**63 - 1)
    assert (
        run(runners["ours"], [largest])
        == run(runners["stock"], [largest])
        == ("Could not get enough GPU resources.\n", 1)
    )


@pytest.mark.parametrize("amount", ["-9223372036854775809", "-99999999999999999999"])
def test_a_negative_amount_beyond_64_bits_is_a_bad_amount(runners, amount):
    """As any negative amount (the stock script's bash wraps the first one around to 2**63 - 1 and
    printed all four GPUs)."""
    command, env = runners["ours"]
    proc = subprocess.run([*command, amount], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.stdout, proc.returncode) == ("", 1)
    assert f"the GPU amount must be a non-negative integer, got '{amount}'" in proc.stderr


# --- the choice by GPU state (csrc/nvml/choice.*): beyond the stock script ----------------------


def run_spec(discovery_exe, spec, args):
    proc = simulator.run([discovery_exe, *args], spec=spec, capture_output=True, text=True, timeout=60)
    return proc.stdout, proc.returncode, proc.stderr


FOREIGN = [{"pid": 4000000001, "used_memory": 1 << 20}]


@pytest.mark.parametrize("args", [["2", "--busy-gpus", "exclude"], ["2", "--busy-gpus", "ignore", "--foo"]])
def test_busy_gpus_on_an_idle_host_answers_as_the_stock_script(runners, args):
    # the stock script skips --busy-gpus and its value as unknown tokens
    assert run(runners["ours"], args) == run(runners["stock"], args)


@pytest.mark.parametrize("args", [["2", "--busy-gpus", "sometimes"], ["2", "--busy-gpus"], ["0", "--busy-gpus", "x"]])
def test_an_unknown_busy_gpus_value_is_an_error_naming_the_flag_and_the_values(discovery_exe, args):
    out, code, err = run_spec(discovery_exe, {"devices": [{}, {}]}, args)
    assert (out, code) == ("", 1)
    value = args[2] if len(args) > 2 else ""
    assert (
        f"flink-gpu-discovery: Invalid value '{value}' for --busy-gpus: expected one of avoid, exclude, ignore." in err
    )


def bridged_host():
    """rtx3090-bridged-4 without its latency model: NVLink bridges on 0-2 and 1-3, which index order splits."""
    with open(simulator.profile_path("rtx3090-bridged-4"), encoding="utf-8") as handle:
        return {k: v for k, v in json.load(handle).items() if k != "latency_ms"}


def topology_calls(counters_file):
    calls = simulator.counters(counters_file)["calls"]
    return sorted(
        f
        for f in calls
        if f.startswith("nvmlDeviceGetNvLink") or f in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus")
    )


@pytest.mark.parametrize(
    "args, out, reads",
    [
        (["2"], ("0,2\n", "1,3\n"), True),  # prefer, the default: a bridged pair
        (["2", "--topology", "prefer"], ("0,2\n", "1,3\n"), True),
        (["2", "--topology", "ignore"], ("0,1\n",), False),  # Flink's index order, no topology read
        (["2", "--topology", " Ignore "], ("0,1\n",), False),
        (["1"], ("0\n",), False),  # a claim of one reads no topology
    ],
)
def test_the_topology_flag_chooses_between_the_best_joined_pair_and_index_order(
    discovery_exe, tmp_path, args, out, reads
):
    counters = tmp_path / "counters.json"
    proc = simulator.run(
        [discovery_exe, *args], spec=bridged_host(), counters_file=counters, capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout in out) == (0, True), proc.stderr
    assert bool(topology_calls(counters)) == reads


@pytest.mark.parametrize("args", [["2", "--topology", "nvlink"], ["2", "--topology"]])
def test_an_unknown_topology_value_is_an_error_naming_the_flag_and_the_values(discovery_exe, args):
    out, code, err = run_spec(discovery_exe, {"devices": [{}, {}]}, args)
    assert (out, code) == ("", 1)
    value = args[2] if len(args) > 2 else ""
    assert f"flink-gpu-discovery: Invalid value '{value}' for --topology: expected one of prefer, ignore." in err


def test_an_unhealthy_gpu_is_never_printed_and_its_reason_is_on_stderr(discovery_exe):
    spec = {"devices": [{"health": {"row_remap_failure": True}}, {}, {"health": {"retired_pages_pending": True}}]}
    out, code, err = run_spec(discovery_exe, spec, ["2"])
    assert (out, code) == ("1,2\n", 0)  # the degraded GPU only after every healthy one
    assert "GPU 0 left out: unhealthy: row remapping failed" in err
    out, code, err = run_spec(discovery_exe, spec, ["3"])
    assert (out, code) == ("Could not get enough GPU resources.\n", 1)
    assert "GPU 0 is left out (unhealthy: row remapping failed)" in err


@pytest.mark.parametrize(
    "action, two, note",
    [
        ("none", "0,1\n", None),
        ("gpu_reset", "1,2\n", "GPU 0 left out: unhealthy: GPU recovery action: reset the GPU"),
        ("node_reboot", "1,2\n", "GPU 0 left out: unhealthy: GPU recovery action: reboot the node"),
        ("drain_p2p", "1,2\n", None),  # degraded: printed only after every healthy GPU
        ("drain_and_reset", "1,2\n", "left out: unhealthy: GPU recovery action: drain peer-to-peer traffic and reset"),
        (
            "recover_imex_domain",
            "0,1\n",
            "GPU 0: GPU recovery action: recover the IMEX domain (not a fault of this GPU)",
        ),
        ("bus_reset", "1,2\n", "GPU 0 left out: unhealthy: GPU recovery action: reset the GPU's PCIe bus"),
        ("system_reboot", "1,2\n", "GPU 0 left out: unhealthy: GPU recovery action: reboot the system"),
        (42, "1,2\n", "GPU 0 left out: unhealthy: GPU recovery action 42 (unknown to this build"),
    ],
)
def test_the_recovery_action_is_judged_by_its_class(discovery_exe, action, two, note):
    spec = {"devices": [{"health": {"recovery_action": action}}, {}, {}]}
    out, code, err = run_spec(discovery_exe, spec, ["2"])
    assert (out, code) == (two, 0)
    assert note is None or note in err
    if action == "drain_p2p":
        assert run_spec(discovery_exe, spec, ["3"])[:2] == ("0,1,2\n", 0)


@pytest.mark.parametrize(
    "fabric, two, note",
    [
        (
            {"state": "not_started"},
            "1,2\n",
            "GPU 0 left out: unhealthy: NVLink fabric registration not started: CUDA "
            "would fail with error 802; is the Fabric Manager running?",
        ),
        ({"state": "not_started", "struct": "v1"}, "1,2\n", "registration not started"),
        (
            {"state": "in_progress", "struct": "v2"},
            "1,2\n",
            "GPU 0 left out: unhealthy: NVLink fabric registration in progress: transient",
        ),
        ({"state": "completed", "status": 999}, "1,2\n", None),  # degraded: after every healthy GPU
        ({"health_summary": "unhealthy"}, "1,2\n", None),
        ({}, "0,1\n", None),  # completed, no health summary, all-zero cluster UUID: a healthy HGX H100
    ],
)
def test_the_nvlink_fabric_registration_is_judged(discovery_exe, fabric, two, note):
    spec = {"devices": [{"fabric": fabric}, {"fabric": {}}, {"fabric": {}}]}
    out, code, err = run_spec(discovery_exe, spec, ["2"])
    assert (out, code) == (two, 0)
    assert note is None or note in err


def test_too_few_usable_gpus_in_coordination_mode_count_the_hosts_gpus_and_name_those_left_out(discovery_exe, tmp_path):
    unhealthy = {"health": {"row_remap_failure": True}}
    coord = tmp_path / "c"
    out, code, err = run_spec(
        discovery_exe,
        {"devices": [unhealthy, unhealthy, unhealthy, {}]},
        ["2", "--enable-coordination-mode", "--coordination-file", str(coord)],
    )
    assert (out, code) == ("Could not get enough GPU resources.\n", 1)
    assert (
        "Could not get enough GPU resources: 2 GPUs requested, but 1 of the 4 devices NVML lists is usable: GPU 0 "
        "is left out (unhealthy: row remapping failed); GPU 1 is left out (unhealthy: row remapping failed); GPU 2 "
        "is left out (unhealthy: row remapping failed).\n"
    ) in err
    assert "the host has 1 GPU" not in err and ".;" not in err
    assert not coord.exists() or coord.read_text() == ""


@pytest.mark.parametrize(
    "policy, expected",
    [
        (None, ("1,2\n", 0)),
        ("avoid", ("1,2\n", 0)),
        ("ignore", ("0,1\n", 0)),
        ("exclude", ("1,2\n", 0)),
        ("EXCLUDE", ("1,2\n", 0)),
        ("Ignore", ("0,1\n", 0)),  # case ignored, as in the busy-gpus parameter
    ],
)
def test_busy_gpus_policies_choose_around_foreign_processes(discovery_exe, policy, expected):
    spec = {"devices": [{"processes": FOREIGN}, {}, {}]}
    args = ["2"] + (["--busy-gpus", policy] if policy else [])
    assert run_spec(discovery_exe, spec, args)[:2] == expected
    # short of idle GPUs: avoid takes the busy one, exclude refuses
    args3 = ["3"] + (["--busy-gpus", policy] if policy else [])
    out, code, err = run_spec(discovery_exe, spec, args3)
    if policy in ("exclude", "EXCLUDE"):
        assert (out, code) == ("Could not get enough GPU resources.\n", 1)
        assert "GPU 0 is left out (busy: foreign process 4000000001 (compute, not visible" in err
    else:
        assert (out, code) == ("0,1,2\n", 0)


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_a_process_of_the_taskmanagers_own_child_is_not_foreign(discovery_exe):
    # the executable's parent is this test process (the TaskManager's place); its child is own
    child = subprocess.Popen(["sleep", "30"])
    try:
        spec = {"devices": [{"processes": [{"pid": child.pid}]}, {}]}
        assert run_spec(discovery_exe, spec, ["1", "--busy-gpus", "exclude"])[:2] == ("0\n", 0)
        # a process that is neither ours nor our descendants' (our parent's) is foreign
        spec = {"devices": [{"processes": [{"pid": os.getppid()}]}, {}]}
        assert run_spec(discovery_exe, spec, ["1", "--busy-gpus", "exclude"])[:2] == ("1\n", 0)
    finally:
        child.kill()
        child.wait()


def test_coordinated_claim_takes_idle_healthy_gpus_first(discovery_exe, tmp_path):
    path = tmp_path / "coordination"
    spec = {"devices": [{"processes": FOREIGN}, {"health": {"row_remap_pending": True}}, {}, {}]}
    base = ["--enable-coordination-mode", "--coordination-file", str(path)]
    assert run_spec(discovery_exe, spec, ["2", *base])[:2] == ("2,3\n", 0)
    assert run_spec(discovery_exe, spec, ["4", *base])[:2] == ("2,3,0,1\n", 0)
    out, code, err = run_spec(
        discovery_exe, {**spec, "devices": [{"health": {"inforom_corrupted": True}}, {}, {}, {}]}, ["4", *base]
    )
    assert (out, code) == ("Could not get enough GPU resources.\n", 1)
    assert "GPU 0 is left out (unhealthy: InfoROM corrupted)" in err


# ---- MIG units (docs/design.md §9.2) ---------------------------------------------------------------


@pytest.fixture
def mig_env(discovery_exe):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    spec = {
        "devices": [
            {"mig": {"mode": "enabled", "max_devices": 16, "instances": [{"slot": 1}, {"slot": 2}, {"slot": 10}]}},
            {},
        ]
    }
    env.update(simulator.environment(spec=spec))
    return [discovery_exe], env


def test_the_executable_prints_unit_indices_in_index_order(mig_env):
    assert run(mig_env, ["2"]) == ("0:1,0:2\n", 0)
    assert run(mig_env, ["4"]) == ("0:1,0:2,0:10,1\n", 0)


@pytest.mark.parametrize(
    "gpu, reason",
    [
        ({"health": {"recovery_action": "node_reboot"}}, "GPU recovery action: reboot the node"),
        ({"fabric": {"state": "in_progress"}}, "NVLink fabric registration in progress"),
        ({"health": {"row_remap_failure": True}}, "row remapping failed"),
        ({"health": {"state_error": "GPU_IS_LOST"}}, "GPU is lost"),
    ],
)
def test_a_verdict_on_a_mig_gpu_leaves_out_every_unit_and_a_units_own_only_it(discovery_exe, gpu, reason):
    spec = {"devices": [{**gpu, "mig": {"mode": "enabled", "instances": [{"slot": 1}, {"slot": 2}]}}, {}]}
    out, code, err = run_spec(discovery_exe, spec, ["1"])
    assert (out, code) == ("1\n", 0)
    assert f"GPU 0:1 left out: unhealthy: {reason}" in err and f"GPU 0:2 left out: unhealthy: {reason}" in err
    spec = {
        "devices": [
            {
                "mig": {
                    "mode": "enabled",
                    "instances": [{"slot": 1}, {"slot": 2, "health": {"inforom_corrupted": True}}],
                }
            },
            {},
        ]
    }
    out, code, err = run_spec(discovery_exe, spec, ["2"])
    assert (out, code) == ("0:1,1\n", 0)
    assert "GPU 0:2 left out: unhealthy: InfoROM corrupted" in err and "GPU 0:1 left out" not in err


def test_coordinated_executable_units_and_whole_gpus_exclude_each_other(mig_env, tmp_path, owners):
    path = tmp_path / "coordination"
    from flink_gpu import coordination

    holder = owners()
    assert coordination.claim(1, ["0:2"], path=path, owner=holder.pid).taken == ["0:2"]
    # this test process is the executable's parent, the owner of what it claims
    assert run(mig_env, ["2", "--enable-coordination-mode", "--coordination-file", str(path)]) == ("0:1,0:10\n", 0)
    assert run(mig_env, ["3", "--enable-coordination-mode", "--coordination-file", str(path)]) == ("0:1,0:10,1\n", 0)
    coordination.release(path=path)
    path.write_text(f"0 {holder.pid}\n")  # a stock-script holder of GPU 0
    assert run(mig_env, ["1", "--enable-coordination-mode", "--coordination-file", str(path)]) == ("1\n", 0)


# ---- whole lines or nothing, and the parent that asked ------------------------------------------


def test_a_file_size_limit_leaves_no_half_line_for_the_stock_script_to_join(runners, tmp_path, owners):
    """Under `ulimit -f` just above the file's size, with SIGXFSZ at its default action (a JVM's child
    starts so), the write that crosses the limit is short and the next one would kill the executable
    (exit 153) with half a line in the file. The stock script's `echo "<i> <pid>" >>` then joins onto
    that fragment, its record vanishes, and a later claim hands its GPU to a second owner. Instead the
    claim fails with EFBIG, the old bytes are back, and every GPU has one owner."""
    path = tmp_path / "coordination"
    old = "\n" * 1015  # 9 bytes below 1 KiB (`ulimit -f 1`): our first line crosses the limit
    path.write_text(old)
    flags = ["--enable-coordination-mode", "--coordination-file", str(path)]
    command, env = runners["ours"]
    limited = (["bash", "-c", 'trap - XFSZ; ulimit -f 1; exec "$@"', "bash", *command], env)
    taskmanagers = [TaskManager(limited, ["2", *flags])]
    try:
        limited_result, after_limited = taskmanagers[0].result, path.read_text()
        taskmanagers.append(TaskManager(runners["stock"], ["1", *flags]))
        stock_out, stock_code = taskmanagers[1].result
        assert stock_code == 0
        claimer = owners()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "flink_gpu.cli",
                "claim",
                "1",
                "--owner",
                str(claimer.pid),
                "--file",
                str(path),
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        ours = [gpu["index"] for gpu in json.loads(proc.stdout)["gpus"]]
        assert set(ours).isdisjoint(stock_out.strip().split(",")), (stock_out, ours, path.read_text())
        assert limited_result == ("", 1)  # not 153: not killed by SIGXFSZ
        assert after_limited == old  # no fragment left behind
        lines = path.read_text().split("\n")
        assert lines[-1] == "" and all(line == "" or len(line.split()) >= 2 for line in lines)
    finally:
        for taskmanager in taskmanagers:
            taskmanager.kill()


def test_the_executable_under_a_file_size_limit_reports_the_restored_file(runners, tmp_path):
    path = tmp_path / "coordination"
    path.write_text("\n" * 1015)
    command, env = runners["ours"]
    proc = subprocess.run(
        [
            "bash",
            "-c",
            'ulimit -f 1; exec "$@"',
            "bash",
            *command,
            "2",
            "--enable-coordination-mode",
            "--coordination-file",
            str(path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.stdout, proc.returncode) == ("", 1)
    assert f"Cannot write the coordination file {path}: {os.strerror(errno.EFBIG)}" in proc.stderr
    assert "its old content was restored" in proc.stderr
    assert path.read_text() == "\n" * 1015


@pytest.mark.parametrize(
    ("reclaim", "says"),
    [(True, "its old content was restored."), (False, "nothing was written, the file is unchanged.")],
)
def test_the_executable_beyond_a_file_size_limit_says_what_the_file_holds(runners, tmp_path, reclaim, says):
    """`ulimit -f 1` below the file's size. A reclaim's rewrite is cut at the limit and the bytes it
    overwrote are put back: restored. An append starts beyond the limit and writes nothing: unchanged.
    The file is byte-identical either way, and the message says which of the two it is."""
    from conftest import dead_pid

    path = tmp_path / "coordination"
    live = subprocess.Popen(["sleep", "600"])
    try:
        # reclaiming: every GPU held, GPU 0 by a dead owner; appending: GPU 0 held, the others free
        held = [f"{i} {dead_pid() if i == 0 else live.pid}\n" for i in range(GPUS)] if reclaim else [f"0 {live.pid}\n"]
        content = "".join(held)
        content += "\n" * (2000 - len(content))
        path.write_text(content)
        command, env = runners["ours"]
        proc = subprocess.run(
            [
                "bash",
                "-c",
                'ulimit -f 1; exec "$@"',
                "bash",
                *command,
                "1",
                "--enable-coordination-mode",
                "--coordination-file",
                str(path),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        live.kill()
        live.wait()
    assert (proc.stdout, proc.returncode) == ("", 1)
    assert f"Cannot write the coordination file {path}: {os.strerror(errno.EFBIG)}; {says}\n" in proc.stderr
    assert path.read_text() == content


# The TaskManager runs the executable and dies before the executable claims ("before") or while the
# claim waits for the file's lock ("during"); the launcher is a child subreaper, so the executable is
# handed to it (as to pid 1 or systemd on a host). The moments are made certain: the executable's stderr
# is a full pipe, so that its first message, the busy GPU it leaves out after asking NVML and before
# claiming, blocks; the lock is held by the launcher.
ORPHANED_DISCOVERY = (
    WAITING_SOURCE
    + r"""
import ctypes, fcntl, json, os, signal, sys, threading, time
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
exe, path, when = sys.argv[1:4]

def in_syscall(pid, *calls):  # the syscall a blocked process is in, by number (x86-64, aarch64)
    return open(f"/proc/{pid}/syscall").read().split()[0] in calls

err_r, err_w = os.pipe()
os.set_blocking(err_w, False)
for size in (4096, 1):
    try:
        while True:
            os.write(err_w, b"x" * size)
    except BlockingIOError:
        pass
os.set_blocking(err_w, True)
out_r, out_w = os.pipe()
pid_r, pid_w = os.pipe()
lock = os.open(path, os.O_RDWR | os.O_CREAT)
if when == "during":
    fcntl.flock(lock, fcntl.LOCK_EX)
taskmanager = os.fork()
if taskmanager == 0:
    child = os.fork()
    if child == 0:
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.execv(exe, [exe, "1", "--enable-coordination-mode", "--coordination-file", path,
                       "--busy-gpus", "exclude"])
    os.write(pid_w, str(child).encode())
    # "before": once the executable is blocked writing to its stderr (it has started, read its parent
    # and asked NVML), the TaskManager dies; "during": the launcher kills it
    wait_until(lambda: in_syscall(child, "1", "64"), "the executable blocks in write", 30)
    if when == "before":
        os._exit(0)
    time.sleep(600)
for fd in (out_w, err_w, pid_w):
    os.close(fd)
discovery = int(os.read(pid_r, 64))
if when == "before":
    os.waitpid(taskmanager, 0)
err = []
drain = threading.Thread(target=lambda: err.append(b"".join(iter(lambda: os.read(err_r, 65536), b""))))
if when == "during":
    drain.start()
    wait_until(lambda: in_syscall(discovery, "230", "35", "73", "115", "101", "32"), "it polls the lock", 30)
    os.kill(taskmanager, signal.SIGKILL)
    os.waitpid(taskmanager, 0)
wait_until(lambda: int(open(f"/proc/{discovery}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid(),
           "the executable is handed to the launcher", 30)
nothing_yet = os.path.getsize(path) == 0
if when == "during":
    fcntl.flock(lock, fcntl.LOCK_UN)
else:
    drain.start()
out = b"".join(iter(lambda: os.read(out_r, 65536), b""))
_, status = os.waitpid(discovery, 0)
drain.join()
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "stdout": out.decode(),
                  "stderr": err[0].lstrip(b"x").decode(), "taskmanager": taskmanager,
                  "nothing_yet": nothing_yet, "file": open(path).read()}))
"""
)


@pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="needs /proc/<pid>/syscall")
@pytest.mark.parametrize("when", ["before", "during"])
def test_a_discovery_whose_taskmanager_died_leaves_nothing_claimed_for_the_reaper(discovery_exe, tmp_path, when):
    """getppid() at claim time would name the reaper once the TaskManager is gone, and the GPU would
    stay taken for as long as the reaper lives (for ever, for pid 1). Dead before the claim: nothing is
    claimed. Dead while the claim waits for the lock: the line written for its pid is taken back (a
    process that got the pid since would own it)."""
    path = tmp_path / "coordination"
    spec = {"devices": [{"processes": FOREIGN}, {}, {}]}
    proc = simulator.run(
        [sys.executable, "-c", ORPHANED_DISCOVERY, discovery_exe, str(path), when],
        spec=spec,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["nothing_yet"]
    assert "GPU 0 left out: busy" in result["stderr"]
    assert (result["stdout"], result["rc"], result["file"]) == ("", 1, ""), result
    what = "no GPU was claimed" if when == "before" else "the GPUs claimed for it were released"
    assert (
        f"the TaskManager that ran this discovery (pid {result['taskmanager']}) has exited; {what}" in result["stderr"]
    )


# The TaskManager dies before the executable has even started, so getppid() names the reaper from the
# first: the launcher here, a child subreaper (as pid 1 or systemd on a host). The TaskManager's child
# waits on a pipe that the launcher closes only once the child is its own, then execs the executable.
# How the TaskManager starts it (`how`): in its own process group, which the child shares (Java's
# ProcessBuilder in a JVM that leads its group); as a shell with job control does, the child leading a
# group of its own in the TaskManager's session; or in a session of its own (setsid). The executable's
# stdout is a pipe that another process (cat) reads, as the dead TaskManager did.
ADOPTED_DISCOVERY = (
    WAITING_SOURCE
    + r"""
import ctypes, json, os, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
exe, path, how, out_path, err_path = sys.argv[1:6]
out_r, out_w = os.pipe()
with open(out_path, "wb") as out_file:
    reader = subprocess.Popen(["cat"], stdin=out_r, stdout=out_file)
os.close(out_r)
gate_r, gate_w = os.pipe()
pid_r, pid_w = os.pipe()
taskmanager = os.fork()
if taskmanager == 0:
    if how == "process group":
        os.setpgid(0, 0)
    else:
        os.setsid()
    child = os.fork()
    if child == 0:
        os.close(gate_w)
        if how == "own group":
            os.setpgid(0, 0)
        elif how == "own session":
            os.setsid()
        assert os.read(gate_r, 1) == b""  # until the launcher lets it go, with the TaskManager dead
        os.dup2(out_w, 1)
        os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.execv(exe, [exe, "1", "--enable-coordination-mode", "--coordination-file", path])
    os.write(pid_w, str(child).encode())
    os._exit(0)
for fd in (out_w, gate_r, pid_w):
    os.close(fd)
discovery = int(os.read(pid_r, 64))
os.waitpid(taskmanager, 0)
wait_until(lambda: int(open(f"/proc/{discovery}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid(),
           "the TaskManager's child is handed to the launcher", 30)
os.close(gate_w)
_, status = os.waitpid(discovery, 0)
reader.wait(30)
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "launcher": os.getpid(),
                  "file": open(path).read() if os.path.exists(path) else ""}))
"""
)


@pytest.mark.parametrize("how", ["process group", "own group", "own session"])
def test_a_discovery_started_after_its_taskmanager_died_claims_nothing_for_the_reaper(discovery_exe, tmp_path, how):
    """Its parent is the reaper from the start; recorded as the owner, it would keep the GPU taken for as
    long as it lives (for ever, for pid 1)."""
    path, out, err = tmp_path / "coordination", tmp_path / "stdout", tmp_path / "stderr"
    proc = simulator.run(
        [sys.executable, "-c", ADOPTED_DISCOVERY, discovery_exe, str(path), how, str(out), str(err)],
        devices=2,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (out.read_text(), result["rc"], result["file"]) == ("", 1, ""), (result, err.read_text())
    assert (
        f"pid {result['launcher']}, the parent of this discovery, is in neither its process group nor its "
        "session and does not read its output, so it is taken for a reaper" in err.read_text()
    )


def claimed_owners(path):
    return [line.split()[1] for line in path.read_text().splitlines()]


# A parent alive, however it started the executable, is its TaskManager: sharing its process group (the
# other tests), as a shell with job control does (the executable leads a group of its own in the
# parent's session; run by hand), or in a session of its own reading its output (flink-gpu's script mode).
@pytest.mark.parametrize("how", ["own group", "own session"])
def test_a_live_parent_that_started_the_discovery_in_a_group_or_session_of_its_own_owns_the_claim(
    discovery_exe, tmp_path, how
):
    path = tmp_path / "coordination"
    argv = [discovery_exe, "1", "--enable-coordination-mode", "--coordination-file", str(path)]
    if how == "own group":
        with open(tmp_path / "stdout", "w+") as out:
            # setpgid in the child, as `process_group=0` does from Python 3.11 on
            proc = simulator.run(argv, devices=2, stdout=out, stderr=subprocess.PIPE, text=True, preexec_fn=os.setpgrp)
            out.seek(0)
            stdout = out.read()
    else:
        proc = simulator.run(argv, devices=2, capture_output=True, text=True, start_new_session=True)
        stdout = proc.stdout
    assert (stdout, proc.returncode) == ("0\n", 0), proc.stderr
    assert claimed_owners(path) == [str(os.getpid())]


# A TaskManager that is pid 1 of its container runs the executable as its child: it is the reaper of
# its namespace and the owner. Started by `unshare --fork` it is in a process group from outside the
# namespace (its number there is 0), as its child is; started through setsid, as a container runtime
# starts pid 1, it leads its own.
PID_1_TASKMANAGER = r"""
import json, os, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)
print(json.dumps({"pid": os.getpid(), "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
"""


@pytest.mark.parametrize("setsid", [False, True])
def test_a_taskmanager_that_is_pid_1_of_its_namespace_owns_what_its_discovery_claims(discovery_exe, tmp_path, setsid):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    path = tmp_path / "coordination"
    argv = [
        "unshare", "--pid", "--fork", "--mount-proc", *(["setsid"] if setsid else []),
        sys.executable, "-c", PID_1_TASKMANAGER,
        discovery_exe, "1", "--enable-coordination-mode", "--coordination-file", str(path),
    ]  # fmt: skip
    proc = simulator.run(argv, devices=2, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and not proc.stdout:
        pytest.skip(f"cannot create a pid namespace here: {proc.stderr.strip()}")
    result = json.loads(proc.stdout)
    assert result["pid"] == 1
    assert (result["stdout"], result["rc"]) == ("0\n", 0), result["stderr"]
    assert claimed_owners(path) == ["1"]


# --- NVML with a deadline (docs/design.md §9.5) --------------------------------------------------


def hang_spec(hang_file, query, device=None, devices=4, driver_lock=True):
    rule = {"query": query, "while_exists": str(hang_file)}
    if device is not None:
        rule["device"] = device
    return {"devices": [{} for _ in range(devices)], "driver_lock": driver_lock, "hang": [rule]}


def ours_env(spec):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINK_GPU_SIM_")}
    env.update(simulator.environment(spec=spec))
    return env


def test_a_hung_nvml_init_ends_the_executable_with_a_clear_message_well_inside_flinks_timeout(discovery_exe, tmp_path):
    with simulator.hanging(tmp_path / "hang") as hang_file:
        # the subprocess timeout only guards the test: the executable must answer by itself
        proc = subprocess.run(
            [discovery_exe, "2", "--nvml-timeout", "1 s"],
            env=ours_env(hang_spec(hang_file, "init")),
            capture_output=True,
            text=True,
            timeout=8,
        )
    assert proc.returncode == 1
    assert proc.stdout == ""
    # the core's one sentence for a stalled NVML call, its advice included, then what this executable did
    assert "NVML did not answer: nvmlInit_v2 did not return within 1 s" in proc.stderr
    assert "check dmesg for Xid errors and nvidia-smi" in proc.stderr and "No GPU was claimed." in proc.stderr


def test_a_deadline_that_passes_before_nvml_init_starts_is_a_stall_never_a_crash(discovery_exe):
    # 1 ns: the deadline has mostly passed before the worker thread even runs (it read a result not
    # yet written, a null library, and crashed); either NVML answered in time or it is a stall
    for _ in range(10):
        proc = subprocess.run(
            [discovery_exe, "2", "--nvml-timeout", "1ns"],
            env=ours_env({"devices": [{}, {}]}),
            capture_output=True,
            text=True,
            timeout=8,
        )
        if proc.returncode == 0:
            assert proc.stdout == "0,1\n"
            continue
        assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
        # init in flight when the deadline passed, or (a machine slow enough for init to finish in time) the
        # deadline gone before the count was asked
        assert (
            "NVML did not answer: nvmlInit_v2 did not return within 0 ms" in proc.stderr
            or "NVML did not say how many GPUs it has." in proc.stderr
        ), proc.stderr


def test_a_hung_state_read_leaves_its_gpus_unknown_and_names_the_query(discovery_exe, tmp_path):
    # the simulated driver's lock is held by the hung call, as a real driver's: no GPU after it answers, and
    # each GPU's worker, stuck behind it, hands the GPUs after it to another
    with simulator.hanging(tmp_path / "hang") as hang_file:
        proc = subprocess.run(
            # the state read's own stall (topology: ignore; a claim of two with the topology meets the hang in
            # its topology read first: tests/gpu/test_nvml_discovery.py)
            [discovery_exe, "2", "--nvml-timeout", "500ms", "--topology", "ignore"],
            env=ours_env(hang_spec(hang_file, "field_values", device=1)),
            capture_output=True,
            text=True,
            timeout=8,
        )
    assert proc.returncode == 1
    assert proc.stdout == "Could not get enough GPU resources.\n"
    assert "GPU 1: nvmlDeviceGetFieldValues did not return within 500 ms" in proc.stderr
    assert "GPU 1 left out: unknown: nvmlDeviceGetFieldValues did not return within 500 ms" in proc.stderr
    assert (
        "GPU 2 left out: unknown: nvmlDeviceGetHandleByIndex_v2 did not return within 500 ms (behind GPU 1's "
        "nvmlDeviceGetFieldValues, which has not returned for "
    ) in proc.stderr
    assert "GPU 3 left out: unknown: " in proc.stderr  # stuck behind GPU 2's, or not reached by its worker


def test_one_stuck_gpu_does_not_keep_a_coordinated_claim_from_the_free_gpus_after_it(discovery_exe, tmp_path):
    """GPU 0 held by another process, GPU 1's health read hanging (the driver lock not held): the GPUs
    after it are read within the same --nvml-timeout and GPU 2 is claimed; a claim short all the same
    names the unknown GPU and its stalled call and counts the host's four GPUs."""
    coord = tmp_path / "coord"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        # another live process (this test's pid is the discovery's parent, its owner)
        coordination.claim(1, ["0"], path=coord, owner=holder.pid)
        # long compared with any scheduling delay: the second worker starts a sixteenth into it
        args = ["--enable-coordination-mode", "--coordination-file", str(coord), "--nvml-timeout", "10s"]
        with simulator.hanging(tmp_path / "hang") as hang_file:
            spec = hang_spec(hang_file, "field_values", device=1, driver_lock=False)
            one = subprocess.run(
                [discovery_exe, "1", *args], env=ours_env(spec), capture_output=True, text=True, timeout=60
            )
            three = subprocess.run(
                [discovery_exe, "3", *args], env=ours_env(spec), capture_output=True, text=True, timeout=60
            )
    finally:
        holder.communicate(b"")
    assert (one.stdout, one.returncode) == ("2\n", 0), one.stderr
    assert (three.stdout, three.returncode) == ("Could not get enough GPU resources.\n", 1)
    # the claim of three meets the hang in its topology read (within half the deadline), and its state read
    # finds GPU 1 stuck still: the same query named
    # (how long it has been in flight is measured: 5 s, or a little more on a loaded machine)
    assert re.search(
        r"Could not get enough GPU resources\. Requested 3, the host has 4 GPUs \(0, 1, 2, 3\), of which GPU 1 is "
        r"unknown \(nvmlDeviceGetFieldValues has not returned for \d+(\.\d)? s\); this process \(pid ",
        three.stderr,
    ), three.stderr
    assert f"pid {holder.pid} holds 0. Coordination file: {coord}." in three.stderr
    assert "the host has 3 GPUs" not in three.stderr


def test_a_gpu_read_in_time_is_handed_out_when_a_later_one_hangs(discovery_exe, tmp_path):
    with simulator.hanging(tmp_path / "hang") as hang_file:
        proc = subprocess.run(
            [discovery_exe, "1", "--nvml-timeout", "500ms"],
            env=ours_env(hang_spec(hang_file, "field_values", device=1)),
            capture_output=True,
            text=True,
            timeout=8,
        )
    assert (proc.stdout, proc.returncode) == ("0\n", 0)


@pytest.mark.parametrize(
    "value, why",
    [
        ("soon", "text does not start with a number"),
        ("0 s", "it is not positive"),
        ("5 weeks", "Time interval unit label 'weeks'"),
    ],
)
def test_a_bad_nvml_timeout_is_refused_naming_the_value(discovery_exe, value, why):
    proc = subprocess.run(
        [discovery_exe, "2", "--nvml-timeout", value],
        env=ours_env({"devices": [{}]}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        f"flink-gpu-discovery: Invalid value '{value}' for --nvml-timeout: expected a positive duration such as "
        f"'5 s' or '500 ms' ({why}"
    ) in proc.stderr


def test_a_gpu_taken_while_the_discovery_read_says_what_it_found_once(discovery_exe, tmp_path):
    """GPU 1, the first healthy one, is claimed by another process while the discovery reads it: the claim
    finds it taken and the host is read again (docs/design.md §9.1); GPU 2 is claimed, and what the reads
    found (GPU 0 left out) is said once, not once per read."""
    coord = tmp_path / "coord"
    coord.write_text("")
    spec = {
        "devices": [{"health": {"row_remap_failure": True}}, {}, {}, {}],
        "hang": [{"query": "field_values", "device": 1, "while_exists": str(tmp_path / "hang")}],
    }
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with simulator.hanging(tmp_path / "hang") as hang_file:
            args = ["1", "--enable-coordination-mode", "--coordination-file", str(coord), "--nvml-timeout", "60 s"]
            proc = subprocess.Popen(
                [discovery_exe, *args],
                env=ours_env(spec),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert wait_until_inside_a_hang(proc)  # reading GPU 1
                coordination.claim(1, ["1"], path=coord, owner=holder.pid)
            finally:
                simulator.hanging(hang_file).release()
            out, err = proc.communicate(timeout=60)
    finally:
        holder.communicate(b"")
    assert (out, proc.returncode) == ("2\n", 0), err
    assert err.count("GPU 0 left out: unhealthy: ") == 1, err


def test_the_coordination_file_is_not_locked_while_a_state_read_hangs(discovery_exe, tmp_path):
    """The order is state read, then lock, claim, unlock: while NVML hangs, any other worker takes the
    coordination file's flock at once."""
    import fcntl

    coord = tmp_path / "coord"
    coord.write_text("")
    with simulator.hanging(tmp_path / "hang") as hang_file:
        proc = subprocess.Popen(
            [
                discovery_exe,
                "1",
                "--enable-coordination-mode",
                "--coordination-file",
                str(coord),
                "--nvml-timeout",
                "60 s",
            ],
            env=ours_env(hang_spec(hang_file, "field_values", device=0)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_until_inside_a_hang(proc)  # the state read is inside NVML
            assert proc.poll() is None
            with open(coord, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if it were held
                fcntl.flock(f, fcntl.LOCK_UN)
            assert proc.poll() is None  # still inside NVML
        finally:
            simulator.hanging(hang_file).release()
        out, err = proc.communicate(timeout=60)
    assert (out, proc.returncode) == ("0\n", 0), err
    assert coord.read_text().startswith("0 ")


# ---- the NVML library failing under the drop-in executable ---------------------------------------


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    "code, words",
    [
        (9, "kernel driver is not loaded"),  # NVML_ERROR_DRIVER_NOT_LOADED
        (18, "different versions"),  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        (4, "NVML_ERROR_NO_PERMISSION"),
        (999, "NVML_ERROR_UNKNOWN"),
    ],
)
def test_drop_in_executable_reports_nvml_init_errors_and_claims_nothing(discovery_exe, tmp_path, code, words):
    path = tmp_path / "coordination"
    proc = subprocess.run(
        [discovery_exe, "2", "--enable-coordination-mode", "--coordination-file", str(path)],
        env=child_env(init_error=code),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""  # Flink parses stdout: nothing there may look like GPU indices
    assert words in proc.stderr and simulator.library_path() in proc.stderr
    assert not path.exists()  # nothing was claimed for a host whose GPUs cannot be seen


@pytest.mark.usefixtures("no_leaks")
def test_drop_in_executable_with_a_missing_library(discovery_exe, tmp_path):
    env = child_env()
    env["FLINK_GPU_NVML_LIBRARY"] = str(tmp_path / "no" / "libnvidia-ml.so.1")
    proc = subprocess.run([discovery_exe, "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert str(tmp_path / "no" / "libnvidia-ml.so.1") in proc.stderr and "FLINK_GPU_NVML_LIBRARY" in proc.stderr


@pytest.mark.usefixtures("no_leaks")
def test_drop_in_executable_and_cli_refuse_a_library_path_naming_a_fifo(discovery_exe, tmp_path):
    fifo, _ = make_odd_path(tmp_path / "libnvidia-ml.so.1", "fifo")  # dlopen of it would block
    env = child_env()
    env["FLINK_GPU_NVML_LIBRARY"] = str(fifo)
    expected = f"Could not load the NVIDIA Management Library '{fifo}': it is a FIFO (named pipe), not a regular file."
    for argv in ([discovery_exe, "1"], [sys.executable, "-m", "flink_gpu.cli", "list"]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        assert expected in proc.stderr and "Traceback" not in proc.stderr


FAULTY = {"devices": [{}, {"fault": "NO_PERMISSION"}, {"fault": "GPU_IS_LOST"}, {}]}


@pytest.mark.usefixtures("no_leaks")
def test_faulty_devices_are_never_claimed(discovery_exe, tmp_path, owners):
    path = tmp_path / "coordination"
    holder = owners()
    path.write_text(line_of("0", holder.pid))  # a live worker holds GPU 0
    env = child_env(spec=FAULTY)
    argv = [discovery_exe, "1", "--enable-coordination-mode", "--coordination-file", str(path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout) == (0, "3\n")  # not 1 or 2: they answer errors
    argv[1] = "2"
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == "Could not get enough GPU resources.\n"
    assert str(holder.pid) in proc.stderr
    # the owner of the discovery executable is its parent: this process
    assert holders(path) == {"0": (holder.pid,), "3": (os.getpid(),)}
    assert coordination.release(path=path) == ["3"]


# ---- the host's topology copy beside the coordination file (docs/design.md §9.6) --------------------------


def test_a_claim_of_two_adopts_the_hosts_topology_copy_unless_another_user_could_have_written_it(
    discovery_exe, tmp_path
):
    """The first claim of two reads the host's topology and leaves its copy; the next process adopts it and reads
    no link; a copy that every user may write is ignored (it would steer every claim), and the claim reads the
    topology itself."""
    coord = tmp_path / "coord"
    env = {**ours_env(None), **simulator.environment(profile="rtx3090-bridged-4")}
    env["FLINK_GPU_SIM_COUNTERS_FILE"] = str(tmp_path / "counters.json")

    def claim():
        coord.write_text("")  # a claim from an empty file each time
        proc = subprocess.run(
            [discovery_exe, "2", "--enable-coordination-mode", "--coordination-file", str(coord)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        calls = simulator.counters(tmp_path / "counters.json")["calls"]
        return proc.stdout, sum(calls.get("nvmlDeviceGetTopologyCommonAncestor", {}).values())

    copy = tmp_path / "coord.topology"
    assert claim() == ("0,2\n", 6) and copy.exists()  # the whole host read: its 6 pairs
    assert claim() == ("0,2\n", 0)  # adopted
    copy.chmod(0o666)
    assert claim() == ("0,2\n", 6)  # ignored: read again
