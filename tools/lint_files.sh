# Sourced by tools/lint.sh and tools/format.sh: the C and C++ files clang-format owns (.clang-format).
# Python's are ruff's to find (pyproject.toml [tool.ruff]).
cxx_files() {
    git ls-files -- 'csrc/*.cpp' 'csrc/*.hpp' 'csrc/*.h' 'csrc/*.c' 'benchmarks/*.c'
}
