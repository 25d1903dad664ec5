"""Which coordination file `flink-gpu list`, `coordination show|clean`, `claim` and `release` use
(flink_gpu.cli.coordination_file): --file; else that of the Flink configuration in --conf or $FLINK_CONF_DIR; else
the stock default. Real configuration directories, `flink-gpu` run as a process against the NVML simulator."""

import json

import pytest

from conftest import child_env, dead_pid
from support.cli import cli, cli_json, cli_with_a_private_var_tmp, gpu_conf
from support.interop import find_discovery_executable

#: Every command that uses a coordination file, with what it needs besides.
COMMANDS = [["list"], ["claim", "1"], ["release"], ["coordination", "show"], ["coordination", "clean"]]


def coordinated_conf(conf_dir, coord):
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "config.yaml").write_text(
        gpu_conf(
            amount=2,
            discovery_script_path=find_discovery_executable(),
            discovery_script_args=f"--enable-coordination-mode --coordination-file {coord}",
        )
    )
    return conf_dir


def uncoordinated_conf(conf_dir):
    conf_dir.mkdir()
    (conf_dir / "config.yaml").write_text(gpu_conf(amount=1, discovery_script_args="''"))
    return conf_dir


def lines(coord):
    return [line.split()[:2] for line in coord.read_text().splitlines()]


def test_list_reads_the_coordination_file_of_the_flink_configuration(tmp_path, holder):
    coord = tmp_path / "coordination"
    conf_dir = coordinated_conf(tmp_path / "conf", coord)
    cli_json("--simulate", "4", "claim", "1", "--owner", holder.pid, "--file", coord)
    by_env = cli_json("--simulate", "4", "list", env=child_env(FLINK_CONF_DIR=str(conf_dir)))
    by_option = cli_json("--simulate", "4", "list", "--conf", conf_dir / "config.yaml")
    for doc in (by_env, by_option):
        assert doc["coordination"]["path"] == str(coord)
        assert [h["pid"] for h in doc["gpus"][0]["holders"]] == [holder.pid]
    assert by_env["coordination"]["from"] == f"$FLINK_CONF_DIR {conf_dir}"
    human = cli("--simulate", "4", "list", env=child_env(FLINK_CONF_DIR=str(conf_dir))).stdout
    assert f"Holders from the coordination file {coord} (of the Flink configuration in $FLINK_CONF_DIR" in human
    # --file still wins
    assert cli_json(
        "--simulate", "4", "list", "--file", tmp_path / "other", env=child_env(FLINK_CONF_DIR=str(conf_dir))
    )["coordination"]["path"] == str(tmp_path / "other")


def test_in_a_clusters_shell_claim_writes_the_clusters_file_and_show_clean_release_read_it(tmp_path, holder):
    """In a cluster's shell ($FLINK_CONF_DIR set) `coordination show` said nothing was claimed while the cluster
    held every GPU, and `claim 1` claimed in the stock default file."""
    coord = tmp_path / "cluster-coordination"
    conf_dir = coordinated_conf(tmp_path / "conf", coord)
    env = child_env(FLINK_CONF_DIR=str(conf_dir))
    named = f"{coord} (of the Flink configuration in $FLINK_CONF_DIR {conf_dir})"

    claimed = cli_json("--simulate", "4", "claim", "2", "--owner", holder.pid, env=env)
    assert (claimed["path"], claimed["from"], claimed["note"]) == (str(coord), f"$FLINK_CONF_DIR {conf_dir}", None)
    assert lines(coord) == [["0", str(holder.pid)], ["1", str(holder.pid)]]
    human = cli("--simulate", "4", "claim", "2", "--owner", holder.pid, env=env)  # the owner asking again
    assert human.returncode == 0, human.stderr
    assert f"Claimed GPU 0, 1 for pid {holder.pid}" in human.stdout and f"in {named}." in human.stdout
    # the same shell reads the same $FLINK_CONF_DIR: nothing to repeat
    assert f"until `flink-gpu release --owner {holder.pid}` or" in human.stdout

    gone = dead_pid()
    with open(coord, "a") as f:
        f.write(f"2 {gone}\n")
    shown = cli_json("coordination", "show", env=env)
    assert (shown["path"], shown["from"]) == (str(coord), f"$FLINK_CONF_DIR {conf_dir}")
    assert [(e["index"], e["pid"]) for e in shown["entries"]] == [("0", holder.pid), ("1", holder.pid), ("2", gone)]
    human = cli("coordination", "show", env=env).stdout
    assert f"Coordination file {named}: 3 entries (2 live, 1 stale)" in human, human
    assert "`flink-gpu coordination clean` removes it now." in human

    cleaned = cli("coordination", "clean", env=env)
    assert f"Removed 1 stale entry from {named}:" in cleaned.stdout, cleaned.stdout
    assert lines(coord) == [["0", str(holder.pid)], ["1", str(holder.pid)]]

    released = cli_json("release", "--owner", holder.pid, "--gpu", "1", env=env)
    assert (released["path"], released["released"]) == (str(coord), ["1"])
    human = cli("release", "--owner", holder.pid, env=env).stdout
    assert f"Released GPU 0 of pid {holder.pid}" in human and f"in {named}." in human
    assert lines(coord) == []


