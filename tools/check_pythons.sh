#!/usr/bin/env bash
# The wheel with each CPython that pyproject.toml's classifiers name (the versions tested): each one
# built, repaired and checked by tools/check_wheel.sh, then the tests that need no Flink cluster run
# against the installed wheel of the oldest and of the newest. A named version that this machine
# lacks (on PATH or in pyenv) fails the check: a version skipped would be a classifier untested.
#
#   tools/check_pythons.sh [--wheelhouse DIR]      (DIR keeps the repaired wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
wheelhouse=$scratch/wheelhouse
case ${1:-} in
  --wheelhouse) wheelhouse=${2:?--wheelhouse needs a directory} ;;
  "") ;;
  *) echo "usage: $0 [--wheelhouse DIR]" >&2; exit 2 ;;
esac

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
# so that ccache, where it is installed, compiles the C++ core once for all the wheels.
if [ -z "${NVML_INCLUDE_DIR:-}" ]; then
  python3 -m pip install -q --target "$scratch/nvml" nvidia-nvml-dev
  nvml_h=$(find "$scratch/nvml" -name nvml.h | head -n 1)
  [ -n "$nvml_h" ] || { echo "FAIL: nvidia-nvml-dev installed no nvml.h" >&2; exit 1; }
  export NVML_INCLUDE_DIR=${nvml_h%/nvml.h}
fi

for version in $versions; do
  python=$(find_python "$version") || { echo "FAIL: no Python $version here (PATH, pyenv): pyproject.toml names it" >&2; exit 1; }
  echo "-- Python $version ($python)"
  PYTHON=$python tools/check_wheel.sh --wheelhouse "$wheelhouse" --venv "$scratch/venv-$version"
done

# The tests of the oldest and of the newest side by side: each is one pytest that mostly waits on
# processes and deadlines, so two share the 2 cores well. From the checkout's root, so that
# pyproject.toml's pytest settings apply; src/ is not on the path (--import-mode=importlib), so every
# test imports the installed wheel, and the venv's bin/ comes first on PATH, so that the commands the
# tests run are the wheel's too.
oldest=${versions%% *} newest=${versions##* }
tested=("$oldest")
[ "$newest" != "$oldest" ] && tested+=("$newest")
pids=()
for version in "${tested[@]}"; do
  venv=$scratch/venv-$version
  tag=cp${version/./}
  wheel=$(ls "$wheelhouse"/flink_gpu-*-"$tag"-"$tag"-*.whl)
  (
    "$venv/bin/pip" install -q "$wheel[test]" &&
      PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs -m "not flink_cluster"
  ) >"$scratch/tests-$version.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!tested[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "-- the tests without a Flink cluster, Python ${tested[$i]}'s installed wheel: exit $status"
  grep -E "^(SKIPPED|FAILED|ERROR) " "$scratch/tests-${tested[$i]}.log" || true  # what did not pass, and why
  tail -n 30 "$scratch/tests-${tested[$i]}.log"
  [ "$status" = 0 ] || failed=1
done
exit $failed
