#!/usr/bin/env bash
# Developer build without pip: configures and builds the native parts in build/dev and installs
# them into src/ (gitignored), so `PYTHONPATH=src python -m pytest` runs the working tree.
# Serialised with flock so that several shells can call it at once.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
exec 9>build/.dev-build.lock
flock 9
build_dir=${FLINK_GPU_BUILD_DIR:-build/dev}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} \
  -DPython_EXECUTABLE="$(command -v python3)" -DFLINK_GPU_BUILD_TESTS=ON "$@" >/dev/null
cmake --build "$build_dir"
cmake --install "$build_dir" --prefix src >/dev/null
