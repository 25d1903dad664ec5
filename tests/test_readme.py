"""README.md's Python examples run as written: on the simulator its shell selects they work, without it
they end in one message naming the simulator (no traceback), and they write nothing outside a temporary
directory (not the host's shared /var/tmp/flink-gpu-coordination)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env

README = Path(__file__).resolve().parent.parent / "README.md"
SHARED_FILE = Path("/var/tmp/flink-gpu-coordination")


def python_examples():
    text = README.read_text(encoding="utf-8")
    using = text.split("## Using it", 1)[1].split("\n## ", 1)[0]
    # the runnable ones: those that import flink_gpu and define no PyFlink class (a fragment of examples/)
    return [
        block
        for block in re.findall(r"```python\n(.*?)```", using, re.S)
        if "import" in block and "MapFunction" not in block
    ]


def file_state(path):
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


@pytest.fixture
def run_example(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    def run(code, env):
        before = file_state(SHARED_FILE), file_state(Path(str(SHARED_FILE) + ".lease"))
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "TMPDIR": str(scratch)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (file_state(SHARED_FILE), file_state(Path(str(SHARED_FILE) + ".lease"))) == before
        assert list(scratch.iterdir()) == [], "the example left files in its temporary directory"
        return proc

    return run


def test_the_readme_has_the_examples():
    assert len(python_examples()) == 2


@pytest.mark.parametrize("number", range(2))
def test_a_readme_example_runs_on_the_simulator_its_shell_selects(run_example, number):
    # what `eval "$(flink-gpu --simulate 4 taskmanager-env)"` exports
    # (tests/cli/test_taskmanager_env_command.py runs that eval itself)
    from flink_gpu.deploy.taskmanager_env import taskmanager_environment

    proc = run_example(python_examples()[number], child_env(**taskmanager_environment(devices=4)))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "GPU-00000000-0000-4000-8000-00000000000" in proc.stdout or "['0', '1']" in proc.stdout, proc.stdout


@pytest.mark.parametrize("number", range(2))
def test_a_readme_example_without_a_gpu_or_the_simulator_says_so_in_one_message(run_example, number, tmp_path):
    # no NVML (a library path that does not exist, whatever driver the host has), no Flink installation
    env = child_env(FLINK_GPU_NVML_LIBRARY=str(tmp_path / "no-libnvidia-ml.so.1"), FLINK_HOME=str(tmp_path))
    proc = run_example(python_examples()[number], env)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    assert 'eval "$(flink-gpu --simulate 4 taskmanager-env)"' in output, output
