"""doctor's check of the GPUs' state now (flink_gpu.cli.doctor_command.gpu_state): unhealthy, degraded and busy GPUs,
checks not made, the NVLink fabric, the bindings' memory requests against what is free."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import child_env
from flink_gpu import simulator
from support.cli import cli, findings, gpu_conf, write_script
from support.simulated import NOT_HOST_PIDS, pids_are_hosts


def doctor_on(tmp_path, spec, conf_text, expect):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(conf_text)
    proc = cli(
        "doctor",
        conf,
        "--simulate-spec",
        spec,
        "--json",
        "--taskmanagers-per-host",
        "1",
        env=child_env(**simulator.environment(spec=spec)),
    )  # a TaskManager's shell on that simulator
    doc = json.loads(proc.stdout)
    assert proc.returncode == expect, json.dumps(doc["findings"], indent=1)
    return doc


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_doctor_reports_unhealthy_degraded_and_busy_gpus(tmp_path, state_host):
    conf = gpu_conf(
        amount=1,
        factory="flink_gpu.GPUDriverFactory",
        discovery_mode="nvml",
        discovery_script_args=f"--enable-coordination-mode --coordination-file {state_host['coord']}",
    )
    doc = doctor_on(tmp_path, state_host["spec"], conf, expect=0)
    state = findings(doc, "gpu-state")
    unhealthy = [f for f in state if f["message"].startswith("GPU 1 is unhealthy: ")]
    assert len(unhealthy) == 1 and unhealthy[0]["level"] == "warning"
    assert "a TaskManager never gets it" in unhealthy[0]["message"]
    assert "nvidia-smi -q -i 1" in unhealthy[0]["fix"]
    [degraded] = [f for f in state if f["message"].startswith("GPU 0 is degraded: ")]
    assert degraded["level"] == "note" and "after every healthy GPU" in degraded["message"]
    # GPU 2's process belongs to its holder; GPU 3's are no holder's
    assert not [f for f in state if f["message"].startswith("GPU 2 ")]
    [busy] = [f for f in state if f["message"].startswith("GPU 3 runs 2 processes of no flink-gpu holder")]
    assert busy["level"] == "note" and "only when the idle GPUs are too few" in busy["message"]
    assert f"pid {state_host['stranger']} (sleep 600)" in busy["message"]
    assert "external-resource.gpu.param.busy-gpus: exclude" in busy["fix"]
    [hidden] = [f for f in state if f"NVML lists pid {state_host['gone']} on GPU 3" in f["message"]]
    assert "hostPID" in hidden["fix"]


def test_doctor_counts_a_thread_mode_taskmanager_whose_slots_bind_as_a_holder(tmp_path, memory_binders):
    """No coordination owner: the TaskManager's slots (its threads) bind GPU 0 in the bindings file, and NVML
    lists the TaskManager, the CUDA process, there. It is no stranger; one beside it is."""
    spec = tmp_path / "bind-spec.json"
    spec.write_text(json.dumps({"devices": [{}, {}]}))
    coord = tmp_path / "coord"
    _, got, taskmanager, _ = memory_binders(f"{coord}.bindings", spec, ["0"], None, slot="alloc-1")
    assert got == ["0"]
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        doctor_spec = tmp_path / "doctor-spec.json"
        processes = [{"pid": taskmanager, "used_memory": 2**30}, {"pid": stranger.pid, "used_memory": 2**30}]
        doctor_spec.write_text(json.dumps({"devices": [{"processes": processes}, {}]}))
        conf = gpu_conf(
            amount=1,
            factory="flink_gpu.GPUDriverFactory",
            discovery_mode="nvml",
            discovery_script_args=f"--coordination-file {coord}",
        )
        doc = doctor_on(tmp_path, doctor_spec, conf, expect=0)
    finally:
        stranger.kill()
        stranger.wait()
    [busy] = [f for f in findings(doc, "gpu-state") if "of no flink-gpu holder" in f["message"]]
    assert busy["message"].startswith(f"GPU 0 runs 1 process of no flink-gpu holder (pid {stranger.pid} (sleep 600))")
    assert f"pid {taskmanager}" not in busy["message"]


@pytest.mark.parametrize(
    "states, waiting", [(["not_started", "not_started"], False), (["not_started", "in_progress"], True)]
)
def test_doctor_says_once_when_no_gpu_has_registered_with_the_nvlink_fabric(tmp_path, states, waiting):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"fabric": {"state": state}} for state in states]}))
    doc = doctor_on(
        tmp_path, spec, gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"), expect=1
    )
    fabric = [f for f in findings(doc, "gpu-state") if "fabric" in f["message"].lower()]
    assert len(fabric) == 1, fabric  # a host finding, not one per GPU
    assert fabric[0]["level"] == "error" and "error 802" in fabric[0]["message"]
    assert ("(some are in progress)" in fabric[0]["message"]) == waiting
    assert "nvidia-fabricmanager" in fabric[0]["fix"]


def test_doctor_notes_one_gpu_without_fabric_registration_as_that_gpu(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"fabric": {"state": "not_started"}}, {"fabric": {}}]}))
    doc = doctor_on(
        tmp_path, spec, gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"), expect=0
    )
    [gpu0] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 0 is unhealthy")]
    assert "NVLink fabric registration not started" in gpu0["message"]
    assert not [f for f in findings(doc, "gpu-state") if f["message"].startswith("No GPU of this host")]


def test_doctor_shows_what_was_not_checked_and_a_finding_of_a_check_left_out(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"health": {"inforom_corrupted": True}}, {}]}))
    conf = (
        gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
        + "external-resource.gpu.param.health-checks: all,-inforom\n"
    )
    doc = doctor_on(tmp_path, spec, conf, expect=0)
    state = findings(doc, "gpu-state")
    [left_out] = [f for f in state if f["level"] == "warning"]
    assert left_out["message"] == (
        "GPU 0: InfoROM corrupted, but external-resource.gpu.param.health-checks "
        "leaves inforom out: a TaskManager may still get it."
    )
    assert [f["message"] for f in state if f["message"].startswith("Not checked")] == [
        "Not checked on GPU 0, 1: fabric (not supported), nvlink (not applicable)."
    ]
    assert not [f for f in state if "is unhealthy" in f["message"]]


def test_doctor_warns_that_nvml_refuses_the_process_lists_of_an_idle_gpu(tmp_path):
    """A claim reads no process list on a GPU whose memory shows none in use (docs/design.md §9.1); doctor
    reads them all, so that a refusal shows before the GPU is used and other users' processes hide."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"no_permission": ["processes"]}, {}]}))
    conf = gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    doc = doctor_on(tmp_path, spec, conf, expect=0)
    [refused] = [f for f in findings(doc, "gpu-state") if "no permission to list" in f["message"]]
    assert refused["message"].startswith("NVML gives no permission to list the processes on GPU 0;")
    assert refused["level"] == "warning"


