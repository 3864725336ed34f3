#!/usr/bin/env bash
# Every model family learns: each family's published preset, scaled down to the size of the main
# job's pd-en-small (4 layers, width 256, 4 query heads of 64, MLP 704, the 8192-piece pd-en BPE
# vocabulary; MoE: 8 experts of 256, top-2), trained on the pd-en corpus with the main job's
# recipe (8 x 256 tokens, learning rate 3e-3, AdamW, float32), then evaluated on the held-out
# validation text. Every block option of the preset is kept: Gemma's soft caps, (1 + w) norms and
# local/global layers, GPT-2's learned positions and biases, Qwen's QKV bias or QK-norm, GPT-OSS's
# sinks, YaRN and clamped SwiGLU, tied embeddings where the preset ties them. A tied model
# divides its logits by sqrt(emb_dim) (normalize_embedding_logits=true, MaxText's default for
# training from scratch: its embedding starts as N(0, 1), so undivided logits start near +-16).
#
# Prints one row per family: parameters, the first step's loss, the last logged training loss and
# the validation loss, and fails when a family's validation loss is not LEARN_DROP (default 2.0)
# nats below its first step's loss and below ln 8192 = 9.01 (a model that has learned nothing).
# Prepares the corpus, tokenizer and shards as scripts/main.sh does (reusing them when they exist).
# The s/step column is the last logged step's time, for orientation only (not a benchmark).
#
#   bench/families_pd_en.sh [STEPS]          (default 300 steps per family)
#   FAMILIES="gemma2-2b gpt2-124m" bench/families_pd_en.sh 100
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${1:-300}
DROP=${LEARN_DROP:-2.0}
FAMILIES=${FAMILIES:-llama2-7b mistral-7b llama3.2-1b gemma-7b gemma2-2b gemma3-1b gpt2-124m qwen2.5-1.5b \
qwen3-0.6b mixtral-8x7b gpt-oss-20b}
T="$BUILD_DIR/tessera"

[ -f data/pd-en/validation/persuasion.txt ] || scripts/prepare_corpus.sh data/pd-en
common=(configs/base.yml tokenizer_type=sentencepiece tokenizer_path=data/pd-en-bpe8k.model)
[ -f data/pd-en-bpe8k.model ] || "$T" train-tokenizer "${common[@]}" model_name=pd-en-small dataset_type=text \
  dataset_path=data/pd-en/train tokenizer_model_type=bpe
for split in train validation; do
  [ -f "data/pd-en-tokens/$split/manifest.json" ] ||
    "$T" prepare-data "${common[@]}" model_name=pd-en-small dataset_type=text dataset_path="data/pd-en/$split" \
      data_output_path="data/pd-en-tokens/$split"
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $STEPS steps of 8 x 256 tokens per family"
printf '| %-13s | %11s | %10s | %10s | %10s | %8s |\n' preset parameters "first loss" "last loss" "eval loss" "s/step"
printf '| %-13s | %11s | %10s | %10s | %10s | %8s |\n' --- ---: ---: ---: ---: ---:
failed=()
for preset in $FAMILIES; do
  extra=()
  case $preset in mixtral-* | gpt-oss-*) extra=(num_experts=8 num_experts_per_tok=2 base_moe_mlp_dim=256) ;; esac
  "$T" show-config configs/base.yml model_name="$preset" | grep -q '^logits_via_embedding: true' &&
    extra+=(normalize_embedding_logits=true)
  log="$out/$preset.log"
  if ! "$T" train "${common[@]}" model_name="$preset" override_model_config=true base_emb_dim=256 \
    base_num_query_heads=4 base_num_kv_heads=2 head_dim=64 base_mlp_dim=704 base_num_decoder_layers=4 \
    vocab_size=8192 "${extra[@]}" run_name="learn-$preset" base_output_directory="$out/runs" dataset_type=tokens \
    dataset_path=data/pd-en-tokens/train eval_dataset_path=data/pd-en-tokens/validation eval_interval="$STEPS" \
    eval_steps=40 steps="$STEPS" per_device_batch_size=8 max_target_length=256 log_period=10 learning_rate=3e-3 \
    warmup_steps_fraction=0.05 dtype=float32 remat_policy=none enable_checkpointing=false \
    enable_tensorboard=false prompt= > "$log" 2>&1; then
    echo "$preset: training failed; the log's end:" && tail -5 "$log"
    failed+=("$preset")
    continue
  fi
  params=$(grep -o -m1 '^plan: [0-9]* parameters' "$log" | grep -o '[0-9][0-9]*' || echo '?')
  first=$(grep -o -m1 'loss: [0-9.]*' "$log" | grep -o '[0-9.]*$')
  last=$(grep -o 'loss: [0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
  eval=$(grep -o 'avg_loss [0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$' || echo '?')
  step_s=$(grep -o 'seconds: [0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$' || echo '?')
  printf '| %-13s | %11s | %10s | %10s | %10s | %8s |\n' "$preset" "$params" "$first" "$last" "$eval" "$step_s"
  awk -v e="$eval" -v f="$first" -v d="$DROP" 'BEGIN { exit !(e != "?" && e + d < f + 0 && e < log(8192)) }' ||
    failed+=("$preset")
done
if ((${#failed[@]})); then
  echo "families_pd_en: did not learn (validation loss not $DROP nats below the first loss): ${failed[*]}"
  exit 1
fi
echo "families_pd_en: every family learned (validation loss $DROP nats or more below its first loss)"
