#!/usr/bin/env bash
# The README's main command: set up, build the pd-en corpus from Debian packages, train a
# SentencePiece tokenizer on it, tokenize it into shards, train the pd-en-small Llama for a few
# minutes on all cores with a validation loss every 250 steps, then complete three prompts from its
# final checkpoint with `tessera decode` (KV cache, nucleus sampling, the prompts batched).
# Each preparation step is skipped when its output exists; the training run starts fresh.
#
#   scripts/main.sh [STEPS]     (default 1000 steps of 8 x 256 tokens, about 5 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${1:-1000}
scripts/setup.sh
T="$BUILD_DIR/tessera"

[ -f data/pd-en/validation/persuasion.txt ] || scripts/prepare_corpus.sh data/pd-en
common=(configs/base.yml model_name=pd-en-small tokenizer_type=sentencepiece
        tokenizer_path=data/pd-en-bpe8k.model)
[ -f data/pd-en-bpe8k.model ] ||
  "$T" train-tokenizer "${common[@]}" dataset_type=text dataset_path=data/pd-en/train tokenizer_model_type=bpe
for split in train validation; do
  [ -f "data/pd-en-tokens/$split/manifest.json" ] ||
    "$T" prepare-data "${common[@]}" dataset_type=text dataset_path="data/pd-en/$split" \
      data_output_path="data/pd-en-tokens/$split"
done

rm -rf runs/pd-en-small runs/pd-en-small-decode
"$T" train "${common[@]}" run_name=pd-en-small dataset_type=tokens dataset_path=data/pd-en-tokens/train \
  eval_dataset_path=data/pd-en-tokens/validation eval_interval=250 eval_steps=40 \
  steps="$STEPS" per_device_batch_size=8 max_target_length=256 log_period=20 learning_rate=3e-3 \
  warmup_steps_fraction=0.05 dtype=float32 remat_policy=none checkpoint_period="$STEPS" \
  prompt="And it came to pass" decode_sampling_strategy=weighted decode_sampling_temperature=0.7

printf '%s\n' "And it came to pass" "It is a truth universally acknowledged" "Call me Ishmael." \
  > runs/pd-en-small/prompts.txt
"$T" decode "${common[@]}" run_name=pd-en-small-decode load_parameters_path="runs/pd-en-small/checkpoints/$STEPS" \
  prompts_file=runs/pd-en-small/prompts.txt per_device_batch_size=3 max_prefill_predict_length=32 \
  max_target_length=128 decode_sampling_strategy=nucleus decode_sampling_nucleus_p=0.9 \
  decode_sampling_temperature=0.8 dtype=float32
