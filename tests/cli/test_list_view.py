"""`flink-gpu list` as a monitor (flink_gpu.cli.list_view): what the coordination file records said above the tables,
live readings, TaskManagers by name, --watch, the terminal's width and colour."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import flink_gpu
from conftest import child_env
from flink_gpu import simulator
from support.cli import HOLDER_COMMAND, cli, cli_json, cli_with_a_private_var_tmp, cut_to_table
from support.json_schema import errors
from support.waiting import wait_until


def test_list_says_above_the_table_that_the_default_file_records_nothing_and_how_to_read_the_clusters(tmp_path, holder):
    """A cluster with its own --coordination-file holds every GPU; `list` without --conf read the stock default and
    showed every GPU "free", with "does not exist" only at the bottom."""
    coord = tmp_path / "cluster-coordination"
    cli_json("--simulate", "2", "claim", "2", "--owner", holder.pid, "--file", coord)
    for empty_default, what in ((False, "does not exist"), (True, "holds no claim")):
        proc = cli_with_a_private_var_tmp("--simulate", "2", "list", empty_default=empty_default)
        assert proc.returncode == 0, proc.stderr
        above = proc.stdout.split("\nINDEX ", 1)[0]
        assert f"Coordination file /var/tmp/flink-gpu-coordination {what}: no GPU is claimed through it." in above
        assert "--conf <its Flink conf dir>" in above and "FLINK_CONF_DIR" in above, above
        assert "--file <its coordination file>" in above
    held = cli_with_a_private_var_tmp("--simulate", "2", "list", "--file", coord)
    assert "no GPU is claimed" not in held.stdout and "--conf" not in held.stdout, held.stdout
    missing = cli_with_a_private_var_tmp("--simulate", "2", "list", "--file", tmp_path / "missing")  # named: no advice
    above = missing.stdout.split("\nINDEX ", 1)[0]
    assert f"Coordination file {tmp_path / 'missing'} does not exist: no GPU is claimed through it." in above
    assert "--conf" not in missing.stdout


def test_list_shows_utilization_temperature_and_power_next_to_the_holders(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"devices": [{"utilization": 37, "temperature": 55, "power": 250.4}, {}]}))
    doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    first, second = doc["gpus"]
    assert (first["utilization"], first["temperature"], first["power"]) == (37, 55, 250)
    assert 0 <= second["utilization"] <= 100 and 30 <= second["temperature"] <= 80  # the simulator's load curve
    lines = cli("--simulate-spec", spec, "list", "--file", tmp_path / "coord").stdout.splitlines()
    header = next(line for line in lines if line.startswith("GPU "))
    row = lines[lines.index(header) + 1].split()
    assert row[:3] == ["0", "ok", "37%"] and row[5:9] == ["55", "C", "250", "W"], row


TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"


@pytest.mark.parametrize(
    "how, name",
    [
        ("dynamic", "TaskManager tm-7"),
        ("config", "TaskManager from-conf"),
        ("log", "TaskManager localhost:41627-44e15c"),
        ("host", "TaskManager worker-3:6122"),
        ("nothing", "TaskManager pid {pid}"),
    ],
)
def test_list_names_a_taskmanager_by_its_resource_id_or_host_and_port(tmp_path, how, name):
    conf_dir = tmp_path / "tm-conf"
    conf_dir.mkdir()
    conf = {
        "config": "taskmanager.resource-id: from-conf\n",
        "host": "taskmanager.host: worker-3\ntaskmanager.rpc.port: 6122\n",
    }.get(how, "")
    (conf_dir / "config.yaml").write_text(conf)
    extra = ["-D", "taskmanager.resource-id=tm-7"] if how == "dynamic" else []
    log = tmp_path / "flink-taskexecutor-0.log"  # what Flink's bin/taskmanager.sh names with -Dlog.file
    log.write_text(
        "2026-12-01 20:52:38,528 INFO  org.apache.flink.runtime.taskexecutor.TaskManagerRunner "
        "[] - Starting TaskManager with ResourceID: localhost:41627-44e15c\n"
        if how == "log"
        else ""
    )
    # a process whose command line is a TaskManager's (its main class, --configDir, -D properties)
    fake = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.read()",
            f"-Dlog.file={log}",
            TASKMANAGER_MAIN,
            "--configDir",
            str(conf_dir),
            *extra,
        ],
        stdin=subprocess.PIPE,
    )
    try:
        coord = tmp_path / "coord"
        cli_json("--simulate", "4", "claim", "2", "--owner", fake.pid, "--file", coord)
        # one of its slots' workers, bound and holding until its stdin closes
        binder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
            import sys
            from flink_gpu import GPUInfo
            from flink_gpu.binding import bind
            bind([GPUInfo("0"), GPUInfo("1")], 1, taskmanager_pid={fake.pid}, path={str(coord) + ".bindings"!r})
            print("bound", flush=True)
            sys.stdin.read()
            """),
            ],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert binder.stdout.readline() == "bound\n"
        human = cli("--simulate", "4", "list", "--file", coord).stdout
        doc = cli_json("--simulate", "4", "list", "--file", coord)
        binder.stdin.close()
        binder.wait(10)
        expected = name.format(pid=fake.pid)
        holder = "TaskManager" if how == "nothing" else expected  # the pid is beside it
        assert re.search(rf"^0 .*  pid {fake.pid}: {re.escape(holder)}$", human, re.M), human
        line = (
            f"  TaskManager pid {fake.pid} (holds GPU 0, 1 in the coordination file)"
            if how in ("nothing",)
            else f"  {expected} (pid {fake.pid}, holds GPU 0, 1 in the coordination file)"
        )
        assert line + "\n" in human, human
        assert TASKMANAGER_MAIN not in human
        # --json: the whole java command line for tools, the same short name for people
        [held] = doc["gpus"][0]["holders"]
        assert held["cmdline"][-len(extra) - 3 :] == [TASKMANAGER_MAIN, "--configDir", str(conf_dir), *extra]
        assert held["command"] == holder
        [taskmanager] = doc["bindings"]["taskmanagers"]
        assert taskmanager["command"] == holder and taskmanager["cmdline"] == held["cmdline"]
        shown = cli("--simulate", "4", "coordination", "show", "--file", coord).stdout
        assert re.search(rf"^\d+ +0 +{fake.pid} .*live +{re.escape(holder)}$", shown, re.M), shown
    finally:
        fake.stdin.close()
        fake.wait(10)


