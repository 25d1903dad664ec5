"""examples/: the cluster script runs as its docstring says, against a real standalone Flink cluster.

examples/run_local_cluster.py starts a JobManager and one TaskManager of 2 slots on 4 simulated GPUs with
Flink's own bin/start-cluster.sh, runs examples/gpu_inference_job.py in process and in thread mode, and
stops everything, also when it is killed (SIGTERM, Ctrl-C, a reader of its output that went away) and
when flink-python is already in the distribution's lib/; with --taskmanagers 2 --subtasks-per-gpu 2, two
TaskManagers share the host's GPUs and two slots share each GPU. Those tests need apache-flink and Java,
like tests/test_pyflink_cluster.py, and take a few minutes (seven clusters, one after the other). A layout
that cannot work, or a malformed --memory, ends the script before anything starts: those tests need neither.
"""

import importlib.util
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env
from flink_gpu import binding
from support.cli import cli
from support.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE = EXAMPLES / "run_local_cluster.py"
JOB = EXAMPLES / "gpu_inference_job.py"
# upper bounds only: each wait ends when its condition holds (a cluster on two loaded cores can take minutes)
RUN_TIMEOUT_S = 900
READY_TIMEOUT_S = 600

NO_PYFLINK = "the example needs apache-flink (pip install apache-flink==2.3.0)"
NO_JAVA = "the example needs Java >= 11 on PATH"
HAS_PYFLINK = importlib.util.find_spec("pyflink") is not None


def cluster_test(test):
    """A test that starts a real Flink cluster: marked flink_cluster, skipped without apache-flink or Java."""
    test = pytest.mark.skipif(shutil.which("java") is None, reason=NO_JAVA)(test)
    return pytest.mark.flink_cluster(pytest.mark.skipif(not HAS_PYFLINK, reason=NO_PYFLINK)(test))


def section(output, mode):
    return output.split(f"--mode {mode}", 1)[1].split("== ", 1)[0]


@cluster_test
def test_the_cluster_example_binds_a_gpu_per_subtask_in_both_modes_shows_gauges_and_stops_everything():
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--seconds", "6"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # it waits until the TaskManager has reported its slots (it is listed before they are)
    registered = re.search(r"TaskManager (\S+) registered, 2 slots \(2 free\)", out)
    assert registered, out
    for mode, holder in (("process", r"pid \d+"), ("thread", r"slot [0-9a-f]{32}")):
        part = section(out, mode)
        assert re.search(r"job [0-9a-f]{32}: FINISHED", part), part
        # the gauges of each subtask's GPU, read from Flink's REST API while the job ran: two distinct GPUs
        gauges = dict(re.findall(r"subtask (\d): infer\.gpu\.(\d)\.", part))
        assert sorted(gauges) == ["0", "1"] and len(set(gauges.values())) == 2, part
        for name in binding.GAUGES:  # every gauge flink_gpu registers, health included
            assert len(re.findall(rf"infer\.gpu\.\d\.{name} -?\d+", part)) == 2, part
        assert re.findall(r"infer\.gpu\.\d\.health (-?\d+)", part) == ["0", "0"], part  # the simulated GPUs are ok
        # each slot asked 4 GiB of its GPU (gpu_inference_job.py --memory): the gauge says so in MiB
        assert re.findall(r"infer\.gpu\.\d\.memoryLimit (-?\d+)", part) == ["4096", "4096"], part
        # flink-gpu list (the file of $FLINK_CONF_DIR) shows the TaskManager by its resource id, its two holders
        assert f"TaskManager {registered.group(1)} (pid " in part, part
        rows = re.findall(rf"^\s+({holder})\s+(\d)\s+alone", part, re.M)
        assert sorted(gpu for _, gpu in rows) == sorted(gauges.values()), part
    # the TaskManager's log: one line per binding, naming operator, subtask, GPU index, uuid and memory request
    lines = re.findall(
        r"Bound infer subtask (\d) to .* (process|thread) mode: GPU (\d) \(GPU-[0-9a-f-]{36}, memory request 4 GiB\)",
        out,
    )
    assert sorted((mode, subtask) for subtask, mode, _ in lines) == [
        ("process", "0"),
        ("process", "1"),
        ("thread", "0"),
        ("thread", "1"),
    ], out
    # a binding lasts from open() to close(), and a GPU released there is bound again later: per GPU,
    # its holders one after the other, each released before the next one bound it
    timeline = re.findall(
        r"^\s+(\d\d:\d\d:\d\d\.\d{3})  GPU (\d) (bound|released) +(.+?) \(infer subtask \d\)$", out, re.M
    )
    per_gpu = {}
    for _, gpu, what, holder in timeline:
        per_gpu.setdefault(gpu, []).append((what, holder))
    assert sorted(per_gpu) == sorted(gauges.values()), out
    for events in per_gpu.values():
        assert [what for what, _ in events] == ["bound", "released"] * 2, out  # one process-, one thread-mode holder
        assert events[0][1] == events[1][1] and events[2][1] == events[3][1], out
        assert events[0][1].startswith("pid ") and events[2][1].startswith("slot "), out
    assert [at for at, *_ in timeline] == sorted(at for at, *_ in timeline)
    # everything it started is gone: the JVMs, and the temporary directory with conf, logs and files
    pids = [int(pid) for pid in re.findall(r"pid (\d+)", out.split("stopped:", 1)[1].splitlines()[0])]
    assert len(pids) == 2
    for pid in pids:
        assert not alive(pid), f"pid {pid} still runs"
    work = Path(re.search(r"FLINK_CONF_DIR=(\S+)/conf\)", out).group(1))
    assert not work.exists()
    assert not processes_naming(work)


