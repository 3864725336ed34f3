#!/usr/bin/env bash
# Training speed, Tessera against MaxText itself on JAX's CPU backend, on the same machine in one
# run: MaxText's pre-training entry point and `tessera train` on the same model shape (the
# llama-125m preset: emb 768, 12 layers, 12 heads, head_dim 64, mlp 2048, vocab 32000; or, for a
# case named moe-..., the gpt-oss-tiny preset: 4 layers of width 256, 4/2 heads of 64 with sinks,
# 16 experts of 256, top-2, vocab 8192, which MaxText runs as its gpt-oss-20b block with those
# sizes on its dense-matmul MoE path, sparse_matmul=false, as its grouped kernels need a TPU),
# batch, sequence, dtype and remat policy, synthetic data, AdamW, no checkpoints. The two
# alternate case by case over the rounds, so drift of the machine reaches both.
#
# Per run it reports the steady-state step time (the median of steps >= 2: MaxText logs step N
# after dispatching step N+1, so its first two figures are not a step's time), both programs'
# logged TFLOP/s/device (both count MaxText's model FLOPs: 3 x forward, remat not counted),
# tokens/s/device, the peak RSS (/usr/bin/time) and the time from launch to the first completed
# step; then per case the ratio of Tessera's tokens/s to MaxText's. Tessera's start-up line gives
# the calibrated peak (MFU and HFU are against it).
#
#   bench/maxtext_bench.sh [--setup] [--rounds N] [--steps N] [--cases "f32-b2-full bf16-b2-full f32-b8-none"]
#
#   --setup    build the MaxText venv first (python3.12 -m venv; pip install 'maxtext[tpu]' 'jax[cpu]'),
#              never part of the tests; MAXTEXT_VENV names it (default .venv-maxtext)
#   cases      [moe-]DTYPE-bBATCH-REMAT with DTYPE f32 or bf16; every case runs at max_target_length 1024
#
# Each run is cut off after RUN_LIMIT_S seconds (default 1800) and reported as such.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=2
STEPS=5
CASES="f32-b2-full bf16-b2-full f32-b8-none"
SETUP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --setup) SETUP=1 ;;
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --cases) CASES=$2; shift ;;
    *) echo "maxtext_bench.sh: unknown argument '$1' (see the header for the usage)" >&2; exit 2 ;;
  esac
  shift
done
((STEPS >= 4)) || { echo "maxtext_bench.sh: --steps must be >= 4 (steps 0 and 1 are not timed)" >&2; exit 2; }
BUILD_DIR=${BUILD_DIR:-build}
VENV=${MAXTEXT_VENV:-.venv-maxtext}
RUN_LIMIT_S=${RUN_LIMIT_S:-1800}
SEQ=1024

if ((SETUP)); then
  # python3.12 from PATH, else from pyenv's versions (whose shim fails without a version chosen).
  PY312=""
  for c in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$c" -c pass 2>/dev/null; then PY312=$c; break; fi
  done
  [[ -n $PY312 ]] || { echo "maxtext_bench.sh: --setup needs python3.12 (MaxText requires it)" >&2; exit 1; }
  "$PY312" -m venv "$VENV"
  # A first install has been seen to end without some of MaxText's dependencies: repeat it until
  # the entry point's imports load (at most three times).
  for _ in 1 2 3; do
    "$VENV/bin/pip" install -q 'maxtext[tpu]' 'jax[cpu]' || true
    "$VENV/bin/python" -c "import jax, pathwaysutils, maxtext" 2>/dev/null && break
  done
fi
PY="$VENV/bin/python"
"$PY" -c "import jax, maxtext" 2>/dev/null ||
  { echo "maxtext_bench.sh: $PY cannot import jax and maxtext (run with --setup, or set MAXTEXT_VENV)" >&2; exit 1; }
[[ -x "$BUILD_DIR/tessera" ]] || { echo "maxtext_bench.sh: no $BUILD_DIR/tessera (build first)" >&2; exit 1; }
MT_CONFIG=$("$PY" -c "import maxtext, os; print(os.path.join(os.path.dirname(maxtext.__file__), 'configs', 'base.yml'))")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The model shape in MaxText's keys (Tessera reads the same from its llama-125m preset).
MT_MODEL=(base_emb_dim=768 base_num_query_heads=12 base_num_kv_heads=12 base_mlp_dim=2048
  base_num_decoder_layers=12 head_dim=64 vocab_size=32000 logits_via_embedding=false enable_dropout=false)
# (MaxText's defaults already are the llama2 decoder block, SwiGLU and RMSNorm.)
# gpt-oss-tiny in MaxText's keys: its gpt-oss-20b block (sinks, YaRN, biases, clamped SwiGLU,
# alternating sliding window) at Tessera's preset's sizes.
MT_MOE=(model_name=gpt-oss-20b override_model_config=true base_emb_dim=256 base_num_query_heads=4
  base_num_kv_heads=2 head_dim=64 base_mlp_dim=256 base_moe_mlp_dim=256 num_experts=16
  num_experts_per_tok=2 base_num_decoder_layers=4 vocab_size=8192 sparse_matmul=false)

# run NAME CMD...: runs CMD under /usr/bin/time with each output line stamped by its arrival time.
run() {
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  set +e
  timeout "$RUN_LIMIT_S" /usr/bin/time -v -o "$out/$name.time" "$@" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  set -e
  echo "$t0" > "$out/$name.t0"
  return "$rc"
}

