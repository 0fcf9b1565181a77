#!/usr/bin/env bash
# Installs what is missing, configures, builds, and runs the whole test suite:
# devices as threads, processes under mpirun (shared memory), and the
# inter-host path forced on one machine (MPI, also over TCP only), once with
# Open MPI (everything, MLIR and the torch backend included) and once with
# MPICH (everything but MLIR, the torch backend and the layout checks).
#   MESHDMA_TEST_MPIS="openmpi mpich"  which MPIs to test (default: both)
#   MESHDMA_BUILD_DIR=build            the Open MPI build folder (MPICH's gets -mpich)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
build_dir=${MESHDMA_BUILD_DIR:-build}
for mpi in ${MESHDMA_TEST_MPIS:-openmpi mpich}; do
  case "$mpi" in
    openmpi)
      dir=$build_dir
      cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release ;;
    mpich)
      dir=$build_dir-mpich
      cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMESHDMA_WITH_MLIR=OFF \
        -DMESHDMA_WITH_TORCH=OFF \
        -DMPI_C_COMPILER=/usr/bin/mpicc.mpich \
        -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
        -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich ;;
    *) echo "scripts/test.sh: unknown MPI '$mpi' (openmpi or mpich)" >&2; exit 2 ;;
  esac
  echo "=== meshdma tests with $mpi ($dir)"
  cmake --build "$dir" -j "$(nproc)"
  # MPI tests oversubscribe the cores: run the suite one test at a time.
  # The layout checks (label layout) read and compile the sources without
  # MPI, the same whichever MPI the build uses: they run with Open MPI.
  select=()
  if [ "$mpi" = mpich ]; then select=(-LE '^layout$'); fi
  ctest --test-dir "$dir" --output-on-failure --timeout 600 "${select[@]}"
done