# `flink-gpu` whose every open() (Python's, os.open's) is written to $OPENED, one path a line
AUDITED_CLI = """
import os, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(os.fsdecode(args[0]))
                 if event == "open" and isinstance(args[0], (str, bytes)) else None)
from flink_gpu.cli import main
try:
    status = main(sys.argv[1:])
finally:
    with open(os.environ["OPENED"], "w") as record:
        record.write("\\n".join(opened))
sys.exit(status)
"""


def test_list_never_opens_a_kernel_file_a_fifo_a_device_or_another_users_file_a_holder_names(tmp_path):
    """Any local user can start a "TaskManager" whose -Dlog.file= or --configDir names anything: a root `list` or
    `coordination show` must not read /proc/kmsg for it (that takes the kernel's messages, NVIDIA Xid lines among
    them, from the system logger), nor a link to it, nor procfs mounted elsewhere, nor open a FIFO (its writer
    would see a reader) or a device, nor read a file the holder's user does not own."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "kmsg-link.log"
    link.symlink_to("/proc/kmsg")
    elsewhere = tmp_path / "proc-elsewhere"  # procfs mounted here in the namespace of the `list` below
    elsewhere.mkdir()
    other = tmp_path / "others.log"
    other.write_text("Starting TaskManager with ResourceID: someone-elses\n")
    os.chown(other, 12345, 12345)
    kernel_conf = tmp_path / "kernel-conf"
    kernel_conf.mkdir()
    (kernel_conf / "config.yaml").symlink_to("/proc/kmsg")
    own = tmp_path / "own.log"  # the one file that is read: the audit sees what `list` opens
    own.write_text("x - Starting TaskManager with ResourceID: tm-own\n")
    logs = ["/proc/kmsg", fifo, link, "/dev/zero", elsewhere / "kmsg", other, own]
    coord = tmp_path / "coord"
    holders = []
    try:
        for log in logs:
            argv = [sys.executable, "-c", "import sys; sys.stdin.read()", f"-Dlog.file={log}", TASKMANAGER_MAIN]
            holders.append(subprocess.Popen([*argv, "--configDir", str(kernel_conf)], stdin=subprocess.PIPE))
            cli_json("--simulate", str(len(logs)), "claim", "1", "--owner", holders[-1].pid, "--file", coord)
        for args in (["--simulate", str(len(logs)), "list"], ["coordination", "show"]):
            opened = tmp_path / "opened"
            done = subprocess.run(
                # procfs at `elsewhere` for this process only (a mount namespace of its own)
                ["unshare", "--mount", "sh", "-c", 'mount -t proc proc "$0" && exec "$@"', str(elsewhere)]
                + [sys.executable, "-c", AUDITED_CLI, *args, "--file", str(coord)],
                env=child_env(OPENED=str(opened)),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done
            paths = opened.read_text().splitlines()
            assert str(own) in paths and "TaskManager tm-own" in done.stdout, (paths, done.stdout)
            named = {str(p) for p in logs if p != own} | {str(kernel_conf / "config.yaml")}
            read = [p for p in paths if p in named or p.startswith(str(elsewhere)) or p == "/proc/kmsg"]
            assert read == [], args
            assert "someone-elses" not in done.stdout
            for holder in holders[:-1]:
                assert re.search(rf"\b{holder.pid}\b.*TaskManager$", done.stdout, re.M), done.stdout
    finally:
        for holder in holders:
            holder.stdin.close()
            holder.wait(10)


def test_list_watch_redraws_until_ctrl_c_and_refuses_json(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flink_gpu.cli",
            "--simulate",
            "2",
            "list",
            "--watch",
            "0.2",
            "--file",
            tmp_path / "coord",
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as at a terminal, even where this test runs with SIGINT ignored (a script's background job)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(process.stdout.readline, "")))
    reader.start()
    wait_until(lambda: "".join(seen).count("Every 0.2 s") >= 2, "the list was drawn twice", 60)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(20)
    finally:
        process.kill()  # a list that ignored Ctrl-C fails the test instead of hanging it
    reader.join(20)
    err = process.stderr.read()
    out = "".join(seen)
    assert process.returncode == 0, err
    assert out.count("Every 0.2 s") >= 2 and out.count("GPU  HEALTH") >= 2
    assert "Traceback" not in err
    proc = cli("--simulate", "2", "list", "--watch", "--json")
    assert proc.returncode == 2 and "--watch" in proc.stderr


def run_on_terminal(args, columns, **env):
    """``flink-gpu args`` with its stdout on a pseudo-terminal of ``columns`` columns: what it prints."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "flink_gpu.cli", *map(str, args)],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=child_env(COLUMNS=str(columns), **env),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(30) == 0, process.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_list_fits_the_terminal_and_colours_verdicts_unless_no_color(tmp_path, holder):
    coord = tmp_path / "coord"
    cli_json("--simulate", "4", "claim", "2", "--owner", holder.pid, "--file", coord)
    shown = run_on_terminal(["--simulate", "4", "list", "--file", coord], 103)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    tables = [line for line in plain.splitlines() if re.match(r"(INDEX|GPU) |\d+ ", line)]
    assert len(tables) == 10 and max(len(line) for line in tables) <= 103, plain
    assert re.search(rf"^0 .*pid {holder.pid}: {re.escape(sys.executable[:10])}.*\.\.\.$", plain, re.M), plain
    assert "BUS ID" not in plain  # gave way to the holder's command
    assert "\x1b[32mok\x1b[0m" in shown and "\x1b[32mfree\x1b[0m" in shown
    assert "\x1b[" not in run_on_terminal(["--simulate", "4", "list", "--file", coord], 103, NO_COLOR="1")
    # a pipe gets whole lines, without colour
    piped = cli("--simulate", "4", "list", "--file", coord).stdout
    assert "\x1b[" not in piped and cut_to_table(HOLDER_COMMAND) in piped


