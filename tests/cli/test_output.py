"""What every command prints (flink_gpu.cli._output): the --json documents and their schema, errors and the
hints under them."""

import json
import os
from pathlib import Path

import flink_gpu
from conftest import child_env
from support.cli import RESOURCES_CONF, cli, cli_json, gpu_conf, write_file


def test_without_a_driver_list_fails_clearly(tmp_path):
    missing = tmp_path / "libnvidia-ml.so.1"
    env = child_env(FLINK_GPU_NVML_LIBRARY=str(missing))
    proc = cli("list", env=env)
    assert proc.returncode == 1
    assert str(missing) in proc.stderr
    assert "--simulate 4" in proc.stderr  # the hint
    doc = cli_json("list", env=env, expect=1)
    assert doc["error"]["type"] == "NvmlError" and str(missing) in doc["error"]["message"]


def test_every_json_document_has_the_documented_top_level_fields(tmp_path):
    common = {"schema", "command", "ok"}
    coord = tmp_path / "coord"
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    expected = [
        (
            "list",
            ["--simulate", "2", "list", "--file", coord],
            {"nvml", "gpus", "skipped", "coordination", "bindings", "topology"},
        ),
        (
            "claim",
            ["--simulate", "2", "claim", "1", "--file", coord],
            {"path", "from", "note", "owner", "amount", "gpus", "left_out"},
        ),
        (
            "coordination show",
            ["coordination", "show", "--file", coord],
            {"path", "from", "note", "exists", "entries", "unparsable"},
        ),
        (
            "coordination clean",
            ["coordination", "clean", "--file", coord],
            {"path", "from", "note", "exists", "foreign_namespaces", "removed", "unparsable"},
        ),
        ("release", ["release", "--file", coord], {"path", "from", "note", "owner", "released"}),
        ("doctor", ["doctor", conf], {"configuration", "flink_home", "findings", "summary"}),
        ("resources", ["resources", conf], {"configuration", "kubernetes", "yarn"}),
        (
            "demo",
            ["demo"],
            {
                "simulated",
                "devices",
                "coordination_file",
                "before",
                "after",
                "killed",
                "reclaimed",
                "binding",
                "cleaned_up",
            },
        ),
    ]
    for command, args, fields in expected:
        doc = json.loads(cli(*args, "--json").stdout)
        assert doc["command"] == command and doc["schema"] == 1
        assert set(doc) == common | fields, command


MIG_SPEC = {
    "devices": [
        {},
        {
            "mig": {
                "mode": "enabled",
                "instances": [
                    {"slot": 1, "uuid": "MIG-aaaa", "gi": 1, "ci": 0},
                    {"slot": 2, "uuid": "MIG-bbbb", "gi": 2, "ci": 0},
                ],
            }
        },
    ]
}


def test_every_json_document_follows_the_schema(tmp_path, holder):
    """src/flink_gpu/cli/schema.json, the JSON Schema of cli/json_schema.md, against what each command prints: successes
    and failures, MIG units, holders and bindings, and lines that are not UTF-8."""
    from flink_gpu import binding, coordination
    from support.json_schema import errors

    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    coord = tmp_path / "coord"
    coordination.claim(1, ["0"], path=coord, owner=holder.pid)
    with open(coord, "ab") as f:
        f.write(b"unparsable \xff line\n")
    bindings = binding.bindings_path(coord)
    Path(bindings).write_bytes(b"9 \xfe\n")
    spec = tmp_path / "mig.json"
    spec.write_text(json.dumps(MIG_SPEC))
    conf = tmp_path / "flink-conf.yaml"
    conf.write_text(RESOURCES_CONF)
    gpu_conf_file = tmp_path / "gpu" / "flink-conf.yaml"
    gpu_conf_file.parent.mkdir()
    gpu_conf_file.write_text(
        gpu_conf(
            amount=1,
            factory="flink_gpu.GPUDriverFactory",
            discovery_mode="nvml",
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        )
    )
    runs = [
        ["--simulate-spec", spec, "list", "--file", coord],
        ["--simulate", "3", "list", "--file", coord],
        ["coordination", "show", "--file", coord],
        ["coordination", "clean", "--file", coord, "--foreign-namespaces"],
        ["--simulate", "3", "claim", "1", "--file", coord],
        ["--simulate", "3", "claim", "9", "--file", coord],  # not enough: ok false, an error
        ["release", "--file", coord],
        ["doctor", conf, "--simulate", "2"],
        ["doctor", gpu_conf_file, "--simulate", "2"],  # every GPU check, taskmanager-env's among them
        ["doctor", tmp_path / "missing.yaml"],
        ["resources", conf],
        ["resources", conf, "--yarn"],
        ["demo"],
        ["--simulate", "2", "taskmanager-env"],
        ["taskmanager-env"],  # no simulator chosen, no driver: ok false
        ["no-such-command"],
    ]
    with binding.bind([flink_gpu.GPUInfo("1")], slot="s", taskmanager_pid=os.getpid(), path=bindings):
        for args in runs:
            proc = cli(*args, "--json")
            doc = json.loads(proc.stdout)
            assert errors(doc, schema) == [], (args, proc.stdout)
    assert errors({"schema": 1, "command": "list", "ok": True}, schema), "the schema requires nothing"


def test_a_failure_of_the_simulator_does_not_hint_at_the_simulator(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"devices": [{"name": 5}]}')
    from flink_gpu import simulator

    env = child_env(FLINK_GPU_NVML_LIBRARY=simulator.library_path(), FLINK_GPU_SIM_SPEC=str(spec))
    proc = cli("list", env=env)
    assert proc.returncode == 1
    assert f"{spec}: devices[0].name must be a string" in proc.stderr  # the simulator's own line
    assert "--simulate 4" not in proc.stderr
    assert "hint: this NVML is the bundled simulator" in proc.stderr
    proc = cli("list", "--simulate-spec", write_file(tmp_path / "e.json", '{"init_error": 9}'))
    assert proc.returncode == 1 and "--simulate 4" not in proc.stderr
