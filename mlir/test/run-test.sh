#!/usr/bin/env bash
# Runs the `// RUN:` lines of one test file, a small subset of lit: `%s` is
# the file, `%S` its directory, `%t` a fresh temporary directory, and a line
# ending in `\` continues on the
# next RUN line. Each command runs under `bash -o pipefail`; the test fails
# on the first command that fails. MESHDMA_TOOLS_DIR and LLVM_TOOLS_DIR are
# put on PATH (meshdma-opt, FileCheck, not).
set -u
file=$1
dir=$(cd "$(dirname "$file")" && pwd)
export PATH="${MESHDMA_TOOLS_DIR:?}:${LLVM_TOOLS_DIR:?}:$PATH"
cmds=()
current=""
while IFS= read -r line; do
  body=${line#*RUN:}
  body=${body# }
  if [[ $body == *\\ ]]; then
    current+="${body%\\} "
    continue
  fi
  cmds+=("$current$body")
  current=""
done < <(grep -E '^[[:space:]]*//[[:space:]]*RUN:' "$file")
if [[ ${#cmds[@]} -eq 0 ]]; then
  echo "no RUN lines in $file" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cmd in "${cmds[@]}"; do
  cmd=${cmd//%s/$file}
  cmd=${cmd//%t/$tmp}
  cmd=${cmd//%S/$dir}
  echo "RUN: $cmd"
  if ! bash -o pipefail -c "$cmd"; then
    echo "FAILED: $cmd" >&2
    exit 1
  fi
done
