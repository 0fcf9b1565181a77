#!/usr/bin/env bash
# Instructions one small collective call executes outside its waits, counted
# by valgrind's callgrind on rank 0 of two processes: a figure that does not
# move with the machine's load, for changes too small for wall-clock ratios
# to resolve on a shared machine.
#
#   bench/instructions_per_call.sh BENCH OP SIZE [ITERS]
#
# BENCH is a meshdma-bench binary, OP a --collective, SIZE a byte size. Rank 0
# runs ITERS (default 4000) and then 2 x ITERS iterations under callgrind;
# the difference, divided by ITERS, is one iteration without the set-up.
# Only the measurements are counted (`BenchContext::TimeOnMesh`: the timed
# calls, their warm-up and barriers, and the bound column's copy of SIZE
# bytes, tens of instructions at small sizes): MPI's start-up differs from
# run to run by millions of instructions, which divided by ITERS moved an
# inter-host count by thousands. The
# waits (Device::WaitFlags and SpinUntil) are left out: under
# callgrind rank 0 is the slow side and rarely waits, but what it spins
# depends on timing. One iteration is one call out of place, and one in
# place where the op has an in-place column. Needs valgrind and Open MPI's
# mpirun. MPIRUN_ARGS adds arguments to both mpirun commands, for example
# MPIRUN_ARGS="-x MESHDMA_FORCE_INTERHOST=1" to count the inter-host path;
# NP (default 2) is the number of processes, for example NP=4
# MPIRUN_ARGS="--oversubscribe -x MESHDMA_HOSTS=2" for 2 simulated hosts
# of 2 processes.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BENCH OP SIZE [ITERS]" >&2
  exit 2
fi
bench=$1 op=$2 size=$3 iters=${4:-4000}
command -v valgrind >/dev/null || { echo "$0: needs valgrind" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cat >"$out/rank0.sh" <<'EOF'
#!/usr/bin/env bash
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
if [[ $rank == 0 ]]; then
  exec valgrind -q --tool=callgrind --collect-atstart=no \
    --toggle-collect='meshdma::bench::BenchContext::TimeOnMesh*' \
    --callgrind-out-file="$CALLGRIND_OUT" "$@"
fi
exec "$@"
EOF
chmod +x "$out/rank0.sh"
counted() {  # instructions in a callgrind profile, the waits left out
  callgrind_annotate --threshold=100 "$1" |
    awk '/^ *[0-9,]+ / && !/PROGRAM TOTALS|WaitFlags|SpinUntil/ {
           v = $1; gsub(",", "", v); s += v } END { printf "%d\n", s }'
}
for n in "$iters" $((2 * iters)); do
  # shellcheck disable=SC2086  # MPIRUN_ARGS is a list of words.
  CALLGRIND_OUT="$out/cg.$n" mpirun -np "${NP:-2}" -x CALLGRIND_OUT ${MPIRUN_ARGS:-} \
    "$out/rank0.sh" "$bench" --collective "$op" -b "$size" -e "$size" \
    -n "$n" --repeats 1 --no-baseline >/dev/null
done
echo "$op $size: $((($(counted "$out/cg.$((2 * iters))") - \
  $(counted "$out/cg.$iters")) / iters)) instructions per iteration" \
  "outside waits"
