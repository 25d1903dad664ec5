"""doctor's check of the GPUs' state (flink_gpu.cli.doctor.gpu_state): persistence mode, on the bundled
NVML simulator."""

import json
import subprocess
import sys

from flink_gpu import simulator

from conftest import child_env

CONF = ("external-resources: gpu\n"
        "external-resource.gpu.amount: 1\n"
        "external-resource.gpu.driver-factory.class: flink_gpu.GPUDriverFactory\n"
        "external-resource.gpu.param.discovery-mode: nvml\n")


def doctor(tmp_path, spec):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(CONF)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-m", "flink_gpu.cli", "doctor", str(conf), "--simulate-spec",
                           str(spec_file), "--json", "--taskmanagers-per-host", "1"],
                          env=child_env(**simulator.environment(spec=spec)), capture_output=True, text=True,
                          timeout=60)
    doc = json.loads(proc.stdout)
    return [f for f in doc["findings"] if f["check"] == "gpu-state" and "persistence" in f["message"]]


def test_doctor_notes_the_gpus_without_persistence_mode_and_says_why_a_first_claim_is_slow(tmp_path):
    spec = {"devices": [{}, {"persistence_mode": "disabled"}, {"persistence_mode": "disabled", "mig": {
        "mode": "enabled", "instances": [{"slot": 1}, {"slot": 2}]}}]}
    [note] = doctor(tmp_path, spec)
    assert note["level"] == "note"
    assert note["message"].startswith("GPU 1, 2: persistence mode is off: the first claim on each GPU may take "
                                      "seconds (without it the driver initialises a GPU when a process first "
                                      "asks for its handle")  # a MIG GPU once, not per unit
    assert "nvidia-persistenced" in note["fix"]


def test_doctor_has_no_persistence_finding_where_it_is_on_or_unknown(tmp_path):
    assert doctor(tmp_path, {"devices": [{}, {"not_supported": ["persistence_mode"]}]}) == []