def test_list_shows_a_gpu_whose_state_read_does_not_return_as_unknown(tmp_path):
    """docs/design.md §9.5: list reads with the 5 s deadline too; the GPU it could not read says why, in the
    table and in --json (whose health follows the schema)."""
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
    schema = json.loads((Path(flink_gpu.__file__).parent / "cli" / "schema.json").read_text())
    with simulator.hanging(hang_file):
        doc = cli_json("--simulate-spec", spec, "list", "--file", tmp_path / "coord")
    assert errors(doc, schema) == []
    gpus = {gpu["index"]: gpu for gpu in doc["gpus"]}
    assert gpus["0"]["health"] == "ok"
    # list reads the topology first (the nvlink check): its NVLink count query, named, is the one that hangs
    # how long it has been in flight is measured: 5 s, or a little more on a loaded machine
    assert re.fullmatch(r"unknown: nvmlDeviceGetFieldValues has not returned for \d+(\.\d)? s", gpus["1"]["health"])
    assert doc["topology"]["stalls"] == ["nvmlDeviceGetFieldValues did not return within 5 s"]
    assert gpus["1"]["processes_known"] is False


# ---- persistence mode -----------------------------------------------------------------------------

PERSISTENCE_SPEC = {
    "devices": [
        {},
        {"persistence_mode": "disabled"},
        {"not_supported": ["persistence_mode"]},
        {"persistence_mode": "disabled"},
    ]
}


def flink_gpu_list(tmp_path, *args):
    """``flink-gpu list`` on PERSISTENCE_SPEC's simulated host, with a coordination file of its own."""
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list", "--file", str(tmp_path / "coordination"), *args],
        env=child_env(**simulator.environment(spec=PERSISTENCE_SPEC)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_list_json_gives_each_gpus_persistence_mode_and_null_where_the_driver_cannot_say(tmp_path):
    doc = json.loads(flink_gpu_list(tmp_path, "--json"))
    assert [g["persistence_mode"] for g in doc["gpus"]] == ["enabled", "disabled", None, "disabled"]


def test_list_says_the_first_claim_on_a_gpu_without_persistence_mode_may_take_seconds(tmp_path):
    out = flink_gpu_list(tmp_path)
    [off] = [line.strip() for line in out.splitlines() if "persistence mode is off" in line]
    assert off.startswith("GPU 1, 3: persistence mode is off: the first claim on each GPU may take seconds")
    assert "the driver initialises a GPU when a process first asks for its handle" in off
    assert "nvidia-persistenced" in off
    assert "GPU 2: persistence mode unknown (the driver cannot say)." in out


def test_list_says_nothing_of_persistence_when_every_gpu_has_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", "list", "--file", str(tmp_path / "coordination")],
        env=child_env(**simulator.environment(devices=2)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "persistence mode" not in proc.stdout