# summarise NAME: one line of the steady-state figures from the stamped log.
summarise() {
  local name=$1
  python3 - "$out/$name" <<'EOF'
import re, statistics, sys
base = sys.argv[1]
t0 = float(open(base + ".t0").read())
steps, first = {}, None
pat = re.compile(r"completed step: (\d+), seconds: ([0-9.]+), TFLOP/s/device: ([0-9.]+), Tokens/s/device: ([0-9.]+)")
hw = re.compile(r"HW TFLOP/s/device: ([0-9.]+), HFU: ([0-9.]+)%")
peak = None
for line in open(base + ".log", errors="replace"):
    stamp, _, text = line.partition(" ")
    m = pat.search(text)
    if m:
        s = int(m.group(1))
        h = hw.search(text)
        steps[s] = (float(m.group(2)), float(m.group(3)), float(m.group(4)), float(h.group(1)) if h else None)
        if first is None: first = float(stamp) - t0
    p = re.search(r"peak ([0-9.]+) GFLOP/s for (\w+)", text)
    if p: peak = f"{p.group(1)} GFLOP/s {p.group(2)}"
rss = None
try:
    for line in open(base + ".time"):
        if "Maximum resident set size" in line: rss = int(line.split(":")[1]) / 1024 / 1024
except FileNotFoundError:
    pass
steady = [v for s, v in steps.items() if s >= 2]
if not steady:
    print(f"no steady-state steps (see the log: last lines below)")
    sys.exit(0)
med = lambda i: statistics.median(v[i] for v in steady)
hwt = [v[3] for v in steady if v[3] is not None]
print(f"step {med(0):.3f} s | TFLOP/s/device {med(1):.4f}" + (f" (HW {statistics.median(hwt):.4f})" if hwt else "") +
      f" | tokens/s/device {med(2):.1f} | peak RSS {rss:.2f} GiB | first step after {first:.1f} s" +
      (f" | peak {peak}" if peak else ""))
print(f"TOKENS {med(2)}", file=sys.stderr)
EOF
}

echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; MaxText $("$PY" -c 'import importlib.metadata as m; print(m.version("maxtext"), "jax", m.version("jax"))')"
declare -A tok_mt tok_ts
for round in $(seq 1 "$ROUNDS"); do
  for case in $CASES; do
    mt_model=("${MT_MODEL[@]}") ts_model=llama-125m spec=$case
    if [[ $case == moe-* ]]; then mt_model=("${MT_MOE[@]}") ts_model=gpt-oss-tiny spec=${case#moe-}; fi
    IFS=- read -r dt b remat <<< "$spec"
    batch=${b#b}
    dtype=$([[ $dt == bf16 ]] && echo bfloat16 || echo float32)
    common_ts=("dtype=$dtype" weight_dtype=float32 "per_device_batch_size=$batch" "max_target_length=$SEQ"
      "remat_policy=$remat" "steps=$STEPS" dataset_type=synthetic enable_checkpointing=false)
    echo "== round $round, $case: $dtype, batch $batch x $SEQ, remat_policy=$remat, $STEPS steps"
    name=mt-$case-$round
    if run "$name" env JAX_PLATFORMS=cpu "$PY" -m maxtext.trainers.pre_train.train "$MT_CONFIG" hardware=cpu \
      skip_jax_distributed_system=true run_name="$name" base_output_directory="$out/runs" "${mt_model[@]}" \
      "${common_ts[@]}" enable_tensorboard=false; then
      printf '   maxtext: '; s=$(summarise "$name" 2> "$out/$name.tok"); echo "$s"
      tok_mt[$case]="${tok_mt[$case]:-} $(sed -n 's/^TOKENS //p' "$out/$name.tok")"
    else
      echo "   maxtext: failed or cut off after $RUN_LIMIT_S s; its last lines:"; tail -5 "$out/$name.log" | sed 's/^/     /'
    fi
    name=ts-$case-$round
    if run "$name" "$BUILD_DIR/tessera" train configs/base.yml run_name="$name" base_output_directory="$out/runs" \
      "model_name=$ts_model" "${common_ts[@]}" log_period=1 enable_tensorboard=false prompt=; then
      printf '   tessera: '; s=$(summarise "$name" 2> "$out/$name.tok"); echo "$s"
      tok_ts[$case]="${tok_ts[$case]:-} $(sed -n 's/^TOKENS //p' "$out/$name.tok")"
    else
      echo "   tessera: failed or cut off after $RUN_LIMIT_S s; its last lines:"; tail -5 "$out/$name.log" | sed 's/^/     /'
    fi
  done
done
echo "== Tessera's tokens/s over MaxText's (per round, then the median)"
for case in $CASES; do
  python3 - "$case" "${tok_ts[$case]:-}" "${tok_mt[$case]:-}" <<'EOF'
import statistics, sys
case, ts, mt = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
if not ts or not mt or len(ts) != len(mt):
    print(f"   {case}: not every run finished (tessera {ts}, maxtext {mt})")
else:
    r = [a / b for a, b in zip(ts, mt)]
    print(f"   {case}: " + ", ".join(f"{x:.2f}x" for x in r) + f"; median {statistics.median(r):.2f}x")
EOF
done