@cluster_test
def test_two_taskmanagers_share_the_hosts_gpus_and_two_slots_share_each_gpu():
    # 2 TaskManagers of 2 slots on 2 GPUs: each claims 1 GPU (amount), and its 2 slots share it
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--taskmanagers", "2", "--gpus", "2", "--slots", "2"]
        # 20 s a subtask: the two workers of a TaskManager, however late one starts on a loaded machine, overlap
        + ["--subtasks-per-gpu", "2", "--modes", "process", "--seconds", "20"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "2 TaskManagers on 2 simulated GPUs, each claiming 1 (external-resource.gpu.amount)" in out, out
    registered = re.findall(r"TaskManager (\S+) registered, 2 slots \(2 free\)", out)
    assert len(set(registered)) == 2, out
    part = section(out, "process")
    assert re.search(r"job [0-9a-f]{32}: FINISHED", part), part
    # the gauges, read while the job ran: four subtasks, two on each GPU, each asking 4 GiB of it
    gauges = dict(re.findall(r"subtask (\d): infer\.gpu\.(\d)\.", part))
    assert sorted(gauges) == ["0", "1", "2", "3"], part
    assert sorted(gauges.values()) == ["0", "0", "1", "1"], part
    assert re.findall(r"infer\.gpu\.\d\.memoryLimit (-?\d+)", part) == ["4096"] * 4, part
    sharing = re.search(r"serving several subtasks at once \(sharing\): (.*)", part).group(1)
    for gpu in ("0", "1"):
        subtasks = ", ".join(sorted(subtask for subtask, g in gauges.items() if g == gpu))
        assert f"GPU {gpu}: subtasks {subtasks}" in sharing, part
    # flink-gpu list: each TaskManager holds one GPU, bound to two of its slots' workers, 8 GiB asked of 80
    held = re.findall(r"TaskManager (\S+) \(pid (\d+), holds GPU (\d) in the coordination file\)", part)
    assert sorted(name for name, _, _ in held) == sorted(registered), part
    assert sorted(gpu for _, _, gpu in held) == ["0", "1"], part
    rows = re.findall(r"^\s+(pid \d+)\s+(\d)\s+up to 2\s+4 GiB", part, re.M)
    assert sorted(gpu for _, gpu in rows) == ["0", "0", "1", "1"], part
    for gpu in ("0", "1"):
        assert f"GPU {gpu}: requested 8 GiB of 80 GiB" in part, part
    # the TaskManagers' logs: a binding per subtask, two TaskManagers, two subtasks on each GPU
    bound = re.findall(
        r"Bound infer subtask (\d) to pid \d+ of the TaskManager \(pid (\d+)\), process mode: GPU (\d)", out
    )
    assert sorted(subtask for subtask, _, _ in bound) == ["0", "1", "2", "3"], out
    assert {(tm, gpu) for _, tm, gpu in bound} == {(pid, gpu) for _, pid, gpu in held}, out
    # both holders of a GPU bound it before either released it: sharing, said once per GPU
    timeline = re.findall(
        r"^\s+\d\d:\d\d:\d\d\.\d{3}  GPU (\d) (bound|released) +(pid \d+) \(infer subtask \d\)$", out, re.M
    )
    for gpu in ("0", "1"):
        events = [(what, holder) for g, what, holder in timeline if g == gpu]
        assert [what for what, _ in events] == ["bound", "bound", "released", "released"], out
        holders = ", ".join(holder for what, holder in events if what == "bound")
        assert out.count(f"GPU {gpu} held by {holders} at once (shared)") == 1, out
    pids = [int(pid) for pid in re.findall(r"pid (\d+)", out.split("stopped:", 1)[1].splitlines()[0])]
    assert len(pids) == 3 and not any(alive(pid) for pid in pids), out  # the JobManager, two TaskManagers
    work = Path(re.search(r"FLINK_CONF_DIR=(\S+)/conf\)", out).group(1))
    assert not work.exists() and not processes_naming(work)


# -- a layout that cannot work, a malformed option: the example ends before anything starts -----------------


def example_module(name="run_local_cluster"):
    """examples/<name>.py, imported (a script, not a module of a package) as the job's workers import it."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--gpus", "2", "--slots", "4"],
            "1 TaskManager (--taskmanagers) of 4 slots (--slots), at most 1 on one GPU (--subtasks-per-gpu), needs "
            "4 GPUs; the host has 2 simulated GPUs (--gpus): raise --gpus to 4, lower --slots to 2, or raise "
            "--subtasks-per-gpu to 2.",
        ),
        (
            ["--taskmanagers", "2", "--gpus", "2", "--slots", "4", "--subtasks-per-gpu", "2"],
            "2 TaskManagers (--taskmanagers) of 4 slots (--slots), at most 2 on one GPU (--subtasks-per-gpu), need "
            "2 GPUs each, 4 in all; the host has 2 simulated GPUs (--gpus): raise --gpus to 4, lower --slots to 2, "
            "or raise --subtasks-per-gpu to 4.",
        ),
        (
            ["--taskmanagers", "3", "--gpus", "2", "--slots", "1"],
            "3 TaskManagers (--taskmanagers) of 1 slot (--slots), at most 1 on one GPU (--subtasks-per-gpu), need "
            "1 GPU each, 3 in all; the host has 2 simulated GPUs (--gpus): raise --gpus to 3, or lower "
            "--taskmanagers to 2.",
        ),
        # the simulated GPU has 80 GiB (the simulator's default, as NVML reads it)
        (
            ["--slots", "2", "--subtasks-per-gpu", "2", "--memory", "50 gb"],
            "2 slots on one GPU (--subtasks-per-gpu 2), each asking 50 GiB (--memory), ask 100 GiB of it, more "
            "than a simulated GPU's 80 GiB: lower --memory to 40 GiB or less, or --subtasks-per-gpu to 1.",
        ),
        (
            ["--gpus", "1", "--slots", "4", "--subtasks-per-gpu", "4", "--memory", "30 gb"],
            "4 slots on one GPU (--subtasks-per-gpu 4), each asking 30 GiB (--memory), ask 120 GiB of it, more "
            "than a simulated GPU's 80 GiB: lower --memory to 20 GiB or less, or --subtasks-per-gpu to 2 with "
            "--gpus 2.",
        ),
        (
            ["--memory", "81 gb"],
            "A slot asks 81 GiB of its GPU (--memory), more than a simulated GPU's 80 GiB: lower --memory to "
            "80 GiB or less.",
        ),
        # bind_gpus's own rules, as every subtask would meet them after the deployment
        (["--memory", "4 gbb"], "argument --memory: memory '4 gbb' is not a memory size: the unit 'gbb' is none of"),
        (["--memory", "0"], "argument --memory: memory must be more than 0 bytes, got '0'"),
        (["--subtasks-per-gpu", "0"], "argument --subtasks-per-gpu: Invalid subtasks_per_gpu 0: it must be 1 to 1024."),
        (["--gpus", "0"], "argument --gpus: must be 1 or more, got 0"),
        (["--modes", "process,proc"], "argument --modes: 'process,proc' is not a comma-separated list of process and"),
    ],
)
def test_a_layout_that_cannot_work_ends_the_example_in_a_few_lines_naming_the_option_before_anything_starts(
    options, message, monkeypatch, capsys
):
    example = example_module()

    def flink_home(given):
        raise AssertionError("the example went on to Flink")

    monkeypatch.setattr(example, "flink_home", flink_home)  # its first step towards a cluster
    with pytest.raises(SystemExit) as exited:
        example.main(options)
    out, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert out == "" and f": error: {message}" in err, err
    assert len(err.splitlines()) <= 8 and "Traceback" not in err, err  # argparse's usage and the message


def test_the_default_layout_is_a_gpu_per_slot_on_one_taskmanager():
    example = example_module()
    args, layout, _ = example.parse_arguments([])
    assert (args.taskmanagers, args.slots, args.memory) == (1, 2, "4 gb")
    assert layout == example.Layout(amount=2, slots_per_gpu=1)


@pytest.mark.skipif(not HAS_PYFLINK, reason=NO_PYFLINK)
def test_the_job_refuses_a_malformed_memory_request_at_the_client_before_it_is_deployed():
    proc = subprocess.run(
        [sys.executable, str(JOB), "--memory", "4 gbb"], env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: argument --memory: memory '4 gbb' is not a memory size" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# -- helpers: the example as a process, what it left ----------------------------------------------------


def alive(pid):
    """Running (a zombie is not), read from /proc independently of the example's own check."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def processes_naming(work):
    """The live processes whose command line names ``work`` (the cluster's JVMs name its conf and log dirs)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if str(work).encode() in cmdline and alive(int(entry)):
                found.append((int(entry), cmdline.replace(b"\0", b" ")[:200]))
    return found


def port_is_free(port):
    """Nothing listens on localhost:port (the cluster binds localhost): a listener refuses the bind."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a connection in TIME_WAIT is no listener
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RunningExample:
    """run_local_cluster.py as a process whose output is read as it comes, until a line matches."""

    def __init__(self, tmp_path, *args, env=None):
        self.stderr_path = tmp_path / "example.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(EXAMPLE), *args],
                env=child_env() if env is None else env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,  # a process group of its own, as a terminal gives a command
                # and Ctrl-C's default, even where this test runs with SIGINT ignored (a script's background job)
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        self.out = b""

    def wait_for(self, pattern, timeout=READY_TIMEOUT_S):
        """The match of ``pattern`` in the output, once it shows (an AssertionError if the example ends first)."""

        def shown():
            if not re.search(pattern.encode(), self.out) and select.select([self.proc.stdout], [], [], 0.1)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"the example ended before {pattern!r}:\n{self.output()}")
                self.out += chunk
            return re.search(pattern, self.out.decode(errors="replace"))

        return wait_until(shown, f"{pattern!r} shows in the example's output", timeout)

    def finish(self, timeout=RUN_TIMEOUT_S):
        """Its exit status, once it has ended (reading what it still prints)."""
        if not self.proc.stdout.closed:
            self.out += self.proc.stdout.read()
        return self.proc.wait(timeout)

    def output(self):
        return self.out.decode(errors="replace") + "\n--- stderr ---\n" + self.stderr_path.read_text(errors="replace")


