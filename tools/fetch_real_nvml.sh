#!/usr/bin/env bash
# Fetches NVIDIA's real libnvidia-ml.so.1 (Debian's non-free package libnvidia-ml1, driver 535)
# without installing anything, for the real-library tests (tests/test_real_nvml_library.py):
#   FLINK_GPU_REAL_NVML=$(tools/fetch_real_nvml.sh) python -m pytest tests/test_real_nvml_library.py
# The non-free component is enabled on a copy of this machine's own apt source configuration (no
# host name is written here), used through apt's Dir::Etc::SourceList/SourceParts options with
# private lists and cache under build/, so the system's apt state is never touched.
# Prints the library's path on stdout; anything else goes to stderr. Fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$PWD/build/real-nvml
package=${FLINK_GPU_REAL_NVML_PACKAGE:-libnvidia-ml1}
sources_dir=/etc/apt/sources.list.d

fail() {
  echo "fetch_real_nvml.sh: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/cache/archives/partial" "$work/deb" "$work/root"

# deb822 sources (Components: ...) and one-line sources (deb URI suite components...) alike.
found=0
for source in "$sources_dir"/*.sources "$sources_dir"/*.list /etc/apt/sources.list; do
  [ -f "$source" ] || continue
  case "$source" in
    *.sources) sed -E '/^Components:/{/(^|[[:space:]])non-free([[:space:]]|$)/!s/$/ non-free/}' "$source" \
                 > "$work/sources.list.d/$(basename "$source")" ;;
    *) sed -E '/^[[:space:]]*deb[[:space:]]/{/[[:space:]]non-free([[:space:]]|$)/!s/$/ non-free/}' "$source" \
         > "$work/sources.list.d/$(basename "$source" .list).list" ;;
  esac
  found=1
done
[ "$found" = 1 ] || fail "no apt source configuration found in $sources_dir or /etc/apt/sources.list"

apt_options=(
  -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/sources.list.d"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
  -o "APT::Get::List-Cleanup=0"
)
echo "fetch_real_nvml.sh: apt-get update (private lists in $work/lists)" >&2
apt-get "${apt_options[@]}" -q update >&2 || fail "apt-get update failed: the package index cannot be fetched"
echo "fetch_real_nvml.sh: apt-get download $package" >&2
(cd "$work/deb" && apt-get "${apt_options[@]}" -q download "$package" >&2) ||
  fail "cannot download the package $package (is Debian's non-free component reachable?)"
deb=$(ls "$work/deb"/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || fail "apt-get download $package produced no .deb"
dpkg-deb -x "$deb" "$work/root" || fail "cannot extract $deb"
library=$(find "$work/root" -name 'libnvidia-ml.so.1' \( -type f -o -type l \) | head -n 1)
[ -n "$library" ] || fail "$deb holds no libnvidia-ml.so.1"
echo "fetch_real_nvml.sh: $(basename "$deb")" >&2
readlink -f "$library"
