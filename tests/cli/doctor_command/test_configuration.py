"""doctor's configuration (flink_gpu.cli.doctor_command.configuration): which file it checks and how it reads it."""

import json
import os
import subprocess
import sys

import pytest

from conftest import child_env
from support.cli import cli, gpu_conf, only, run_doctor
from support.faults import JAVA_FACTORY, write_conf


def test_doctor_reports_lines_the_legacy_parser_skips(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script).replace(
        "external-resource.gpu.amount: 1", "external-resource.gpu.amount:1"
    )
    doc = run_doctor(tmp_path, text, expect=1)
    warning = only(doc, "configuration", "warning")
    assert f"{tmp_path / 'flink-conf.yaml'}:2" in warning["message"]
    assert "missing space after ':'" in warning["message"]
    only(doc, "amount", "error")  # which is why the amount is missing


def test_doctor_configuration_resolution(tmp_path):
    env = child_env()
    proc = cli("doctor", env=env)
    assert proc.returncode == 2 and "FLINK_CONF_DIR" in proc.stderr
    proc = cli("doctor", tmp_path / "missing", env=env)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = cli("doctor", tmp_path, env=env)  # a directory without a configuration file
    assert proc.returncode == 2 and "no config.yaml or flink-conf.yaml" in proc.stderr
    (tmp_path / "config.yaml").write_text("external-resources: [gpu\n")
    proc = cli("doctor", "--json", env=child_env(FLINK_HOME=str(tmp_path / "nothome"), FLINK_CONF_DIR=str(tmp_path)))
    assert proc.returncode == 1
    error = only(json.loads(proc.stdout), "configuration", "error")
    assert "Invalid YAML" in error["message"] and str(tmp_path / "config.yaml") in error["message"]


# doctor picks a conf directory's file as Flink does, and says what an odd one is