def jvm_pids_of(pid_file):
    try:
        return [int(pid) for pid in pid_file.read_text().split() if pid.isdigit()]
    except FileNotFoundError:
        return []


def command_line(pid):
    """The process's arguments joined by spaces ("" once it has ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def jvm_pids(work):
    """The JVMs of Flink's pid files in the example's work directory (FLINK_PID_DIR)."""
    return [pid for path in work.glob("flink-*.pid") for pid in jvm_pids_of(path)]


# -- the example is killed: it stops what it started and removes its directory ----------------------------


@cluster_test
@pytest.mark.parametrize(
    "how, status",
    [("SIGTERM", 128 + signal.SIGTERM), ("SIGINT", 128 + signal.SIGINT), ("closed stdout", 128 + signal.SIGPIPE)],
)
def test_the_example_killed_once_its_cluster_is_up_stops_the_cluster_frees_its_ports_and_removes_its_directory(
    tmp_path, how, status
):
    example = RunningExample(tmp_path, "--seconds", "60")
    try:
        up = example.wait_for(r"JobManager RPC port (\d+), web UI http://localhost:(\d+)")
        ports = [int(port) for port in up.groups()]
        work = Path(re.search(r"FLINK_CONF_DIR=(\S+)/conf\)", example.output()).group(1))
        jvms = jvm_pids(work)
        assert len(jvms) == 2 and all(alive(pid) for pid in jvms), example.output()
        assert not any(port_is_free(port) for port in ports)
        if how == "SIGTERM":
            # doctor, on the configuration of this running cluster, names the ports its JobManager holds: as
            # expected, no warning
            doc = json.loads(cli("doctor", work / "conf", "--json", timeout=300).stdout)
            held = {f["message"].split(" ", 2)[1]: f for f in doc["findings"] if f["check"] == "ports"}
            assert sorted(held) == sorted(map(str, ports)), doc["findings"]
            for finding in held.values():
                assert finding["level"] == "ok", finding
                assert f"(a Flink JobManager of the configuration {work / 'conf'})" in finding["message"], finding
            example.proc.send_signal(signal.SIGTERM)
        elif how == "SIGINT":
            os.killpg(example.proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        else:
            example.proc.stdout.close()  # `| head` that exits: its next line meets a closed pipe
        assert example.finish() == status, example.output()
    finally:
        if example.proc.poll() is None:
            example.proc.kill()
            example.proc.wait()
    assert "Traceback" not in example.output(), example.output()
    assert not [pid for pid in jvms if alive(pid)], example.output()
    assert not processes_naming(work), example.output()
    assert all(port_is_free(port) for port in ports), example.output()
    assert not work.exists(), example.output()


# -- flink-python already in lib/, as doctor and docs/flink-cluster.md advise --------------------------------


@cluster_test
def test_the_example_runs_when_flink_python_is_already_in_the_distributions_lib(tmp_path):
    import pyflink

    real = Path(pyflink.__file__).resolve().parent
    home = (
        tmp_path / "flink"
    )  # the distribution with `cp opt/flink-python-*.jar lib/` done (a copy: never the installed one)
    home.mkdir()
    for entry in real.iterdir():
        if entry.name != "lib":
            (home / entry.name).symlink_to(entry)
    (home / "lib").mkdir()
    for jar in real.glob("lib/*.jar"):
        (home / "lib" / jar.name).symlink_to(jar)
    (jar,) = real.glob("opt/flink-python-*.jar")
    shutil.copy(jar, home / "lib")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--modes", "thread", "--seconds", "3"],
        env=child_env(FLINK_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert re.search(r"job [0-9a-f]{32}: FINISHED", out), out
    work = Path(re.search(r"FLINK_CONF_DIR=(\S+)/conf\)", out).group(1))
    assert not work.exists()


# -- a wait of the example that cannot end well ends at once, saying why ------------------------------------


@cluster_test
def test_the_example_says_which_jvm_exited_when_its_taskmanager_dies_while_it_waits(tmp_path):
    example = RunningExample(tmp_path, "--seconds", "60")
    try:
        work = Path(example.wait_for(r"FLINK_CONF_DIR=(\S+)/conf\)").group(1))

        # the TaskManager, as soon as it runs Java: flink-daemon.sh writes its pid file right after the fork,
        # and the forked shell opens the .out file (its stdout) only before its exec of java
        def taskmanager_runs_java():
            assert example.proc.poll() is None, example.output()
            return [
                pid
                for path in work.glob("flink-*-taskexecutor.pid")
                for pid in jvm_pids_of(path)
                if "TaskManagerRunner" in command_line(pid)
            ]

        (taskmanager,) = wait_until(taskmanager_runs_java, "the TaskManager runs Java", READY_TIMEOUT_S)
        os.kill(taskmanager, signal.SIGKILL)
        assert example.finish() == 1, example.output()
    finally:
        if example.proc.poll() is None:
            example.proc.kill()
            example.proc.wait()
    err = example.stderr_path.read_text()
    # whichever wait it was in (the TaskManager's slots, a job's), it names the JVM that exited and shows the logs
    assert f", the TaskManager (pid {taskmanager}) of the cluster exited; at that time " in err, example.output()
    # the ends of the cluster's log files, each named (the TaskManager killed that early has its .out only)
    assert re.search(rf"--- {work}/log/flink-\S*taskexecutor\S* \(last \d+ of \d+ lines\) ---", err), err
    assert "Traceback" not in err, example.output()
    assert not processes_naming(work), example.output()
    assert not work.exists(), example.output()


# -- the async inference example: batched requests to the model on each subtask's own GPU, against a map -------

ASYNC_EXAMPLE = EXAMPLES / "run_async_inference.py"


def pyflink_has_async_functions():
    """PyFlink's async functions (FLINK-38190, apache-flink 2.2 and later), found by the API itself."""
    try:
        from pyflink.datastream import AsyncDataStream, AsyncFunction  # noqa: F401
    except ImportError:
        return False
    return True


