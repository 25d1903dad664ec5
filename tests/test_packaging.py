"""The release wheels: cibuildwheel builds CPython 3.10 to 3.15 for x86_64 and aarch64 on manylinux_2_28,
never a free-threaded or a musllinux wheel; the classifiers name the versions CI tests
(tools/check_pythons.sh reads them), from the oldest that requires-python allows."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

# cibuildwheel, and tomllib, run on Python 3.11 and later (the checks do not depend on the version)
tomllib = pytest.importorskip("tomllib", reason="tomllib and cibuildwheel need Python 3.11 or later")

REPO = Path(__file__).resolve().parent.parent
RELEASED = [f"cp3{minor}" for minor in range(10, 16)]
ARCHS = ["x86_64", "aarch64"]


def pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_cibuildwheel_builds_cpython_3_10_to_3_15_for_both_archs_and_nothing_free_threaded():
    pytest.importorskip("cibuildwheel", reason="the test extra installs cibuildwheel (pip install '.[test]')")
    proc = subprocess.run(
        [sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux", str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    identifiers = proc.stdout.split()
    assert sorted(identifiers) == sorted(f"{tag}-manylinux_{arch}" for tag in RELEASED for arch in ARCHS)
    config = pyproject()["tool"]["cibuildwheel"]
    assert config["manylinux-x86_64-image"] == config["manylinux-aarch64-image"] == "manylinux_2_28"
    # the skip is explicit, whatever cibuildwheel's defaults become
    assert "cp3??t-*" in config["skip"]


def test_the_classifiers_name_the_tested_versions_from_the_oldest_requires_python_allows():
    project = pyproject()["project"]
    tested = [
        int(m.group(1))
        for c in project["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
    ]
    assert tested == list(range(10, 14)), tested  # the CPythons this machine has, each tested by CI
    assert project["requires-python"] == f">=3.{min(tested)}"
