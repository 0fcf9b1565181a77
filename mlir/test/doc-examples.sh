#!/usr/bin/env bash
# doc-examples.sh DOC: runs the worked example of docs/mlir.md and checks the
# output the page shows.
# 1. Each command of the page's code blocks (a line starting with "$ ",
#    continued by "\"; build/mlir/ is MESHDMA_TOOLS_DIR; mpirun lines are
#    skipped) runs from the repository root and must print the line the page
#    shows after it, times ("N ms") aside.
# 2. The two broken kernels the page describes (the final wait for the local
#    copy removed; one handshake wait too many) must print every diagnostic
#    line the page shows for them.
set -eu -o pipefail
doc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$doc")/.." && pwd)
tools=${MESHDMA_TOOLS_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
times() { sed -E 's/[0-9]+(\.[0-9]+)? ms/N ms/g'; }
cd "$root"

# 1. Commands and the line shown after each, as "command<TAB>expected".
awk '
  /^```/ { block = !block; cmd = ""; want = 0; next }
  !block { next }
  want { if ($0 !~ /^\$ /) print cmd "\t" $0; want = 0; cmd = "" }
  /^\$ / || cont {
    line = cont ? $0 : substr($0, 3)
    cont = sub(/\\$/, "", line)
    cmd = cmd line
    if (!cont) want = 1
  }' "$doc" >"$tmp/commands"
ran=0
while IFS=$'\t' read -r cmd expected; do
  [[ $cmd == *mpirun* ]] && continue
  cmd=${cmd//build\/mlir\//$tools/}
  out=$(bash -o pipefail -c "$cmd" 2>&1) || { echo "$out"; echo "FAILED: $cmd" >&2; exit 1; }
  if ! grep -qF -- "$(times <<<"$expected")" <(times <<<"$out"); then
    echo "$out"
    echo "FAILED: the page shows '$expected' after: $cmd" >&2
    exit 1
  fi
  ran=$((ran + 1))
done <"$tmp/commands"
[[ $ran -ge 2 ]] || { echo "FAILED: only $ran commands found in $doc" >&2; exit 1; }

# 2. The broken kernels.
kernel=mlir/test/kernels/all_gather.mlir
wait_line=$(grep -n "meshdma.dma_wait_recv %local, %own" "$kernel" | cut -d: -f1)
sed 's/@N@/4/g' "$kernel" | sed "${wait_line},$((wait_line + 1))d" >"$tmp/all_gather.mlir"
out=$(cd "$tmp" && "$tools/meshdma-opt" all_gather.mlir -o /dev/null \
  --pass-pipeline='builtin.module(meshdma-verify-protocol)' 2>&1 || true)
hs_line=$(grep -n "meshdma.sem_wait %hs" "$kernel" | cut -d: -f1)
sed 's/@N@/4/g' "$kernel" |
  sed "${hs_line}a\\  meshdma.sem_wait %hs, %c1 : !reg" >"$tmp/all_gather.mlir"
out+=$'\n'$(cd "$tmp" && "$tools/meshdma-opt" all_gather.mlir -o /dev/null \
  --pass-pipeline='builtin.module(meshdma-verify-protocol)' 2>&1 || true)
shown=0
while IFS= read -r line; do
  if ! grep -qF -- "$line" <<<"$out"; then
    echo "$out"
    echo "FAILED: the page shows '$line'" >&2
    exit 1
  fi
  shown=$((shown + 1))
done < <(grep -E '^all_gather\.mlir:[0-9]+:[0-9]+: (error|note)' "$doc")
[[ $shown -ge 4 ]] || { echo "FAILED: only $shown diagnostics found" >&2; exit 1; }
echo "docs/mlir.md: $ran commands and $shown diagnostics as shown"
