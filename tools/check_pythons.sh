#!/usr/bin/env bash
# The wheel with each CPython that pyproject.toml's classifiers name (the versions tested): each one
# built, repaired and checked by tools/check_wheel.sh, and the tests that need no Flink cluster run
# against the installed wheel of the oldest and of the newest. A named version that this machine
# lacks (on PATH or in pyenv) fails the check: a version skipped would be a classifier untested.
#
#   tools/check_pythons.sh [--wheelhouse DIR]      (DIR keeps the repaired wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
wheelhouse_args=("$@")

versions=$(python3 - <<'PY'
import tomllib
classifiers = tomllib.load(open("pyproject.toml", "rb"))["project"]["classifiers"]
prefix = "Programming Language :: Python :: 3."
minors = sorted(int(c[len(prefix):]) for c in classifiers if c.startswith(prefix) and c[len(prefix):].isdigit())
print(" ".join(f"3.{m}" for m in minors))
PY
)
[ -n "$versions" ] || { echo "FAIL: pyproject.toml's classifiers name no Python 3.X version" >&2; exit 1; }

find_python() {  # python3.X on PATH if it runs, else pyenv's newest 3.X.*
  local version=$1 candidate
  if candidate=$(command -v "python$version") && "$candidate" -c "" 2>/dev/null; then
    echo "$candidate"
    return
  fi
  candidate=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$candidate" ] && echo "$candidate"
}

# One nvml.h for every build (pip's isolated build would install it afresh in a new place each time),
# so that ccache, where it is installed, compiles the C++ core once for all four wheels.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m pip install -q --target "$scratch/nvml" nvidia-nvml-dev
nvml_h=$(find "$scratch/nvml" -name nvml.h | head -n 1)
[ -n "$nvml_h" ] || { echo "FAIL: nvidia-nvml-dev installed no nvml.h" >&2; exit 1; }
export NVML_INCLUDE_DIR=${nvml_h%/nvml.h}

oldest=${versions%% *} newest=${versions##* }
for version in $versions; do
  python=$(find_python "$version") || { echo "FAIL: no Python $version here (PATH, pyenv): pyproject.toml names it" >&2; exit 1; }
  tests=()
  [ "$version" = "$oldest" ] || [ "$version" = "$newest" ] && tests=(--tests)
  echo "-- Python $version ($python)${tests:+: with the tests that need no Flink cluster}"
  PYTHON=$python tools/check_wheel.sh "${tests[@]}" "${wheelhouse_args[@]}"
done
