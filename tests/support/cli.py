"""Helpers of the command-line tests (tests/cli): `flink-gpu` run as a real process, doctor's JSON report, Flink
configurations of a GPU resource."""

import json
import os
import subprocess
import sys
import textwrap

from conftest import child_env
from flink_gpu import simulator

JAVA_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"


UUID0 = "GPU-00000000-0000-4000-8000-000000000000"


def cli(*args, env=None, timeout=60, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "flink_gpu.cli", *map(str, args)],
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def cli_json(*args, env=None, expect=0, cwd=None):
    proc = cli(*args, "--json", env=env, cwd=cwd)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    assert doc["ok"] is (expect == 0)
    return doc


def cli_with_a_private_var_tmp(*args, empty_default=False, env=None):
    """`flink-gpu` in a mount namespace of its own whose /var/tmp is an empty tmpfs: the stock default coordination
    file does not exist there (or is an empty file), whatever this host's /var/tmp holds, and nothing the command
    writes there outlives it."""
    create = " && : > /var/tmp/flink-gpu-coordination" if empty_default else ""
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", f'mount -t tmpfs tmpfs /var/tmp{create} && exec "$@"', "sh"]
        + [sys.executable, "-m", "flink_gpu.cli", *map(str, args)],
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
    )


HOLDER_COMMAND = f"{sys.executable} -c 'import sys; sys.stdin.read()'"


def cut_to_table(command):
    """A command line as the tables show it: cut to 60 columns, whatever the interpreter's path."""
    return command if len(command) <= 60 else command[:57] + "..."


def write_script(path, body, executable=True):
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755 if executable else 0o644)
    return path


PARAM_KEYS = {
    "discovery_script_path": "discovery-script.path",
    "discovery_script_args": "discovery-script.args",
    "discovery_script_timeout": "discovery-script.timeout",
    "discovery_mode": "discovery-mode",
}


def gpu_conf(amount=1, factory=JAVA_FACTORY, **params):
    lines = ["external-resources: gpu"]
    if amount is not None:
        lines.append(f"external-resource.gpu.amount: {amount}")
    if factory is not None:
        lines.append(f"external-resource.gpu.driver-factory.class: {factory}")
    for key, value in params.items():
        lines.append(f"external-resource.gpu.param.{PARAM_KEYS[key]}: {value}")
    return "\n".join(lines) + "\n"


def run_doctor(tmp_path, conf_text, *args, env=None, expect=None, file_name="flink-conf.yaml"):
    conf = tmp_path / file_name
    conf.write_text(conf_text)
    # the shell of a TaskManager on the simulator (else doctor --simulate says it gets no GPU)
    env = child_env(**simulator.environment(devices=4)) if env is None else env
    proc = cli("doctor", conf, "--simulate", "4", *args, "--json", env=env)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] == "doctor"
    assert proc.returncode == (0 if doc["ok"] else 1)
    if expect is not None:
        assert proc.returncode == expect, json.dumps(doc["findings"], indent=1)
    for finding in doc["findings"]:
        assert set(finding) == {"resource", "check", "level", "message", "fix"}
        assert finding["level"] in ("error", "warning", "note", "ok")
        if finding["level"] == "error":
            assert finding["fix"], finding
    summary = doc["summary"]
    assert summary["errors"] == sum(f["level"] == "error" for f in doc["findings"])
    assert summary["warnings"] == sum(f["level"] == "warning" for f in doc["findings"])
    assert doc["ok"] is (summary["errors"] == 0)
    return doc


def findings(doc, check, level=None):
    return [f for f in doc["findings"] if f["check"] == check and (level is None or f["level"] == level)]


def only(doc, check, level):
    found = findings(doc, check, level)
    assert len(found) == 1, json.dumps(doc["findings"], indent=1)
    return found[0]


def flink_gpu_on_path(tmp_path, env):
    """``env`` with a ``flink-gpu`` command on PATH (this checkout's), so that printed fixes run as printed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    write_script(bin_dir / "flink-gpu", f'exec {sys.executable} -m flink_gpu.cli "$@"\n')
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}


RESOURCES_CONF = """\
external-resources: gpu
external-resource.gpu.amount: 2
external-resource.gpu.kubernetes.config-key: nvidia.com/gpu
external-resource.gpu.yarn.config-key: yarn.io/gpu
"""


def write_file(path, text):
    path.write_text(text)
    return path


# Binds in a thread of its own and waits on stdin; prints the bound indices and the thread's id.
BINDER = """\
import sys, threading
from flink_gpu import GPUInfo
from flink_gpu.binding import bind
path, taskmanager, count, share, slot, gpus = sys.argv[1:7]
def hold():
    binding = bind([GPUInfo(i) for i in gpus.split(",")], int(count), int(share), path=path,
                   slot=None if slot == "-" else slot, taskmanager_pid=None if taskmanager == "-" else int(taskmanager))
    print(",".join(binding.indices), threading.get_native_id(), flush=True)
    sys.stdin.read()
thread = threading.Thread(target=hold)
thread.start()
thread.join()
"""


def binder_cmdline(script, path, taskmanager, gpus, count=1, share=1, slot=None):
    return [
        sys.executable,
        str(script),
        str(path),
        "-" if taskmanager is None else str(taskmanager),
        str(count),
        str(share),
        slot or "-",
        ",".join(gpus),
    ]
