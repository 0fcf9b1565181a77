#!/usr/bin/env bash
# How meshdma scales from 2 to 16 devices of one host, against Open MPI in
# the same launches: every collective at 2, 4, 8 and 16 processes (as many
# as there are cores), the same collectives as one process of that many
# device threads, and the fused kernels (examples 06 and 07) at each count.
# Each launch runs ROUNDS times, ops alternating, so that a slow spell of a
# shared machine spreads over all of them. It prints:
#   1. per op and size, vs_mpi (Open MPI's time / meshdma's) at each process
#      count: median [min-max];
#   2. the scaling checks, each line ending in "ok" or "MISSED":
#      - busbw flat: from 1 MiB, the median busbw at N processes over the
#        one at the fewest, >= 0.8;
#      - all_reduce small messages: at the smallest size, the time at N over
#        the time at the fewest, <= log2(N) / log2(fewest);
#      - at the most processes, every op and size >= 1.0x Open MPI;
#   3. threads against processes: per op and size, the time of N processes
#      over the time of one process of N device threads;
#   4. the fused kernels at each count: overlapped / max(compute,
#      communication), median [min-max].
#
#   bench/scale_sweep.sh BUILD [ROUNDS] [RAW_FILE]
#
# BUILD is a build directory (bench/meshdma-bench, examples/06_ring_attention,
# examples/07_collective_matmul); ROUNDS defaults to 2; RAW_FILE, when
# given, keeps every measured row. Environment: DEVICES (default "2 4 8 16",
# counts above CORES, default nproc, are dropped), SIZES (meshdma-bench's size flags,
# default "-b 8 -e 16M -f 8"), OPS, MPIRUN (default mpirun) and MPIRUN_ARGS
# (extra launcher options, e.g. "--mca pml ob1 --mca btl ^openib,uct").
# One round of the defaults at 2 devices took 37 s on 2 cores.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD [ROUNDS] [RAW_FILE]" >&2
  exit 2
fi
build=$1 rounds=${2:-2} raw=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/bench/meshdma-bench
mpirun=${MPIRUN:-mpirun}
read -r -a mpirun_args <<<"${MPIRUN_ARGS:-}"
read -r -a sizes <<<"${SIZES:--b 8 -e 16M -f 8}"
ops=${OPS:-"ppermute_call all_reduce all_gather reduce_scatter all_to_all"}
cores=${CORES:-$(nproc)}
counts=()
for n in ${DEVICES:-2 4 8 16}; do
  ((n >= 2 && n <= cores)) && counts+=("$n")
done
if ((${#counts[@]} == 0)); then
  echo "$0: no device count of DEVICES fits the $cores cores" >&2
  exit 2
fi
rows=$(mktemp) out=$(mktemp)
trap 'rm -f "$rows" "$out"' EXIT
start=$SECONDS

# failed COMMAND: a launch that exited non-zero, with its output's end; the
# sweep goes on without its rows, and exits 1 after its summaries.
failures=0
failed() {
  echo "$0: failed: $1" >&2
  tail -5 "$out" >&2
  failures=$((failures + 1))
}

# Step 1: the launches. collective LAUNCH N OP ROUND: one meshdma-bench run
# of N devices, its size rows tagged "LAUNCH N OP ROUND"; LAUNCH is procs
# (N processes of one device) or threads (one process of N devices).
collective() {
  local launch=$1 n=$2 op=$3 round=$4
  local -a cmd=("$mpirun" "${mpirun_args[@]}" --oversubscribe)
  if [[ $launch == procs ]]; then
    cmd+=(-np "$n" -x MESHDMA_DEVICES_PER_PROCESS=1)
  else
    # Unbound: mpirun binds a lone process to one core, which would put
    # every device thread on it.
    cmd+=(--bind-to none -np 1 -x MESHDMA_DEVICES_PER_PROCESS="$n")
  fi
  "${cmd[@]}" "$bench" --collective "$op" "${sizes[@]}" >"$out" 2>&1 ||
    failed "${cmd[*]} $bench --collective $op ${sizes[*]}"
  awk -v t="$launch $n $op $round" '$1 ~ /^[0-9]+$/ { print t, $0 }' \
    "$out" >>"$rows"
}

# fused N ROUND: examples 07 and 06 on N processes; one row per kernel,
# "fused N KERNEL ROUND ratio".
fused() {
  local n=$1 round=$2
  local -a cmd=("$mpirun" "${mpirun_args[@]}" --oversubscribe -np "$n"
    -x MESHDMA_DEVICES_PER_PROCESS=1)
  "${cmd[@]}" "$build/examples/07_collective_matmul" --m 2048 --k 2048 \
    --n 8 --iters 9 --no-check >"$out" 2>&1 ||
    failed "${cmd[*]} 07_collective_matmul"
  "${cmd[@]}" "$build/examples/06_ring_attention" --seq $((256 * n)) \
    --heads 32 --dim 64 --iters 9 --no-check >>"$out" 2>&1 ||
    failed "${cmd[*]} 06_ring_attention"
  awk -v n="$n" -v r="$round" '
    /^all-gather matmul/ { k = "all_gather_matmul" }
    /^matmul reduce-scatter/ { k = "matmul_reduce_scatter" }
    /^ring attention/ { k = "ring_attention" }
    /overlapped \/ max/ { print "fused", n, k, r, $NF }' "$out" >>"$rows"
}

for ((round = 1; round <= rounds; ++round)); do
  for n in "${counts[@]}"; do
    for op in $ops; do
      collective procs "$n" "$op" "$round"
      collective threads "$n" "$op" "$round"
    done
    fused "$n" "$round"
  done
  echo "round $round of $rounds done after $((SECONDS - start)) s" >&2
done
[[ -n $raw ]] && cp "$rows" "$raw"

# Step 2: the summaries.
echo "devices: ${counts[*]}; rounds: $rounds; sizes: ${sizes[*]}"
awk -v counts="${counts[*]}" -f "$here/medians.awk" -f "$here/scale_summary.awk" \
  "$rows"
echo "took $((SECONDS - start)) s; $failures launches failed"
((failures == 0))
