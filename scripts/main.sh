#!/usr/bin/env bash
# The README's main command. Until real data lands, Tessera's main job is:
#   1. the op benchmarks' summary (GEMM against oneDNN called directly; attention forward and
#      backward; norms, activations and losses against the memory bandwidth measured in the same
#      run), each in its short --quick form;
#   2. a short training run of a small Llama on synthetic tokens, logging MaxText-style lines.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh
for b in gemm_bench attention_bench pointwise_bench loss_bench; do
  echo "=== $b --quick"
  "$BUILD_DIR/$b" --quick
done
echo "=== tessera train (llama-test, synthetic tokens)"
"$BUILD_DIR/tessera" train configs/base.yml run_name=main_demo model_name=llama-test steps=30 \
  per_device_batch_size=4 max_target_length=128 log_period=5 dtype=float32 learning_rate=3e-3 \
  enable_checkpointing=false
