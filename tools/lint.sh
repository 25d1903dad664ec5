#!/usr/bin/env bash
# The static checks (.ci/run runs them; pre-commit runs the same tools on changed files): ruff's lint and
# format check, clang-format's check, mypy --strict on src/flink_gpu, and the stub _native.pyi against the
# built extension. Tools: pip install ".[lint]" (pinned there). tools/format.sh applies the formatting.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lint_files.sh

use_dev_build

failed=()
step() {
    local name=$1
    shift
    echo "== lint: $name"
    "$@" || failed+=("$name")
}

step "ruff check" ruff check --no-cache --output-format concise .
step "ruff format --check" ruff format --no-cache --check --output-format concise .
mapfile -t cxx < <(cxx_files)
step "clang-format --dry-run" clang-format --dry-run -Werror --ferror-limit=1 "${cxx[@]}"
step "mypy --strict (src/flink_gpu)" mypy
step "pre-commit config" pre-commit validate-config .pre-commit-config.yaml
step "stub _native.pyi against the extension" \
    python -m pytest -q -p no:cacheprovider tests/test_typing.py

if ((${#failed[@]})); then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    echo "(formatting: tools/format.sh applies it)" >&2
    exit 1
fi
echo "lint: all checks passed"