@cluster_test
@pytest.mark.skipif(
    not pyflink_has_async_functions(),
    reason="this PyFlink has no async functions (pyflink.datastream.AsyncDataStream: apache-flink 2.2 and later)",
)
def test_the_async_example_batches_requests_on_each_subtasks_own_gpu_and_prints_them_against_the_map_function(
    tmp_path,
):
    import math

    work = tmp_path / "work"
    records = 100  # per subtask, due at 200/s: half a second of requests per job
    proc = subprocess.run(
        [sys.executable, str(ASYNC_EXAMPLE), "--records", str(records), "--keep", str(work)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # the answers as Flink's print sink wrote them (the TaskManager's .out), read here, not from the example
    lines = [line for path in (work / "log").glob("*taskexecutor*.out") for line in path.read_text().splitlines()]
    answers = [json.loads(line[line.index("{") :]) for line in lines if '"function": ' in line]
    gpu_inference_job = example_module("gpu_inference_job")
    model = gpu_inference_job.Model(None)
    for function in ("map", "async"):
        # each subtask bound one GPU in open() and released it in close(); two subtasks held the same GPU only
        # one after the other (a subtask that is done early gives its GPU back, and a later one may bind it)
        events = [json.loads(line) for line in (work / f"bindings-{function}.jsonl").read_text().splitlines()]
        held = {}
        for e in events:
            held.setdefault(e["subtask"], {})[e["event"]] = e
        assert sorted(held) == [0, 1] and all(sorted(h) == ["bound", "released"] for h in held.values()), events
        first, second = held.values()
        if first["bound"]["gpus"] == second["bound"]["gpus"]:
            assert (
                first["released"]["at"] <= second["bound"]["at"] or second["released"]["at"] <= first["bound"]["at"]
            ), events
        own = [a for a in answers if a["function"] == function]
        # every request answered once, by a subtask while it held the GPU it bound, with the model's score of it
        assert sorted(a["record"] for a in own) == list(range(2 * records)), own
        for a in own:
            span = held[a["subtask"]]
            assert a["gpus"] == [span["bound"]["gpus"]], (a, events)
            assert span["bound"]["at"] < a["done"] < span["released"]["at"], (a, events)
            expected = model.predict(gpu_inference_job.features(a["record"]))
            assert math.isclose(a["score"], expected, rel_tol=1e-5), (a, expected)
    # the map calls the model once per request; the async function served several requests with one call
    assert {a["batch"] for a in answers if a["function"] == "map"} == {1}
    batches = [a["batch"] for a in answers if a["function"] == "async"]
    assert max(batches) > 1 and max(batches) <= 32, batches
    calls = round(sum(1 / batch for batch in batches))
    # the table: per function, requests, p50 and p99 latency (ms), requests/s, model calls, largest batch
    number = r"\d+\.\d"
    assert re.search(rf"MapFunction, a call per request +200 +{number} +{number} +{number} +200 +1$", out, re.M), out
    row = re.search(rf"async function, batched +200 +{number} +{number} +{number} +(\d+) +(\d+)$", out, re.M)
    assert row and (int(row.group(1)), int(row.group(2))) == (calls, max(batches)), out
    assert not processes_naming(work), out