def test_doctor_fails_when_the_amount_exceeds_the_healthy_gpus(tmp_path, state_host):
    doc = doctor_on(
        tmp_path,
        state_host["spec"],
        gpu_conf(amount=4, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"),
        expect=1,
    )
    [error] = findings(doc, "gpu-state", "error")
    assert error["message"] == (
        "external-resource.gpu.amount is 4, but only 3 GPUs of this host are healthy: discovery fails."
    )


def test_doctor_says_a_plain_script_hands_out_an_unhealthy_gpu(tmp_path, state_host):
    script = write_script(tmp_path / "discover.sh", 'echo "1"\n')
    doc = doctor_on(tmp_path, state_host["spec"], gpu_conf(discovery_script_path=script), expect=1)
    [error] = [f for f in findings(doc, "gpu-state", "error") if "GPU 1" in f["message"]]
    assert "the discovery script still hands it out" in error["message"]
    [busy] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 3 runs")]
    assert busy["level"] == "warning" and "would share it" in busy["message"]


def test_doctor_with_ignore_warns_that_a_busy_gpu_may_be_shared(tmp_path, state_host):
    conf = (
        gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
        + "external-resource.gpu.param.busy-gpus: ignore\n"
    )
    doc = doctor_on(tmp_path, state_host["spec"], conf, expect=0)
    [busy] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 3 runs")]
    assert busy["level"] == "warning" and "may get it and share it" in busy["message"]
    assert not findings(doc, "params", "warning")  # busy-gpus is an option of ours


def test_doctor_warns_of_a_gpu_whose_state_read_does_not_return(tmp_path):
    hang_file = tmp_path / "hang"
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "devices": [{}, {}],
                "driver_lock": False,
                "hang": [{"query": "field_values", "device": 1, "while_exists": str(hang_file)}],
            }
        )
    )
    conf = gpu_conf(amount=1, factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml")
    with simulator.hanging(hang_file):
        doc = doctor_on(tmp_path, spec, conf, expect=0)
    [unknown] = [f for f in findings(doc, "gpu-state") if f["message"].startswith("GPU 1 is unknown: ")]
    assert unknown["level"] == "warning"
    # doctor reads the topology first (the nvlink check): its NVLink count query, named, is the one that hangs
    assert re.search(r"nvmlDeviceGetFieldValues has not returned for \d+(\.\d)? s", unknown["message"])
    assert "a TaskManager does not get it" in unknown["message"]
    assert "dmesg" in unknown["fix"]


# ---- persistence mode -----------------------------------------------------------------------------

NVML_CONF = (
    "external-resources: gpu\n"
    "external-resource.gpu.amount: 1\n"
    "external-resource.gpu.driver-factory.class: flink_gpu.GPUDriverFactory\n"
    "external-resource.gpu.param.discovery-mode: nvml\n"
)


def persistence_findings(tmp_path, spec):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(NVML_CONF)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flink_gpu.cli",
            "doctor",
            str(conf),
            "--simulate-spec",
            str(spec_file),
            "--json",
            "--taskmanagers-per-host",
            "1",
        ],
        env=child_env(**simulator.environment(spec=spec)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(proc.stdout)
    return [f for f in doc["findings"] if f["check"] == "gpu-state" and "persistence" in f["message"]]


def test_doctor_notes_the_gpus_without_persistence_mode_and_says_why_a_first_claim_is_slow(tmp_path):
    spec = {
        "devices": [
            {},
            {"persistence_mode": "disabled"},
            {"persistence_mode": "disabled", "mig": {"mode": "enabled", "instances": [{"slot": 1}, {"slot": 2}]}},
        ]
    }
    [note] = persistence_findings(tmp_path, spec)
    assert note["level"] == "note"
    assert note["message"].startswith(
        "GPU 1, 2: persistence mode is off: the first claim on each GPU may take "
        "seconds (without it the driver initialises a GPU when a process first "
        "asks for its handle"
    )  # a MIG GPU once, not per unit
    assert "nvidia-persistenced" in note["fix"]


def test_doctor_has_no_persistence_finding_where_it_is_on_or_unknown(tmp_path):
    assert persistence_findings(tmp_path, {"devices": [{}, {"not_supported": ["persistence_mode"]}]}) == []


# ---- the bindings' memory requests against what is free ------------------------------------------

GiB = 2**30


def memory_doctor(tmp_path, coord, device, expect=0):
    """doctor on a 2-GPU host whose GPU 0 is ``device`` (16 GiB; its memory_used and processes now), the
    TaskManagers' coordination file ``coord``: its gpu-state findings about memory requests."""
    spec = tmp_path / "doctor-spec.json"
    spec.write_text(json.dumps({"devices": [{"memory_total": 16 * GiB, **device}, {}]}))
    conf = gpu_conf(
        amount=1,
        factory="flink_gpu.GPUDriverFactory",
        discovery_mode="nvml",
        discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
    )
    doc = doctor_on(tmp_path, spec, conf, expect=expect)
    return [f for f in findings(doc, "gpu-state") if "request" in f["message"]]


@pytest.fixture
def bound_12_gib(tmp_path, memory_binders):
    """A holder bound to GPU 0 (16 GiB, idle when it bound) with a request of 12 GiB, its CUDA worker a child."""
    spec = tmp_path / "bind-spec.json"
    spec.write_text(json.dumps({"devices": [{"memory_total": 16 * GiB}, {}]}))
    coord = tmp_path / "coord"
    _, got, pid, worker = memory_binders(f"{coord}.bindings", spec, ["0"], "12 gb", share=2, child=True)
    assert got == ["0"]
    return {"coord": coord, "pid": pid, "worker": worker, "spec": spec}


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_doctor_warns_when_a_gpus_memory_requests_exceed_what_is_free(tmp_path, bound_12_gib):
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        device = {"memory_used": 8 * GiB, "processes": [{"pid": stranger.pid, "used_memory": 8 * GiB}]}
        [warning] = memory_doctor(tmp_path, bound_12_gib["coord"], device)
    finally:
        stranger.kill()
        stranger.wait()
    assert warning["level"] == "warning" and warning["resource"] == "gpu"
    assert warning["message"] == (
        f"GPU 0: its bindings request 12 GiB of its memory (pid {bound_12_gib['pid']}: 12 GiB), but only 8 GiB "
        "is free: a holder that allocates what it asked for may run out of memory."
    )
    assert warning["fix"].startswith(
        "Something that is not bound uses the GPU's memory, or a binding uses more than it asked for"
    )
    assert (
        "`nvidia-smi -i 0`" in warning["fix"] and f"`flink-gpu list --file {bound_12_gib['coord']}`" in warning["fix"]
    )
    assert "lower the requests" in warning["fix"]


def test_doctor_says_the_requests_fit_when_they_do(tmp_path, bound_12_gib):
    [fits] = memory_doctor(tmp_path, bound_12_gib["coord"], {"memory_used": 2 * GiB})
    assert fits["level"] == "ok"
    assert fits["message"] == "GPU 0: the memory its bindings request (12 GiB) fits in its 14 GiB free."


@pytest.mark.skipif(not pids_are_hosts(), reason=NOT_HOST_PIDS)
def test_doctor_subtracts_what_the_holders_own_processes_already_use(tmp_path, bound_12_gib, memory_binders):
    # the holder's worker (its child) uses 6 GiB of its 12; a thread-mode slot (its TaskManager the CUDA
    # process) bound later with 2 GiB uses 1 GiB: 14 GiB requested, 7 GiB more needed, 7 GiB free
    _, _, taskmanager, _ = memory_binders(
        f"{bound_12_gib['coord']}.bindings", bound_12_gib["spec"], ["0"], "2 gb", share=2, slot="alloc-1"
    )
    device = {
        "memory_used": 9 * GiB,
        "processes": [
            {"pid": bound_12_gib["worker"], "used_memory": 6 * GiB},
            {"pid": taskmanager, "used_memory": 1 * GiB},
        ],
    }
    [fits] = memory_doctor(tmp_path, bound_12_gib["coord"], device)
    assert fits["level"] == "ok", fits
    assert fits["message"] == (
        "GPU 0: the memory its bindings request (14 GiB, 7 GiB of it not yet in use by their holders) fits in its "
        "7 GiB free."
    )
    # 1 GiB less free: the rest no longer fits
    device["memory_used"] = 10 * GiB
    [warning] = memory_doctor(tmp_path, bound_12_gib["coord"], device)
    assert warning["level"] == "warning"
    assert warning["message"] == (
        f"GPU 0: its bindings request 14 GiB of its memory (pid {bound_12_gib['pid']}: 12 GiB, slot alloc-1: "
        "2 GiB); their holders already use 7 GiB of that, so 7 GiB more is needed, but only 6 GiB is free: a "
        "holder that allocates what it asked for may run out of memory."
    )


def test_doctor_says_when_the_holders_use_could_not_be_told_and_was_not_subtracted(tmp_path, bound_12_gib):
    # the worker uses 6 GiB of its 12 (6 GiB free would do), but NVML does not list the GPU's processes
    device = {
        "memory_used": 10 * GiB,
        "processes": [{"pid": bound_12_gib["worker"], "used_memory": 6 * GiB}],
        "no_permission": ["processes"],
    }
    [warning] = memory_doctor(tmp_path, bound_12_gib["coord"], device)
    assert warning["level"] == "warning"
    assert warning["message"].endswith(
        "but only 6 GiB is free: a holder that allocates what it asked for may run out of memory. What the "
        "holders' own processes use of it could not be told (NVML gives no permission to list the GPU's "
        "processes), so it was not subtracted: the requests may still fit."
    )


def test_doctor_does_not_subtract_the_use_of_holders_of_another_pid_namespace(tmp_path):
    coord = tmp_path / "coord"
    ns = os.stat("/proc/self/ns/pid").st_ino + 1
    (tmp_path / "coord.bindings").write_text(f"0 7\t5\tns={ns}\tshare=1\tmem={12 * GiB}\n")
    device = {"memory_used": 10 * GiB, "processes": [{"pid": 7, "used_memory": 10 * GiB}]}
    [warning] = memory_doctor(tmp_path, coord, device)
    assert warning["level"] == "warning"
    assert warning["message"].startswith(
        "GPU 0: its bindings request 12 GiB of its memory (pid 7: 12 GiB), but only 6 GiB is free"
    )
    assert "could not be told (pid 7 is of another PID namespace" in warning["message"]
    assert warning["message"].endswith("so it was not subtracted: the requests may still fit.")


def test_doctor_notes_a_gpu_with_requests_whose_free_memory_nvml_does_not_read(tmp_path):
    coord = tmp_path / "coord"
    ns = os.stat("/proc/self/ns/pid").st_ino + 1
    (tmp_path / "coord.bindings").write_text(f"0 7\t5\tns={ns}\tshare=1\tmem={12 * GiB}\n")
    [note] = memory_doctor(tmp_path, coord, {"not_supported": ["memory", "memory_v2"]})
    assert note["level"] == "note"
    assert note["message"] == (
        "GPU 0: its bindings request 12 GiB of its memory (pid 7: 12 GiB), but NVML did not read its free "
        "memory: doctor cannot tell whether the requests still fit."
    )


def test_doctor_names_an_orphaned_worker_and_how_to_end_it(tmp_path):
    """A process-mode TaskManager SIGKILLed; its worker lives on (stopped: it cannot give its binding up
    itself) with 12 GiB of GPU 0's 16 used. Its binding counts for nothing: doctor names it, its dead
    TaskManager, the GPU and request, and how to end it; no request is left to fit."""
    from support.orphans import orphaned_worker

    coord = tmp_path / "coord"
    spec = {"devices": [{"memory_total": 16 * GiB}, {}]}
    with orphaned_worker(f"{coord}.bindings", spec, memory="12 gb", stopped=True) as orphan:
        device = {"memory_used": 12 * GiB, "processes": [{"pid": orphan.pid, "used_memory": 12 * GiB}]}
        [warning] = memory_doctor(tmp_path, coord, device)
    assert warning["level"] == "warning" and warning["resource"] == "gpu"
    assert warning["message"] == (
        f"pid {orphan.pid}, a worker of TaskManager {orphan.taskmanager} which is gone, still runs on GPU 0 (its "
        "request of 12 GiB no longer counts): no bind counts its binding any longer, but what it allocated there "
        "is not free."
    )
    assert warning["fix"] == f"End it: kill {orphan.pid}."
