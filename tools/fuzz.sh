#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of csrc/fuzz/ under AddressSanitizer + UBSan.
#
#   tools/fuzz.sh                 20 seconds per target
#   tools/fuzz.sh 300             300 seconds per target
#   tools/fuzz.sh --runs 1000000  one million inputs per target
#   tools/fuzz.sh 20 fuzz_script_output   only the named target(s)
#
# Needs clang with libFuzzer; installs Debian's clang with apt-get when it is missing and this is root
# (about 15 s with a warm mirror). Builds outside the CMake build, into build/fuzz/. Seeds come from
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
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_script_output fuzz_coordination_file)

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

declare -A sources=(
    [fuzz_script_output]=csrc/script_output.cpp
    [fuzz_coordination_file]=csrc/coordination.cpp
)
out=build/fuzz
mkdir -p "$out/artifacts"
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Icsrc)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

for target in "${targets[@]}"; do
    [[ -n ${sources[$target]:-} ]] || { echo "unknown fuzz target $target (known: ${!sources[*]})" >&2; exit 2; }
    echo "== $target: build"
    "$CXX" "${flags[@]}" "csrc/fuzz/$target.cpp" "${sources[$target]}" -o "$out/$target"
    mkdir -p "$out/corpus/$target"
    dict=()
    [[ -f csrc/fuzz/$target.dict ]] && dict=(-dict="csrc/fuzz/$target.dict")
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
