#!/usr/bin/env bash
# Builds (CMake, FLINK_GPU_BUILD_FUZZERS=ON) and runs the libFuzzer targets of csrc/fuzz/ under
# AddressSanitizer + UBSan: one target per csrc/fuzz/fuzz_*.cpp.
#
#   tools/fuzz.sh                 20 seconds per target
#   tools/fuzz.sh 300             300 seconds per target
#   tools/fuzz.sh --runs 1000000  one million inputs per target
#   tools/fuzz.sh 20 fuzz_script_output   only the named target(s)
#
# Needs clang with libFuzzer; installs Debian's clang with apt-get when it is missing and this is root
# (about 15 s with a warm mirror). Builds in build/fuzz/. Seeds come from
# csrc/fuzz/corpus/<target>/ (never written); what the fuzzer finds goes to build/fuzz/corpus/<target>/,
# crashes and hangs to build/fuzz/artifacts/. Exits non-zero on the first crash, hang or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=(-max_total_time=20)
if [[ $# -gt 0 && $1 == --runs ]]; then
    [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS | --runs N] [TARGET...]" >&2; exit 2; }
    limit=(-runs="$2")
    shift 2
elif [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    limit=(-max_total_time="$1")
    shift
fi
known=()
for source in csrc/fuzz/fuzz_*.cpp; do known+=("$(basename "$source" .cpp)"); done
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${known[@]}")
for target in "${targets[@]}"; do
    [[ " ${known[*]} " == *" $target "* ]] || { echo "unknown fuzz target $target (known: ${known[*]})" >&2; exit 2; }
done

CXX=${FUZZ_CXX:-clang++}
if ! command -v "$CXX" >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "== installing clang (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
    else
        echo "clang++ with libFuzzer is needed (e.g. apt-get install clang); set FUZZ_CXX to use another." >&2
        exit 2
    fi
fi

CC=${FUZZ_CC:-${CXX/clang++/clang}}
out=build/fuzz
mkdir -p "$out/artifacts"
echo "== build (${targets[*]})"
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_C_FLAGS="-g -O1" -DCMAKE_CXX_FLAGS="-g -O1" \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -DFLINK_GPU_BUILD_FUZZERS=ON \
    -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build "$out" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

for target in "${targets[@]}"; do
    mkdir -p "$out/corpus/$target"
    dict=()
    [[ -f csrc/fuzz/corpus/$target.dict ]] && dict=(-dict="csrc/fuzz/corpus/$target.dict")
    echo "== $target: run (${limit[*]})"
    log="$out/$target.log"
    # -timeout: one input taking 10 s is a hang; -max_len: a coordination file is a few short lines
    status=0
    "$out/$target" "${limit[@]}" -timeout=10 -max_len=4096 -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/$target-" "${dict[@]}" \
        "$out/corpus/$target" "csrc/fuzz/corpus/$target" >"$log" 2>&1 || status=$?
    if [[ $status -ne 0 ]]; then
        tail -n 60 "$log" >&2
        echo "== $target FAILED (exit $status); input saved under $out/artifacts/, log $log" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "== $target: ${runs:-?} inputs, no crash, no hang, no sanitizer report"
done
