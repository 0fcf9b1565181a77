#!/usr/bin/env bash
# Installs what is missing, configures, builds, and runs the whole test suite:
# devices as threads, processes under mpirun (shared memory), and the
# inter-host path forced on one machine (MPI, also over TCP only), once with
# Open MPI (everything, MLIR and the torch backend included) and once with
# MPICH (the processes under mpirun at 2 ranks, the simulated hosts, the
# faults and the install tests, without MLIR and the torch backend).
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
  # MPICH runs what depends on the MPI, once per path: the processes under
  # mpirun at 2 ranks (shared memory, forced inter-host over meshdma's TCP
  # and over MPI's messages), the simulated hosts of 2 (of 2 processes and
  # of 2 and 1), the faults (rank_death),
  # but not the checked-mode variants (races: the same code as with Open
  # MPI); and the install tests (a consumer built against MPICH). Threads of
  # one process, the other rank counts and the layout checks run with Open
  # MPI.
  select=()
  if [ "$mpi" = mpich ]; then
    select=(-L '^(mpi|install)$' -LE '^races$'
      -R '\.np2($|\.)|\.np[34]\.hosts2|rank_death|install')
  fi
  ctest --test-dir "$dir" --output-on-failure --timeout 600 "${select[@]}"
done
