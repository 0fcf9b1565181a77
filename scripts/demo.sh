#!/usr/bin/env bash
# Installs what is missing, builds the demo and runs it: the tutorial's right
# permute, then ring attention with communication overlapped with compute.
# Devices are threads of this process, one per core of the host topology
# (MESHDMA_DEVICES_PER_PROCESS overrides); under mpirun the same binaries run
# across processes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
build_dir=${MESHDMA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build_dir" -j "$(nproc)" --target meshdma-info 01_right_permute \
  06_ring_attention > /dev/null
"$build_dir"/tools/meshdma-info | sed -n '/^launch/,$p'
"$build_dir"/examples/01_right_permute
"$build_dir"/examples/06_ring_attention
