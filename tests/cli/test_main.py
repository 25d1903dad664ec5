"""The command line itself (flink_gpu.cli): its parser, usage errors and exit codes, --simulate and
--simulate-spec, the schema command, and main() called in a process; run as real processes against the NVML
simulator."""

import json
import os
import re
import subprocess
import sys

import pytest

import flink_gpu
from conftest import child_env, run_python
from support.cli import RESOURCES_CONF, cli, cli_json
from support.files import make_odd_path


def test_import_is_light():
    proc = run_python(
        """
        import sys
        import flink_gpu.cli
        heavy = ("yaml", "json", "subprocess", "flink_gpu._native", "flink_gpu.flink.configuration",
                 "flink_gpu.coordination", "flink_gpu.gpu.driver")
        print(sorted(m for m in heavy if m in sys.modules))
    """,
        env=child_env(),
    )
    assert proc.stdout.strip() == "[]"


def test_help_lists_every_subcommand_and_the_exit_codes():
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("list", "coordination", "claim", "release", "doctor", "resources", "demo"):
        assert re.search(rf"^\s+{command}\s", proc.stdout, re.M), command
    assert "Exit codes: 0 ok, 1" in " ".join(proc.stdout.split())


def test_claim_help_says_the_owner_is_the_parent_process():
    proc = cli("claim", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "defaults to the parent of this command (normally your shell)" in text
    assert "reclaimable right away" in text


@pytest.mark.parametrize(
    "args",
    [
        [],  # no subcommand
        ["claim"],  # N missing
        ["claim", "two"],
        ["claim", "-1"],
        ["list", "--simulate", "-1"],
        ["--simulate", "2", "--simulate-spec", "x.json", "list"],
        ["release", "--owner", "0"],
        ["release", "--owner", "4294967297"],  # too large: said so, not "must be positive"
        ["doctor", "--taskmanagers-per-host", "0"],
        ["coordination"],  # action missing
        ["resources", "conf.yaml", "--kubernetes", "--yarn"],
        ["bogus"],
    ],
)
def test_usage_errors_exit_2(args):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "usage:" in proc.stderr
    if "4294967297" in args:
        assert "a process id is at most 2147483647, got 4294967297" in proc.stderr


def test_main_returns_exit_codes_in_process(capsys):
    from flink_gpu.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"flink-gpu {flink_gpu.__version__}"
    assert main(["list", "--no-such-flag"]) == 2


def test_simulate_goes_before_or_after_the_subcommand(tmp_path):
    before = cli_json("--simulate", "2", "list", "--file", tmp_path / "c")
    after = cli_json("list", "--simulate", "5", "--file", tmp_path / "c")
    assert [g["index"] for g in before["gpus"]] == ["0", "1"]
    assert len(after["gpus"]) == 5


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("{not json", "cannot read"),
        ('{"devices": [{"colour": "red"}]}', "unknown keys ['colour']"),
    ],
)
def test_simulate_spec_errors_are_usage_errors(tmp_path, content, message):
    spec = tmp_path / "spec.json"
    if content is not None:
        spec.write_text(content)
    proc = cli("list", "--simulate-spec", spec)
    assert proc.returncode == 2
    assert message in proc.stderr and str(spec) in proc.stderr


def test_schema_prints_the_json_schema_shipped_in_the_package_for_every_command():
    proc = cli("schema")
    assert proc.returncode == 0
    from importlib.resources import files

    shipped = files("flink_gpu.cli").joinpath("json_schema.md").read_text(encoding="utf-8")
    assert proc.stdout == shipped
    from flink_gpu.cli import build_parser

    commands = [action for action in build_parser()._actions if action.dest == "command"][0].choices
    for command in set(commands) - {"schema", "coordination"}:
        assert f"\n`{command}`\n: " in shipped, command
    assert "`flink-gpu schema`" in " ".join(cli("--help").stdout.split())


# cli.main() called in a process leaves the library's logger as it found it


