#!/usr/bin/env bash
# The README's main command. For now Tessera's main job is the op benchmarks' summary: GEMM against
# oneDNN, attention forward+backward, and the pointwise, norm and loss ops against the memory
# bandwidth measured in the same run. Training replaces this once the training loop lands.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
for b in gemm_bench attention_bench pointwise_bench loss_bench; do
  if [ -x "$BUILD_DIR/$b" ]; then
    echo "=== $b"
    "$BUILD_DIR/$b" --quick
  fi
done
