#!/usr/bin/env bash
# sweep.sh KERNEL.mlir FIRST LAST [MAX_MS]: instantiates the kernel template
# (@N@ = ring size) for every size in [FIRST, LAST] and requires
# meshdma-verify-protocol to prove it. With MAX_MS, the check of the largest
# size must take less than MAX_MS milliseconds (the pass's own timing).
set -eu -o pipefail
kernel=$1 first=$2 last=$3 max_ms=${4:-}
opt="${MESHDMA_TOOLS_DIR:?}/meshdma-opt"
for ((n = first; n <= last; ++n)); do
  out=$(sed "s/@N@/$n/g" "$kernel" |
        "$opt" --mlir-print-op-on-diagnostic=false -o /dev/null \
          --pass-pipeline='builtin.module(meshdma-verify-protocol{stats=true})' 2>&1) || {
    echo "$out" >&2
    echo "FAILED: $(basename "$kernel") on $n devices" >&2
    exit 1
  }
  if ! grep -q "protocol verified: $n devices" <<<"$out"; then
    echo "$out" >&2
    echo "FAILED: no verification remark for $n devices" >&2
    exit 1
  fi
done
line=$(grep -o "protocol verified: .*" <<<"$out")
echo "$(basename "$kernel") on $last devices: $line"
if [[ -n $max_ms ]]; then
  ms=$(sed -E 's/.*, ([0-9.]+) ms.*/\1/' <<<"$line")
  awk -v ms="$ms" -v max="$max_ms" 'BEGIN { exit !(ms < max) }' || {
    echo "FAILED: $ms ms >= $max_ms ms" >&2
    exit 1
  }
fi