def test_doctor_on_a_conf_directory_whose_config_file_is_a_fifo_says_so(tmp_path):
    # doctor used to skip a config.yaml that is not a regular file and check flink-conf.yaml, a
    # file the TaskManager never reads
    (tmp_path / "flink-conf.yaml").write_text("external-resources: gpu\n")
    os.mkfifo(tmp_path / "config.yaml")
    proc = cli("doctor", "--simulate", "2", tmp_path, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{tmp_path / 'config.yaml'} is a FIFO (named pipe), not a regular file" in proc.stdout


@pytest.mark.parametrize("kind", ["directory", "symlink loop"])
def test_doctor_on_a_conf_directory_whose_config_file_is_no_file_says_what_it_is(tmp_path, kind):
    """Not "the directory has no config.yaml": it has one, which no TaskManager can read."""
    (tmp_path / "flink-conf.yaml").write_text("external-resources: gpu\n")
    config = tmp_path / "config.yaml"
    if kind == "directory":
        config.mkdir()
        what = "is a directory, not a regular file"
    else:
        config.symlink_to(config)
        what = "is a loop of symbolic links"
    proc = cli("doctor", "--simulate", "2", tmp_path, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{config} {what}" in proc.stdout + proc.stderr
    assert "no config.yaml" not in proc.stdout + proc.stderr


# hostile YAML: doctor and resources say what is wrong with the file, never with a traceback


def test_doctor_and_resources_report_a_recursive_alias_without_a_traceback(tmp_path):
    conf = tmp_path / "rec.yaml"
    conf.write_text("a: &x {b: 1, c: *x}\n")
    expected = (
        f"The Flink configuration file {conf} has a recursive alias *x at line 1, "
        "column 17: the value anchored &x would contain itself."
    )
    proc = cli("resources", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"flink-gpu resources: error: {expected}" in proc.stderr
    proc = cli("doctor", "--simulate", "2", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert expected in proc.stdout


def test_doctor_and_resources_refuse_an_alias_bomb_at_once(tmp_path):
    conf = tmp_path / "bomb.yaml"
    lines = ["m0: &m0 {k: v}"] + [f"m{n}: &m{n} {{a: *m{n - 1}, b: *m{n - 1}}}" for n in range(1, 31)]
    conf.write_text("\n".join(lines) + "\n")
    for args in (("resources", conf), ("doctor", "--simulate", "2", conf)):
        proc = cli(*args, timeout=30)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (
            f"The aliases of the Flink configuration file {conf} expand to more than 100000 "
            "values" in proc.stdout + proc.stderr
        )


# deeply nested YAML: refused naming the file and the limit, never a RecursionError


def test_doctor_and_resources_refuse_a_configuration_nested_too_deep(tmp_path):
    conf = tmp_path / "config.yaml"  # 995 levels: under libyaml's own limit of 1000
    conf.write_text("a: " + "{a: " * 994 + "1" + "}" * 994 + "\n")
    expected = (
        f"The Flink configuration file {conf} nests mappings or lists more than 100 levels deep (at line 1, column 400)"
    )
    proc = cli("resources", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"flink-gpu resources: error: {expected}" in proc.stderr
    proc = cli("doctor", "--simulate", "2", conf)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert expected in proc.stdout


def test_doctor_names_a_key_set_twice_and_both_of_its_lines(tmp_path, good_script):
    # Flink's stock config.yaml sets the slots nested; a user appends `taskmanager.numberOfTaskSlots: 2`
    stock = "taskmanager:\n  numberOfTaskSlots: 1\n"
    text = stock + gpu_conf(discovery_script_path=good_script) + "taskmanager.numberOfTaskSlots: 2\n"
    doc = run_doctor(tmp_path, text, file_name="config.yaml")
    conf = tmp_path / "config.yaml"
    last = len(text.splitlines())
    warning = only(doc, "configuration", "warning")
    assert warning["message"] == (
        f"taskmanager.numberOfTaskSlots is set 2 times in {conf}: line 2 (`numberOfTaskSlots: 1`), "
        f"line {last} (`taskmanager.numberOfTaskSlots: 2`). Flink takes the last one (line {last}) without a word."
    )
    assert "Keep one line for taskmanager.numberOfTaskSlots" in warning["fix"]
    # doctor reads the value Flink reads: the last
    assert "taskmanager.numberOfTaskSlots is 2" in only(doc, "task-slots", "note")["message"]


def test_doctor_says_flink_refuses_a_mapping_that_holds_a_key_twice(tmp_path, good_script):
    text = gpu_conf(discovery_script_path=good_script) + "external-resources: gpu\n"
    doc = run_doctor(tmp_path, text, file_name="config.yaml", expect=1)
    error = only(doc, "configuration", "error")
    assert "sets the key 'external-resources' twice in one mapping (lines 1 and 5)" in error["message"]
    assert "Flink refuses such a file" in error["message"]


# ---- typos in the configuration ------------------------------------------------------------------


def doctor(conf):
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "doctor", "--simulate", "2", str(conf)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.usefixtures("no_leaks")
def test_doctor_suggests_the_nearest_gpu_option_for_a_typo(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu
external-resource.gpu.amount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
external-resource.gpu.param.discovery-script.pth: /opt/discovery.sh
""",
    )
    _, output = doctor(conf)
    assert "discovery-script.pth" in output
    assert "Did you mean external-resource.gpu.param.discovery-script.path?" in output


@pytest.mark.usefixtures("no_leaks")
def test_doctor_suggests_the_nearest_resource_key_for_a_typo(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu
external-resource.gpu.ammount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
""",
    )
    code, output = doctor(conf)
    assert code == 1  # the amount is missing: an error
    assert "external-resource.gpu.ammount is not an option of external resources" in output
    assert "Did you mean external-resource.gpu.amount?" in output


@pytest.mark.usefixtures("no_leaks")
def test_doctor_does_not_flag_the_keys_of_a_resource_whose_name_extends_another(tmp_path):
    conf = write_conf(
        tmp_path,
        f"""\
external-resources: gpu;gpu.a100
external-resource.gpu.amount: 1
external-resource.gpu.driver-factory.class: {JAVA_FACTORY}
external-resource.gpu.a100.amount: 1
external-resource.gpu.a100.driver-factory.class: {JAVA_FACTORY}
""",
    )
    _, output = doctor(conf)
    assert "is not an option of external resources" not in output
