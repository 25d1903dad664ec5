#!/usr/bin/env bash
# The real-cluster end-to-end tests on older Flink releases than the one the test extra pins (the
# default test run's): for each VERSION, a fresh virtual environment with apache-flink==VERSION and
# the given flink-gpu wheel, then one cluster with a job per PyFlink mode (bind_gpus, the gauges in
# Flink's REST API: TestTwoTaskManagers) and the async inference example where that Flink has the API.
#
#   tools/check_flink_versions.sh WHEEL VERSION...      (e.g. build/wheelhouse/flink_gpu-*-cp311-*.whl 2.1.3 2.2.1)
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=${1:?usage: $0 WHEEL VERSION...}
shift
[ $# -gt 0 ] || { echo "usage: $0 WHEEL VERSION..." >&2; exit 2; }
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for version in "$@"; do
  venv="$work/flink-$version"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q "$wheel" "apache-flink==$version" "pytest>=7"
  echo "-- apache-flink $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("apache-flink"))')"
  # From the checkout's root (pyproject.toml's pytest settings); the tests import the installed wheel,
  # and the venv's bin/ comes first on PATH as in an activated venv: thread mode's embedded Python
  # (pemja) is the `python` found there.
  PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "tests/test_pyflink_cluster.py::TestTwoTaskManagers" "tests/test_examples.py" -k "TestTwoTaskManagers or async"
  rm -rf "$venv"
done