def test_cli_main_in_process_does_not_pile_up_log_handlers(tmp_path, capsys):
    import logging

    from flink_gpu.cli import main

    conf = tmp_path / "flink-conf.yaml"
    conf.write_text("external-resources: gpu\nexternal-resource.gpu.amount: 1\n")
    logger = logging.getLogger("flink_gpu")
    before = (list(logger.handlers), logger.level, logger.propagate)
    for _ in range(3):
        assert main(["resources", str(conf), "--kubernetes"]) == 0
        err = capsys.readouterr().err
        # the missing kubernetes.config-key is WARNed once per run, not once per earlier run
        assert err.count("Could not find valid external-resource.gpu.kubernetes.config-key") == 1
    assert (list(logger.handlers), logger.level, logger.propagate) == before


# a usage error under --json still answers in JSON


def test_cli_usage_error_with_json_still_answers_in_json():
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "--json", "claim", "two"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    import json

    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] is None and doc["ok"] is False
    assert doc["error"]["type"] == "UsageError" and "'two'" in doc["error"]["message"]
    assert "usage:" in proc.stderr and "'two'" in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_every_file_argument_that_is_not_a_regular_file_is_refused_saying_what_it_is(tmp_path, kind):
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    path, what = make_odd_path(tmp_path / "odd", kind)
    cases = [
        (("--simulate-spec", path, "list"), 2, f"--simulate-spec: The simulator spec file {path}"),
        (("resources", conf, "--pod-template", path), 2, f"--pod-template: The pod template file {path}"),
    ]
    if kind != "directory":  # a directory is a conf directory
        cases += [
            (("resources", path), 2, f"The Flink configuration file {path}"),
            (("doctor", "--simulate", "2", path), 1, f"The Flink configuration file {path}"),
        ]
    for args, code, start in cases:
        proc = cli(*args, timeout=30)  # a FIFO read would never return
        assert proc.returncode == code, (args, proc.stdout + proc.stderr)
        assert f"{start} is {what}, not a regular file" in proc.stdout + proc.stderr, args
    os.symlink(path, tmp_path / "config.yaml")  # the file of a conf directory
    proc = cli("resources", tmp_path, timeout=30)
    assert proc.returncode == 2
    assert f"The Flink configuration file {tmp_path / 'config.yaml'} is {what}" in proc.stderr


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"devices": [{"name": 5}]}, "devices[0].name must be a string, got 5"),
        (
            {"devices": [{"memory_total": "abc"}]},
            'devices[0].memory_total must be a whole number of bytes (0..2^64-1), got "abc"',
        ),
        ({"devices": [{"minor_number": -1}]}, "devices[0].minor_number must be a whole number"),
        ({"driver_version": 5}, "driver_version must be a string, got 5"),
        ({"init_error": "x"}, 'init_error must be an NVML error code (0..999), got "x"'),
        ({"init_error": 1.5}, "init_error must be an NVML error code (0..999), got 1.5"),
    ],
)
def test_simulate_spec_values_of_the_wrong_type_are_usage_errors_naming_the_key(tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = cli("list", "--simulate-spec", path)
    assert proc.returncode == 2
    assert f"--simulate-spec: {path}: {message}" in proc.stderr
    assert "NVML call failed" not in proc.stderr and "hint" not in proc.stderr


def test_an_empty_file_option_is_a_usage_error_naming_it(tmp_path):
    for args in (("claim", "1"), ("release",), ("list",), ("coordination", "show")):
        proc = cli("--simulate", "2", *args, "--file", "", cwd=tmp_path)
        assert proc.returncode == 2, args
        assert "argument --file: expected the path of the coordination file, got ''" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("count", ["99999999999999999999", "18446744073709551617", "4097"])
@pytest.mark.parametrize("command", [["list"], ["demo"], ["coordination", "show"]])
def test_a_simulated_gpu_count_beyond_the_simulator_is_a_usage_error(tmp_path, count, command):
    proc = cli("--simulate", count, *command, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"error: --simulate: devices must be a whole number from 0 to 4096 (the simulated host's GPU "
        f"count), got {count}."
    ) in proc.stderr


def test_the_largest_simulated_gpu_count_works():
    doc = cli_json("--simulate", "4096", "list")
    assert len(doc["gpus"]) == 4096
