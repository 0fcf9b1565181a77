#!/usr/bin/env bash
# Where meshdma stands against the MPI it runs on, at every size, in the
# launches the performance targets name: 2 processes of one host (and there
# the reductions of a private input too, launch one_host_private), 2
# processes as 2 hosts over TCP, and 2 simulated hosts x 2 processes. Each
# launch runs ROUNDS times (alternating ops, so a slow spell of a shared
# machine spreads over all of them); the table gives, per size, the median
# vs_mpi (Open MPI's time / meshdma's, above 1 is faster) and its range, and
# on one host the median of_bound (busbw / the concurrent-copy bound), and
# for ops with an in-place form the in-place call's median of_bound too. On
# the simulated hosts it also runs the flat ring from 2 MiB (`--algo ring`,
# launch hosts_2x2_ring) and gives auto's speed-up over it: the median ring
# time over the median auto time.
#
#   bench/status_sweep.sh BENCH [ROUNDS] [RAW_FILE]
#
# BENCH is a meshdma-bench binary; ROUNDS defaults to 3; RAW_FILE, when
# given, keeps every measured row ("launch op round" and the bench's own
# columns). Needs Open MPI's mpirun (`--oversubscribe`, `--mca btl`);
# MPIRUN names another launcher with the same options.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BENCH [ROUNDS] [RAW_FILE]" >&2
  exit 2
fi
bench=$1 rounds=${2:-3} raw=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
mpirun=${MPIRUN:-mpirun}
ops="ppermute_call all_reduce all_gather reduce_scatter all_to_all"
sizes=(-b 8 -e 16M -f 8)
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT

# launch NAME OP ROUND MPIRUN-ARGS...: one run, its size rows tagged.
launch() {
  local name=$1 op=$2 round=$3
  shift 3
  "$mpirun" "$@" "$bench" --collective "$op" "${sizes[@]}" 2>&1 |
    awk -v l="$name" -v o="$op" -v r="$round" \
      '$1 ~ /^[0-9]+$/ { print l, o, r, $0 }' >>"$rows"
}

for ((round = 1; round <= rounds; ++round)); do
  for op in $ops; do
    launch one_host "$op" "$round" -np 2
    launch tcp_2_hosts "$op" "$round" -np 2 --mca btl self,tcp \
      -x MESHDMA_FORCE_INTERHOST=1
  done
  # The reductions of a caller's own buffer (MPI's baseline takes one too).
  sizes=(-b 8 -e 16M -f 8 --input private)
  for op in all_reduce reduce_scatter; do
    launch one_host_private "$op" "$round" -np 2
  done
  sizes=(-b 8 -e 16M -f 8)
  launch hosts_2x2 all_reduce "$round" -np 4 --oversubscribe \
    -x MESHDMA_HOSTS=2
  sizes=(-b 2M -e 16M -f 8 --algo ring)
  launch hosts_2x2_ring all_reduce "$round" -np 4 --oversubscribe \
    -x MESHDMA_HOSTS=2
  sizes=(-b 8 -e 16M -f 8)
done
[[ -n $raw ]] && cp "$rows" "$raw"

echo "launch op size: vs_mpi median [min-max]; of_bound median (one host;" \
  "in place where the op has that form)"
sort -k1,1 -k2,2 -k4,4n "$rows" |
  awk -f "$here/medians.awk" -f "$here/status_summary.awk"