def test_conf_names_the_clusters_file_for_every_command_and_the_commands_they_suggest_repeat_it(tmp_path, holder):
    coord = tmp_path / "cluster-coordination"
    conf = coordinated_conf(tmp_path / "conf", coord) / "config.yaml"
    named = f"{coord} (of the Flink configuration in --conf {conf})"

    claim = cli("--simulate", "2", "claim", "1", "--owner", holder.pid, "--conf", conf)
    assert claim.returncode == 0, claim.stderr
    assert f"in {named}." in claim.stdout and f"`flink-gpu release --owner {holder.pid} --conf {conf}`" in claim.stdout
    assert lines(coord) == [["0", str(holder.pid)]]

    with open(coord, "a") as f:
        f.write(f"1 {dead_pid()}\n")
    show = cli("coordination", "show", "--conf", conf).stdout
    assert f"Coordination file {named}: 2 entries (1 live, 1 stale)" in show, show
    assert f"`flink-gpu coordination clean --conf {conf}` removes it now." in show
    listed = cli("--simulate", "2", "list", "--conf", conf).stdout
    assert f"`flink-gpu coordination clean --conf {conf}` removes it." in listed, listed
    clean = cli("coordination", "clean", "--conf", conf).stdout
    assert f"Removed 1 stale entry from {named}:" in clean, clean

    release = cli("release", "--owner", holder.pid, "--conf", conf).stdout
    assert f"Released GPU 0 of pid {holder.pid}" in release and f"in {named}." in release
    assert lines(coord) == []
    # --file still wins
    other = tmp_path / "other"
    assert cli_json("coordination", "show", "--conf", conf, "--file", other)["path"] == str(other)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_conf_that_gives_no_coordination_file_is_a_usage_error_naming_it(tmp_path, command):
    conf_dir = uncoordinated_conf(tmp_path / "conf")
    proc = cli("--simulate", "2", *command, "--conf", conf_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--conf: the Flink configuration {conf_dir} gives no coordination file: " in proc.stderr
    assert "external-resource.gpu.param.discovery-script.args has no --enable-coordination-mode" in proc.stderr
    assert "give a file with --file" in proc.stderr
    missing = cli("--simulate", "2", *command, "--conf", tmp_path / "missing")
    assert missing.returncode == 2
    assert f"--conf: cannot read the Flink configuration {tmp_path / 'missing'}" in missing.stderr
    assert "Traceback" not in proc.stderr + missing.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_flink_conf_dir_of_a_cluster_without_a_coordination_file_gives_the_default_file_with_a_note(
    tmp_path, holder, command
):
    """$FLINK_CONF_DIR is set for any cluster, not only a GPU one: the stock default file, and a note saying why."""
    env = child_env(FLINK_CONF_DIR=str(uncoordinated_conf(tmp_path / "conf")))
    owner = ["--owner", holder.pid] if command[0] in ("claim", "release") else []
    # in a /var/tmp of its own: the default file does not exist there, and what claim writes stays there
    proc = cli_with_a_private_var_tmp("--simulate", "2", *command, *owner, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    fields = doc["coordination"] if command == ["list"] else doc
    assert (fields["path"], fields["from"]) == ("/var/tmp/flink-gpu-coordination", None)
    assert "has no --enable-coordination-mode" in fields["note"]
    human = cli_with_a_private_var_tmp("--simulate", "2", *command, *owner, env=env).stdout
    assert "Note: $FLINK_CONF_DIR: the Flink configuration" in human and "Using the stock default file." in human, human


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_flink_conf_dir_that_cannot_be_read_stops_what_writes_and_is_a_note_for_what_reads(tmp_path, holder, command):
    """A claim in the default file while the cluster's own configuration is broken would never be released
    there: claim, release and clean refuse; list and show read the default file and say why."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "config.yaml").write_text("external-resources: [gpu\n")  # not YAML
    env = child_env(FLINK_CONF_DIR=str(conf_dir))
    owner = ["--owner", holder.pid] if command[0] in ("claim", "release") else []
    proc = cli_with_a_private_var_tmp("--simulate", "2", *command, *owner, env=env)
    assert "Traceback" not in proc.stderr
    if command[0] in ("claim", "release") or command[-1] == "clean":
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"$FLINK_CONF_DIR: cannot read the Flink configuration {conf_dir}" in proc.stderr
        assert "give the coordination file with --file" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert f"Note: $FLINK_CONF_DIR: cannot read the Flink configuration {conf_dir}" in proc.stdout
        assert "Using the stock default file." in proc.stdout
