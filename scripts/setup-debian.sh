#!/usr/bin/env bash
# Installs the Debian 12 packages meshdma needs to build, test and benchmark.
# Idempotent: when every package is already installed it only checks (seconds).
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache python3
  libopenmpi-dev openmpi-bin libmpich-dev mpich
  libabsl-dev
  libhwloc-dev hwloc
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libeigen3-dev
  gnuplot-nox
  libmlir-19-dev mlir-19-tools llvm-19-dev
  clang libclang-rt-dev
  python3-torch libtorch-dev pybind11-dev python3-mpi4py
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "meshdma setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "meshdma setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
