#!/usr/bin/env bash
# meshplan's build dependencies as Debian .deb files, for a GPU machine that
# has the CUDA toolkit, CMake, Ninja and a C++ compiler but none of our Debian
# packages and no network (issue 16). Two steps:
#
#   scripts/gpu/debs.sh fetch  [DIR]          on a Debian 12 machine with apt and a network:
#                                             apt-get download the packages below into DIR
#                                             (default third_party/debs, ignored by git) and
#                                             write DIR/SHA256SUMS and DIR/MANIFEST
#   scripts/gpu/debs.sh unpack [DIR] [PREFIX] on the GPU machine: check the sums, unpack every
#                                             .deb with dpkg-deb -x (or ar + tar) into PREFIX
#                                             (default build/deps-prefix), point absolute
#                                             symlinks into PREFIX, and print PREFIX
#
# Then configure with -DMESHPLAN_DEPS_PREFIX=PREFIX and run with
# LD_LIBRARY_PATH=PREFIX/usr/lib/<arch>:PREFIX/lib/<arch> (scripts/gpu/cuda-checks.sh
# does both when it finds DIR). The set is what the non-GUI build and its tests
# need beyond a compiler and the C library: yaml-cpp, nlohmann-json, CLI11,
# Boost's headers (Boost.Graph is header-only), GoogleTest, Google Benchmark,
# OpenBLAS (the OpenMP build) with its Fortran runtime, and zlib. Open MPI is
# not in it: a prefix cannot relocate mpirun, so without a system MPI the
# build runs one rank per process (the CMake output says so). The bundle is
# about 25 MB, within what the device tool carries (64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(
  libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev libboost1.74-dev
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  libopenblas-dev libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0
  zlib1g-dev zlib1g
)

die() { echo "debs.sh: $*" >&2; exit 1; }

fetch() {
  local dir=${1:-third_party/debs}
  command -v apt-get > /dev/null || die "fetch needs apt-get (a Debian 12 machine with a network)"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # apt-get download writes to the current directory; as root it warns that _apt cannot write there.
  (cd "$dir" && apt-get download "${packages[@]}" 2>&1 | grep -v "unsandboxed as root" || true)
  local missing=()
  for p in "${packages[@]}"; do
    compgen -G "$dir/${p}_*.deb" > /dev/null || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] || die "not downloaded: ${missing[*]} (run apt-get update first?)"
  (cd "$dir" && sha256sum -- *.deb > SHA256SUMS)
  for d in "$dir"/*.deb; do dpkg-deb -W --showformat='${Package} ${Version} ${Architecture}\n' "$d"; done > "$dir/MANIFEST"
  echo "debs.sh: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1), in $dir"
}

unpack_one() {
  local deb=$1 prefix=$2
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$deb" "$prefix"
    return
  fi
  command -v ar > /dev/null || die "neither dpkg-deb nor ar to unpack $deb"
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && ar x "$deb")
  local data
  data=$(ls "$tmp"/data.tar.* 2>/dev/null | head -1)
  [ -n "$data" ] || die "$deb has no data.tar.*"
  tar -xf "$data" -C "$prefix"
  rm -rf "$tmp"
}

unpack() {
  local dir=${1:-third_party/debs} prefix=${2:-build/deps-prefix}
  [ -d "$dir" ] || die "no $dir: run 'scripts/gpu/debs.sh fetch' on a Debian machine and copy the folder here"
  compgen -G "$dir/*.deb" > /dev/null || die "no .deb files in $dir"
  if [ -f "$dir/SHA256SUMS" ]; then
    (cd "$dir" && sha256sum --quiet -c SHA256SUMS) || die "a .deb in $dir does not match SHA256SUMS"
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  for deb in "$dir"/*.deb; do unpack_one "$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")" "$prefix"; done
  # Development symlinks such as usr/lib/<arch>/libz.so -> /lib/<arch>/libz.so.1.2.13
  # are absolute: point them at the unpacked file.
  while IFS= read -r link; do
    local target
    target=$(readlink "$link")
    case "$target" in
      /*) if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi ;;
    esac
  done < <(find "$prefix" -type l)
  echo "$prefix"
}

case "${1:-}" in
  fetch) shift; fetch "$@" ;;
  unpack) shift; unpack "$@" ;;
  *) die "usage: $0 fetch [DIR] | unpack [DIR] [PREFIX]" ;;
esac
