// The race and protocol checks over the upstream mesh programs the JIT runs
// (mlir/test/mesh), bufferized as meshdma-run --from-mesh does, on their 2x2
// mesh: each is proved, as is each one-axis program expanded into DMA rings.
// RUN: for p in %S/../mesh/*.mlir; do \
// RUN:   for expand in "" meshdma-expand-collectives,; do \
// RUN:     case "$expand$(basename $p)" in meshdma*_xy.mlir) continue;; esac; \
// RUN:     meshdma-opt $p --pass-pipeline='builtin.module(convert-mesh-to-meshdma,one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},buffer-results-to-out-params)' \
// RUN:       | sed 's/attributes {meshdma.mesh/attributes {meshdma.kernel, meshdma.mesh/' \
// RUN:       | meshdma-opt -o /dev/null --pass-pipeline="builtin.module(${expand}meshdma-verify-protocol{stats=true})" 2>&1 \
// RUN:       | grep "protocol verified: 4 devices" >/dev/null || { echo "not proved: $expand $p"; exit 1; }; \
// RUN:   done; done
