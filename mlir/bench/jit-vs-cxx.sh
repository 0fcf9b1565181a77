#!/usr/bin/env bash
# jit-vs-cxx.sh MESHDMA_RUN [ITERATIONS]: times the tutorial's ring all-gather
# and right permute, JIT-compiled from the dialect, against the runtime's C++
# all_gather (ring) and ppermute, with 1 MiB per device (a 2048x128 f32
# block). Device count: MESHDMA_DEVICES_PER_PROCESS (default 2) in one
# process. Prints meshdma-run's per-call times and their ratio. The
# all-gather runs twice: as in the tutorial (own block placed by a local DMA)
# and with the own block placed by memref.copy, as the C++ all_gather does
# with memmove (the same algorithm on both sides).
set -eu -o pipefail
run=$1 iterations=${2:-200}
here=$(cd "$(dirname "$0")" && pwd)
kernels=$here/../test/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MESHDMA_DEVICES_PER_PROCESS=${MESHDMA_DEVICES_PER_PROCESS:-2}
for k in all_gather right_permute; do
  sed -e 's/8x128/2048x128/g' -e 's/\[1, 8, 128\]/[1, 2048, 128]/g' \
    "$kernels/$k.mlir" > "$tmp/$k.mlir"
done
python3 - "$tmp/all_gather.mlir" "$tmp/all_gather_copy.mlir" <<'PY'
import sys
s = open(sys.argv[1]).read()
blk = "memref<2048x128xf32, strided<[128, 1], offset: ?>>"
start = ("  meshdma.dma_start %in : memref<2048x128xf32>\n"
         "      -> %own : " + blk + ", recv %local : !dma\n")
wait = "  meshdma.dma_wait_recv %local, %own\n      : !dma, " + blk + "\n"
assert start in s and wait in s
s = s.replace(start, "  memref.copy %in, %own : memref<2048x128xf32> to " + blk + "\n")
open(sys.argv[2], "w").write(s.replace(wait, ""))
PY
echo "== ring all-gather (tutorial: own block by local DMA), 1 MiB per device"
"$run" "$tmp/all_gather.mlir" --kernel=all_gather -D N=devices \
  --reference=all_gather --iterations="$iterations"
echo "== ring all-gather (own block by memref.copy), 1 MiB per device"
"$run" "$tmp/all_gather_copy.mlir" --kernel=all_gather -D N=devices \
  --reference=all_gather --iterations="$iterations"
echo "== right permute (ppermute i -> i+1), 1 MiB per device"
"$run" "$tmp/right_permute.mlir" --kernel=right_permute -D N=devices \
  --reference=shift:1 --iterations="$iterations"
