# Sourced by tools/lint.sh, tools/format.sh and .pre-commit-config.yaml.

# The C and C++ files clang-format owns (.clang-format). Python's are ruff's to find ([tool.ruff]).
cxx_files() {
    git ls-files -- 'csrc/*.cpp' 'csrc/*.hpp' 'csrc/*.h' 'csrc/*.c' 'benchmarks/*.c'
}

# A dev build (tools/dev_build.sh) puts the extension in src/: check that one, not an installed copy.
use_dev_build() {
    if compgen -G "src/flink_gpu/_native*.so" >/dev/null; then
        export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    fi
}
