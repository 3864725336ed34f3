#!/usr/bin/env bash
# Training throughput, Tessera against PyTorch on the same model, shapes and machine, in one run:
# the llama-125m preset (emb 768, 12 layers, 12 heads, mlp 2048, vocab 32000), batch 8 x 1024
# tokens, float32 and bfloat16. Tessera runs first and prints its calibrated peaks; PyTorch's MFU
# divides by the same peaks. Needs a Python with torch and transformers (PYTHON=..., default
# python3); without one only Tessera runs, and the script says so.
#
#   bench/run_train_bench.sh [STEPS] [REMAT_POLICY]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-10}
REMAT=${2:-none}
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-python3}
THREADS=${OMP_NUM_THREADS:-$(nproc)}
out=$(mktemp -d)
for dtype in float32 bfloat16; do
  echo "== tessera $dtype (remat_policy=$REMAT, $STEPS steps after 2 warm-up)"
  "$BUILD_DIR/train_bench" --warmup 2 --steps "$STEPS" dtype=$dtype remat_policy=$REMAT num_threads=$THREADS \
    2> "$out/tessera_$dtype.log" | tee "$out/tessera_$dtype.json"
  grep -E "^device:|^plan:" "$out/tessera_$dtype.log" | sed 's/^/   /'
done
peak_f32=$(sed -E 's/.*"peak_gflops": ([0-9.]+).*/\1/' "$out/tessera_float32.json")
peak_bf16=$(sed -E 's/.*"peak_gflops": ([0-9.]+).*/\1/' "$out/tessera_bfloat16.json")
if "$PYTHON" -c "import torch, transformers" 2>/dev/null; then
  echo "== pytorch (same model and shapes; MFU against Tessera's calibrated peaks $peak_f32 / $peak_bf16 GFLOP/s)"
  "$PYTHON" tools/torch_llama_bench.py --steps "$STEPS" --threads "$THREADS" --peak-f32 "$peak_f32" \
    --peak-bf16 "$peak_bf16"
else
  echo "== pytorch: not run ($PYTHON cannot import torch and transformers)"
fi
