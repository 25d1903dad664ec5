#!/usr/bin/env bash
# Applies the formatting tools/lint.sh checks: ruff format on the Python files, clang-format -i on the C and
# C++ files (.clang-format), and ruff's import sorting (the one lint rule that is formatting). Tools:
# pip install ".[lint]".
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/lint_files.sh

ruff check --no-cache --select I --fix --quiet .
ruff format --no-cache .
mapfile -t cxx < <(cxx_files)
clang-format -i "${cxx[@]}"
