#!/usr/bin/env bash
# The README's torch program under each launcher meshdma supports, none of
# which needs MPI inside meshdma: torchrun on one node, torchrun as two
# nodes of one machine (forced apart, so meshdma's TCP path carries the
# data), and mpirun (torch's env:// filled from MPI's variables).
#   launch_test.sh MODE PROGRAM PYTHON [MPIEXEC FLAGS...]
# MODE: torchrun | nnodes2 | mpirun. Passes when every rank prints
# LAUNCH_EXPECT (default: the README program's OK line); LAUNCH_ARGS are the
# program's arguments; LAUNCH_NP the ranks of torchrun and mpirun (default
# 2; nnodes2 always runs 2).
set -euo pipefail
mode=$1 program=$2 python=$3
shift 3
expect=${LAUNCH_EXPECT:-all_reduce and all_gather OK}
read -r -a args <<<"${LAUNCH_ARGS:-}"
np=${LAUNCH_NP:-2}
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# torch 1.13's torchrun on Python 3.11 needs --redirects/--tee spelled out
# (its defaults parse to None there).
run=("$python" -m torch.distributed.run --redirects 1 --tee 1)
case "$mode" in
  torchrun)
    "${run[@]}" --nproc_per_node "$np" --master_addr 127.0.0.1 --master_port "$port" \
      "$program" "${args[@]}" >"$log" 2>&1 ;;
  nnodes2)
    for node in 0 1; do
      MESHDMA_FORCE_INTERHOST=1 MESHDMA_DEBUG=INFO MESHDMA_DEBUG_SUBSYS=transport "${run[@]}" --nnodes 2 --node_rank "$node" \
        --nproc_per_node 1 --master_addr 127.0.0.1 --master_port "$port" \
        "$program" "${args[@]}" >>"$log" 2>&1 &
    done
    np=2
    wait ;;
  mpirun)
    "$@" -np "$np" -x MASTER_PORT="$port" "$python" "$program" "${args[@]}" \
      >"$log" 2>&1 ;;
  *) echo "launch_test.sh: unknown mode $mode" >&2; exit 2 ;;
esac
cat "$log"
# Occurrences, not lines: mpirun may join two ranks' lines into one.
oks=$({ grep -o "$expect" "$log" || true; } | wc -l)
if [ "$oks" -ne "$np" ]; then
  echo "launch_test.sh $mode: $oks of $np ranks said OK" >&2
  exit 1
fi
if [ "$mode" = nnodes2 ] && ! grep -q "by tcp" "$log"; then
  echo "launch_test.sh nnodes2: the ranks did not reach each other by tcp" >&2
  exit 1
fi
echo "launch_test.sh $mode: $np of $np ranks OK"
