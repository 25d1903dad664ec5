"""What importing flink_gpu costs: the modules it loads, checked in bare child interpreters."""

import os
import subprocess
import sys

import pytest

import flink_gpu

# the flink_gpu under test (the dev tree or an installation), for child interpreters
SRC = os.path.dirname(os.path.dirname(os.path.abspath(flink_gpu.__file__)))


# --- import cost: GPUInfo pulls in neither typing (re, enum, functools, collections) nor the machinery --

#: What an operator that only needs GPUInfo must not pay for: the standard library's heavier modules, and
#: ours for configuration, NVML, coordination and the script backend (flink_gpu._native is not here:
#: Java's whitespace rule, one implementation, lives there).
HEAVY = (
    "typing",
    "re",
    "enum",
    "functools",
    "collections",
    "subprocess",
    "yaml",
    "json",
    "selectors",
    "difflib",
    "logging",
    "flink_gpu.gpu.driver",
    "flink_gpu.nvml",
    "flink_gpu.coordination",
    "flink_gpu.flink.script_protocol",
    "flink_gpu.gpu.script_discovery",
    "flink_gpu.gpu.nvml_discovery",
)


def test_gpu_info_imports_nothing_heavy_in_a_bare_interpreter():
    # -S: no site, so nothing (a .pth file, sitecustomize) has imported typing before us; this is
    # what an operator gets in a clean virtual environment
    code = (
        "import sys\n"
        "from flink_gpu import GPUInfo, cuda_visible_devices\n"
        "cuda_visible_devices([GPUInfo('0', {'uuid': 'GPU-a'})])\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = dict(os.environ, PYTHONPATH=SRC)
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


# --- README names every module `import flink_gpu` loads ---------------------------------------------


def test_readme_names_what_import_flink_gpu_loads():
    import re

    code = "import sys, flink_gpu\nprint(','.join(sorted(m for m in sys.modules if m.startswith('flink_gpu.'))))\n"
    loaded = (
        subprocess.run(
            [sys.executable, "-S", "-c", code],
            env=dict(os.environ, PYTHONPATH=SRC),
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(",")
    )
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    if not os.path.exists(readme):
        pytest.skip("no README.md beside the tests")
    with open(readme, encoding="utf-8") as handle:
        claim = re.search(r"`import flink_gpu` loads only (.*?);", handle.read(), re.S).group(1)
    assert sorted(re.findall(r"`(flink_gpu\.[a-z_.]+)`", claim)) == loaded
