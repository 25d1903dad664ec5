"""`flink-gpu doctor` as a whole (flink_gpu.cli.doctor_command): a healthy configuration passes every check, and the
schema names every check doctor reports."""

import re

from conftest import child_env
from support.cli import cli, gpu_conf, only, run_doctor


def test_doctor_healthy_configuration_runs_the_script_and_passes(tmp_path, good_script):
    doc = run_doctor(
        tmp_path,
        gpu_conf(factory="flink_gpu.GPUDriverFactory", discovery_script_path=good_script),
        "--taskmanagers-per-host",
        "1",
        expect=0,
    )
    assert only(doc, "driver", "ok")["message"].startswith("flink_gpu uses the script backend")
    assert f"{good_script} 1 null" in only(doc, "script-run", "ok")["message"]
    only(doc, "coordination", "ok")
    # human output: markers, the resource, a summary
    proc = cli(
        "doctor", tmp_path / "flink-conf.yaml", "--simulate", "4", "--taskmanagers-per-host", "1", env=child_env()
    )
    assert proc.returncode == 0
    assert f"Configuration: {tmp_path / 'flink-conf.yaml'}" in proc.stdout
    assert re.search(r"^\[ ok \] gpu: external-resource\.gpu\.amount is 1\.$", proc.stdout, re.M)
    assert "No problem found" in proc.stdout


def test_doctor_summary_with_warnings_and_no_failure_never_says_no_problem(tmp_path, good_script):
    conf = tmp_path / "flink-conf.yaml"
    # a misspelt key: a warning, not a failure
    conf.write_text(
        gpu_conf(discovery_script_path=good_script) + "external-resource.gpu.param.discovery-script.arg: x\n"
    )
    proc = cli("doctor", conf, "--simulate", "4", "--taskmanagers-per-host", "1", env=child_env())
    assert proc.returncode == 0, proc.stdout
    assert re.fullmatch(r"1 warning, no failure \(\d+ notes?\)\.", proc.stdout.splitlines()[-1]), proc.stdout
    assert "No problem found" not in proc.stdout


# the JSON schema in docs/cli.md names every check doctor reports


def test_cli_schema_lists_every_doctor_check():
    import importlib
    import inspect
    import pkgutil
    import re

    from flink_gpu.cli import doctor_command as doctor

    sources = [
        inspect.getsource(importlib.import_module(f"{doctor.__name__}.{module.name}"))
        for module in pkgutil.iter_modules(doctor.__path__)
    ]
    emitted = set(re.findall(r'\.add\(\s*"(?:error|warning|note|ok)",\s*"([a-z-]+)"', "\n".join(sources)))
    schema = cli("schema").stdout.split("`check` is one of", 1)[1].split("`resources`", 1)[0]
    assert "resource-keys" in emitted  # the regex still finds the checks
    assert emitted <= set(re.findall(r"`([a-z-]+)`", schema))
