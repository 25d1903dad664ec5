"""doctor's check of a resource's driver factory (flink_gpu.cli.doctor_command.factory), loaded as a worker loads it."""

import json
import os
from pathlib import Path

import pytest

from conftest import child_env
from support.cli import JAVA_FACTORY, cli, findings, gpu_conf, only, run_doctor


def test_doctor_factory_missing_or_unknown(tmp_path):
    doc = run_doctor(tmp_path, gpu_conf(factory=None), expect=1)
    error = only(doc, "factory", "error")
    assert "driver-factory.class is not set" in error["message"]
    assert JAVA_FACTORY in error["fix"]

    typo = "org.apache.flink.externalresource.gpu.GpuDriverFactory"
    doc = run_doctor(tmp_path, gpu_conf(factory=typo), expect=1)
    error = only(doc, "factory", "error")
    assert f"Factory class {typo} of 'gpu' was not found" in error["message"]
    assert error["fix"] == f"Did you mean `external-resource.gpu.driver-factory.class: {JAVA_FACTORY}`?"

    doc = run_doctor(tmp_path, gpu_conf(factory="no_such_pkg.Factory"), expect=1)
    assert "no_such_pkg" in only(doc, "factory", "error")["message"]


@pytest.mark.parametrize(
    "factory, level, message",
    [
        ("flink_gpu_test_drivers:RecordingFactory", "ok", "The driver of 'fpga' was created"),
        (
            "flink_gpu_test_drivers:RaisingFactory",
            "error",
            "cannot create the driver of 'fpga': FlinkException: the device is not there",
        ),
        ("flink_gpu_test_drivers:ConstructorRaisingFactory", "error", "raised RuntimeError: cannot construct"),
        ("flink_gpu_test_broken_driver:Factory", "error", "cannot be loaded"),
    ],
)
def test_doctor_builds_other_drivers_without_running_them(tmp_path, factory, level, message):
    text = (
        "external-resources: fpga\nexternal-resource.fpga.amount: 1\n"
        f"external-resource.fpga.driver-factory.class: {factory}\n"
    )
    env = child_env()
    fixtures = str(Path(__file__).resolve().parents[2] / "fixtures")  # tests/fixtures
    env["PYTHONPATH"] = os.pathsep.join([fixtures, env["PYTHONPATH"]])
    doc = run_doctor(tmp_path, text, env=env)
    found = [
        f
        for f in doc["findings"]
        if f["check"] in ("factory", "driver") and f["level"] == level and message in f["message"]
    ]
    assert found, json.dumps(doc["findings"], indent=1)
    assert not findings(doc, "script-run") and not findings(doc, "coordination")


# doctor resolves the factory name exactly as a worker does (no stripping)


def test_doctor_does_not_pass_a_factory_name_a_worker_cannot_load(tmp_path):
    import json

    from flink_gpu import load_external_resources

    conf = tmp_path / "config.yaml"
    conf.write_text(
        "external-resources: gpu\nexternal-resource:\n  gpu:\n    amount: 1\n"
        '    driver-factory:\n      class: "flink_gpu.GPUDriverFactory "\n'
    )
    provider = load_external_resources(str(conf))
    assert "was not found" in provider.missing_reason("gpu")  # what a worker does with it
    proc = cli("doctor", conf, "--json", "--simulate", "2", "--taskmanagers-per-host", "1")
    doc = json.loads(proc.stdout)
    factory = [f for f in doc["findings"] if f["check"] == "factory"]
    assert [f["level"] for f in factory] == ["error"], factory
    assert proc.returncode == 1
