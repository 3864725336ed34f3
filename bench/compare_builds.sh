#!/usr/bin/env bash
# The same benchmarks from two builds, interleaved round by round on the same machine, so that a
# change to the engine can be held against the commit before it: training (llama-125m, 2 x 1024
# tokens per step, float32 and bfloat16), decoding (decode_bench --quick on the 125m model),
# distributed training (dist_bench.sh: 1 rank x 2 threads, FSDP, DP, ZeRO-1 on 2 ranks) and serving
# (serve_bench, pd-en-small, 1 and 4 slots). Every program's own output is printed, prefixed by
# the build it came from; compare a figure only with the same figure of the other build in the
# same round.
#
#   bench/compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=$1
AFTER=$2
ROUNDS=${3:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
train() {  # BUILD DTYPE
  "$1/train_bench" --warmup 1 --steps 3 model_name=llama-125m per_device_batch_size=2 \
    max_target_length=1024 dtype="$2" remat_policy=none num_threads=2 2>/dev/null
}
for round in $(seq "$ROUNDS"); do
  for build in "$BEFORE" "$AFTER"; do
    tag="[round $round, $(basename "$build")]"
    for dtype in float32 bfloat16; do
      echo "== $tag train_bench $dtype"
      train "$build" "$dtype"
    done
    echo "== $tag decode_bench --quick --models 125m"
    "$build/decode_bench" --quick --models 125m 2>/dev/null | grep -E "^\|" || true
    echo "== $tag serve_bench --model pd-en-small --slots 1,4"
    "$build/serve_bench" --model pd-en-small --requests 16 --new 64 --slots 1,4 2>/dev/null | grep -E "^\|" || true
    echo "== $tag dist_bench.sh 2 1"
    BUILD_DIR=$build bench/dist_bench.sh 2 1 2>/dev/null | grep -E "^\||^[a-zA-Z]" | grep -v '^{' || true
  done
done
