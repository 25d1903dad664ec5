#!/usr/bin/env bash
# Builds the native parts with AddressSanitizer + UBSan, runs the C++ tests, then the
# simulator-backed Python tests against that build (the interpreter preloads the ASan runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
build=build/asan
root=build/asan-root
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFLINK_GPU_SANITIZE=ON -DFLINK_GPU_BUILD_TESTS=ON \
  -DPython_EXECUTABLE="$(command -v "$python")" >/dev/null
cmake --build "$build"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
ctest --test-dir "$build" --output-on-failure

# A package tree of the Python sources plus the sanitized binaries.
rm -rf "$root"
mkdir -p "$root"
cp -r src/flink_gpu "$root/flink_gpu"
find "$root/flink_gpu" \( -name '*.so' -o -name '*.so.*' -o -name '__pycache__' \) -prune -exec rm -rf {} +
cmake --install "$build" --prefix "$root" >/dev/null
# CPython itself is not leak-clean at exit, so leak checking stays with the C++ tests above.
LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  PYTHONPATH="$root" PATH="$root/bin:$PATH" \
  "$python" -m pytest -q -p no:cacheprovider --import-mode=importlib \
    tests/test_native.py tests/gpu/test_nvml_discovery.py tests/test_coordination.py tests/binding/test_bind.py tests/test_nvml_metrics.py \
    tests/test_discovery_executable.py tests/test_simulator.py "$@"
