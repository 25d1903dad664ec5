"""doctor's check of the GPUs NVML reports against the amount asked for (flink_gpu.cli.doctor_command.gpu_count)."""

import json

from conftest import child_env
from support.cli import cli, gpu_conf


def test_doctor_reports_a_mig_gpu_without_instances_and_a_pending_mode(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"mig": {"mode": "enabled", "pending": "disabled"}}, {}]}))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_mode="nvml"))
    doc = json.loads(cli("doctor", conf, "--simulate-spec", spec, "--json", env=child_env()).stdout)
    messages = [f["message"] for f in doc["findings"] if f["check"] == "nvml"]
    assert any("MIG mode is enabled but it has no MIG instances" in m for m in messages)
    assert any("MIG mode pending a reset" in m for m in messages)
