#!/usr/bin/env bash
# Training throughput, Tessera against PyTorch on the same model, shapes and machine, in one run:
# the llama-125m preset (emb 768, 12 layers, 12 heads, mlp 2048, vocab 32000) or, with
# MODEL=gpt2-124m, GPT-2 small (transformers' GPT2LMHeadModel), batch 8 x 1024 tokens, float32
# and bfloat16 (PRECISIONS=float32 for one). Tessera runs first and prints its calibrated peaks;
# PyTorch's MFU divides by the same peaks. Needs a Python with torch and transformers (PYTHON=..., default
# python3); without one only Tessera runs, and the script says so.
#
#   [MODEL=gpt2-124m] [PRECISIONS=float32] bench/run_train_bench.sh [STEPS] [REMAT_POLICY]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-10}
REMAT=${2:-none}
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-python3}
THREADS=${OMP_NUM_THREADS:-$(nproc)}
MODEL=${MODEL:-llama-125m}
PRECISIONS=${PRECISIONS:-float32,bfloat16}
out=$(mktemp -d)
for dtype in ${PRECISIONS//,/ }; do
  echo "== tessera $MODEL $dtype (remat_policy=$REMAT, $STEPS steps after 2 warm-up)"
  "$BUILD_DIR/train_bench" --warmup 2 --steps "$STEPS" model_name="$MODEL" dtype=$dtype remat_policy=$REMAT num_threads=$THREADS \
    2> "$out/tessera_$dtype.log" | tee "$out/tessera_$dtype.json"
  grep -E "^device:|^plan:" "$out/tessera_$dtype.log" | sed 's/^/   /'
done
peak() { [ -f "$out/tessera_$1.json" ] && sed -E 's/.*"peak_gflops": ([0-9.]+).*/\1/' "$out/tessera_$1.json" || echo 0; }
peak_f32=$(peak float32)
peak_bf16=$(peak bfloat16)
if "$PYTHON" -c "import torch, transformers" 2>/dev/null; then
  echo "== pytorch (same model and shapes; MFU against Tessera's calibrated peaks $peak_f32 / $peak_bf16 GFLOP/s)"
  "$PYTHON" tools/torch_train_bench.py --model "$MODEL" --precisions "$PRECISIONS" --steps "$STEPS" \
    --threads "$THREADS" --peak-f32 "$peak_f32" --peak-bf16 "$peak_bf16"
else
  echo "== pytorch: not run ($PYTHON cannot import torch and transformers)"
fi
