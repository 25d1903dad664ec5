#!/usr/bin/env bash
# Builds the wheel exactly as `pip wheel .` does, repairs it for manylinux_2_28 with auditwheel,
# installs the repaired wheel into a fresh virtual environment and checks that it imports without
# a driver, that no binary links libnvidia-ml, and that the native path works on the simulator.
#
#   PYTHON=python3.10 tools/check_wheel.sh [--wheelhouse DIR] [--venv DIR]
#
# --wheelhouse: keep the repaired wheel there. --venv: make the fresh environment there and keep it
# (tools/check_pythons.sh runs the tests in it).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
wheelhouse=
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
while [ $# -gt 0 ]; do
  case $1 in
    --wheelhouse) wheelhouse=${2:?--wheelhouse needs a directory}; shift ;;
    --venv) venv=${2:?--venv needs a directory}; shift ;;
    *) echo "usage: PYTHON=python3.X $0 [--wheelhouse DIR] [--venv DIR]" >&2; exit 2 ;;
  esac
  shift
done
plat="manylinux_2_28_$(uname -m)"

build_args=()
if command -v ccache >/dev/null; then
  # The C++ core compiles alike for every Python: ccache serves it to the next one's wheel
  # (tools/check_pythons.sh builds four), given one nvml.h for all (NVML_INCLUDE_DIR).
  build_args+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
if [ -n "${NVML_INCLUDE_DIR:-}" ]; then
  build_args+=("--config-settings=cmake.define.NVML_INCLUDE_DIR=$NVML_INCLUDE_DIR")
fi
"$python" -m pip wheel . --no-deps -q -w "$work/wheel" "${build_args[@]}"
auditwheel repair --plat "$plat" -w "$work/repaired" "$work"/wheel/*.whl
wheel=$(ls "$work"/repaired/*.whl)
echo "repaired: $(basename "$wheel")"

mkdir "$work/unpacked"
(cd "$work/unpacked" && "$python" -m zipfile -e "$wheel" .)
elf_count=0
while IFS= read -r -d '' f; do
  if head -c 4 "$f" | grep -q "ELF"; then
    elf_count=$((elf_count + 1))
    if readelf -d "$f" | grep NEEDED | grep -q "libnvidia-ml"; then
      echo "FAIL: $f links libnvidia-ml (must be loaded at run time only)"; exit 1
    fi
  fi
done < <(find "$work/unpacked" -type f -print0)
[ "$elf_count" -ge 3 ] || { echo "FAIL: expected the extension, the simulator and the executable, found $elf_count ELF files"; exit 1; }

"$python" -m venv "$venv"
"$venv/bin/pip" install -q "$wheel"
# No driver, no simulator: importing must still work.
env -u FLINK_GPU_NVML_LIBRARY "$venv/bin/python" -c "import flink_gpu, flink_gpu._native; print('import ok', flink_gpu.__version__)"
lib=$("$venv/bin/python" -c "from flink_gpu import simulator; print(simulator.library_path())")
out=$(FLINK_GPU_NVML_LIBRARY="$lib" FLINK_GPU_SIM_DEVICES=4 "$venv/bin/flink-gpu-discovery" 4)
[ "$out" = "0,1,2,3" ] || { echo "FAIL: flink-gpu-discovery from the repaired wheel printed '$out'"; exit 1; }
# the simulator's machine profiles ship beside it, where it finds them
out=$(FLINK_GPU_NVML_LIBRARY="$lib" FLINK_GPU_SIM_PROFILE=h100-hgx-8 "$venv/bin/flink-gpu-discovery" 2)
[ "$out" = "0,1" ] || { echo "FAIL: flink-gpu-discovery on the wheel's h100-hgx-8 profile printed '$out'"; exit 1; }
# the --json schema ships in the wheel (docs/ does not): `flink-gpu schema` prints it
"$venv/bin/flink-gpu" schema | grep -q '{"schema": 1' || { echo "FAIL: flink-gpu schema from the wheel printed no schema"; exit 1; }
echo "wheel check passed: $(basename "$wheel"), $elf_count ELF files, none linking libnvidia-ml; discovery prints $out; schema shipped"
if [ -n "$wheelhouse" ]; then
  mkdir -p "$wheelhouse" && cp "$wheel" "$wheelhouse/"
fi

