#!/usr/bin/env bash
# Installs meshplan's build and test dependencies from Debian's packages.
# Safe to re-run: packages already installed are skipped, and apt-get is not
# touched at all when nothing is missing. Uses sudo when not run as root.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config git python3 python3-venv
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libboost-graph-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libopenblas-openmp-dev zlib1g-dev dataset-fashion-mnist fortunes
  libdnnl-dev ocl-icd-opencl-dev
  qt6-base-dev libqt6opengl6-dev qt6-charts-dev qt6-svg-dev libgl-dev xvfb xauth
  libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client munge libpmix2
  clang libclang-rt-14-dev
  python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
