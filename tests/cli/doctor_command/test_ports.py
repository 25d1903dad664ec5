"""doctor's ports (flink_gpu.cli.doctor_command.ports): a port of the configuration that a process already
listens on (a cluster left running) is named with the key and its holder; a free one is not.
A Flink JobManager as holder, with a real cluster: tests/test_examples.py."""

import contextlib
import socket
import subprocess
import sys

import pytest

from support.cli import findings, gpu_conf, only, run_doctor

LISTENER = (
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', 0))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "sys.stdin.read()\n"
)


@contextlib.contextmanager
def listening(*args, cwd=None):
    """A process (with ``args`` on its command line) that listens on a TCP port of localhost: (its pid, the port)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        yield proc.pid, int(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(60)


@pytest.fixture
def listener():
    with listening() as held:
        yield held


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("key", ["jobmanager.rpc.port", "rest.port", "rest.bind-port", "taskmanager.rpc.port"])
def test_doctor_names_a_configured_port_that_a_process_listens_on_and_the_process(tmp_path, good_script, listener, key):
    pid, port = listener
    text = gpu_conf(discovery_script_path=good_script) + f"{key}: {port}\n"
    doc = run_doctor(tmp_path, text)
    warning = only(doc, "ports", "warning")
    assert warning["message"].startswith(f"Port {port} ({key}, ")
    assert f"is already in use on this host, by pid {pid} ({sys.executable} -c " in warning["message"]
    assert "fails with a BindException" in warning["message"]
    assert f"set {key} to a free port" in warning["fix"]


def test_doctor_says_nothing_of_free_ports_and_of_ports_flink_chooses(tmp_path, good_script, listener):
    _, held = listener
    free = free_port()
    text = gpu_conf(discovery_script_path=good_script) + (
        f"jobmanager.rpc.port: {free}\nrest.port: {free}\n"
        f"taskmanager.rpc.port: {held}-{held + 5}\n"  # a range: Flink takes a free port of it
        "blob.server.port: 0\n"
    )
    assert findings(run_doctor(tmp_path, text), "ports", "warning") == []


def test_rest_bind_port_is_the_port_rest_binds_when_it_is_set(tmp_path, good_script, listener):
    _, held = listener
    text = (
        gpu_conf(discovery_script_path=good_script)
        + f"jobmanager.rpc.port: {free_port()}\n"
        + (f"rest.port: {held}\nrest.bind-port: {free_port()}\n")
    )
    assert findings(run_doctor(tmp_path, text), "ports", "warning") == []


JOBMANAGER = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"


@pytest.mark.parametrize("relative", [False, True])
def test_a_port_that_the_jobmanager_of_this_configuration_holds_is_as_expected(tmp_path, good_script, relative):
    """doctor run beside the cluster it checks: its JobManager (a JVM with --configDir of this directory, here
    as the JVM's working directory makes a relative one) holds the port, which is no warning."""
    conf_dir = "." if relative else tmp_path
    with listening(JOBMANAGER, "--configDir", conf_dir, "--executionMode", "cluster", cwd=tmp_path) as (pid, port):
        doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script) + f"jobmanager.rpc.port: {port}\n")
    assert findings(doc, "ports", "warning") == []
    assert only(doc, "ports", "ok")["message"] == (
        f"Port {port} (jobmanager.rpc.port, the JobManager's RPC) is held by this configuration's running cluster: "
        f"pid {pid} (a Flink JobManager of the configuration {tmp_path}); a second start-cluster.sh with it "
        "fails until bin/stop-cluster.sh stops that one."
    )


def test_a_port_that_the_jobmanager_of_another_configuration_holds_is_a_warning_naming_it(tmp_path, good_script):
    other = tmp_path / "other-conf"
    other.mkdir()
    with listening(JOBMANAGER, "--configDir", other) as (pid, port):
        doc = run_doctor(tmp_path, gpu_conf(discovery_script_path=good_script) + f"rest.port: {port}\n")
    warning = only(doc, "ports", "warning")
    assert f"by pid {pid} (a Flink JobManager of the configuration {other}): a cluster started" in warning["message"]
    assert f"kill {pid}" in warning["fix"]
