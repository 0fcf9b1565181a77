#!/usr/bin/env bash
# Installs what is missing, configures, builds, and runs the whole test suite:
# devices as threads, processes under mpirun (shared memory), and the
# inter-host path forced on one machine (MPI, also over TCP only).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
build_dir=${MESHDMA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$(nproc)"
# MPI tests oversubscribe the cores: run the suite one test at a time.
ctest --test-dir "$build_dir" --output-on-failure --timeout 600
