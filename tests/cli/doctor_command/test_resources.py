"""doctor's resource list and amounts (flink_gpu.cli.doctor_command.resources)."""

import re

import pytest

from conftest import child_env
from support.cli import JAVA_FACTORY, cli, gpu_conf, only, run_doctor


def test_doctor_no_resource_listed(tmp_path):
    doc = run_doctor(tmp_path, "taskmanager.numberOfTaskSlots: 2\n", expect=1)
    error = only(doc, "resource-list", "error")
    assert "external-resources is not set" in error["message"]
    assert f"external-resource.gpu.driver-factory.class: {JAVA_FACTORY}" in error["fix"]
    doc = run_doctor(tmp_path, "external-resources: none\n", expect=1)
    assert "'none'" in only(doc, "resource-list", "error")["message"]
    # the human output prints a multi-line fix indented under its finding
    proc = cli("doctor", tmp_path / "flink-conf.yaml", env=child_env())
    assert re.search(
        r"^\[FAIL\] No external resource is enabled.*\n       fix: Add to the "
        r"configuration:\n            external-resources: gpu\n",
        proc.stdout,
        re.M,
    )
    assert "1 check failed" in proc.stdout


def test_doctor_resource_configured_but_not_listed(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script).replace("gpu.amount", "GPU.amount")
    doc = run_doctor(tmp_path, text, expect=1)
    error = only(doc, "unlisted-resource", "error")
    assert error["resource"] == "GPU"
    assert "case-sensitive" in error["message"]
    assert "external-resources: gpu;GPU" in error["fix"]
    assert "external-resource.gpu.amount is not set" in only(doc, "amount", "error")["message"]


def test_doctor_bad_resource_list_quoting(tmp_path):
    doc = run_doctor(tmp_path, 'external-resources: "gpu;fpga\n', expect=1)
    assert "Quoting was not closed properly" in only(doc, "resource-list", "error")["message"]


@pytest.mark.parametrize(
    "amount, message",
    [
        (None, "external-resource.gpu.amount is not set"),
        (0, "external-resource.gpu.amount is 0: it must be positive"),
        (-2, "external-resource.gpu.amount is -2"),
        ("two", "Could not parse value 'two' for key 'external-resource.gpu.amount'."),
    ],
)
def test_doctor_amount(tmp_path, good_script, amount, message):
    doc = run_doctor(tmp_path, gpu_conf(amount=amount, discovery_script_path=good_script), expect=1)
    error = only(doc, "amount", "error")
    assert message in error["message"]
    assert "external-resource.gpu.amount: 1" in error["fix"]
