#!/usr/bin/env bash
# Chaos test of resuming: a training run with frequent asynchronous checkpoints is SIGKILLed at
# random moments and started again with the same command each time, on one rank and on two ranks
# (mpirun -np 2, both ranks and mpirun killed at once, as a lost machine would be). After every kill,
# each checkpoint folder under its final name (<step>/) must be whole: its manifest parses and lists
# files of the sizes it says (a half-written one may only exist as <step>.tmp/). At the end, after a
# last uninterrupted start, the run's loss trace must equal an uninterrupted run's bit for bit, every
# step present, and no <step>.tmp/ may be left.
#
#   scripts/chaos.sh [KILLS]     KILLS per rank count (default 50; CI runs 10)
#
# Environment: TESSERA_BINARY (default build/tessera), CHAOS_RANKS (default "1 2"), CHAOS_STEPS
# (default 40), CHAOS_SEED (default: random; printed so that a failure can be replayed),
# CHAOS_DIR (default: a fresh temporary folder, removed on success).
#
# Time, measured on 2 cores shared with other builds: 10 kills per rank count 59 s in all (CI);
# 50 kills 671 s (153 s on one rank, 517 s on two).
set -euo pipefail
cd "$(dirname "$0")/.."

KILLS=${1:-50}
BIN=${TESSERA_BINARY:-build/tessera}
RANKS=${CHAOS_RANKS:-"1 2"}
STEPS=${CHAOS_STEPS:-40}
SEED=${CHAOS_SEED:-$RANDOM}
RANDOM=$SEED
[ -x "$BIN" ] || { echo "chaos: $BIN is not built (cmake --build build --target tessera)" >&2; exit 2; }
BIN=$(realpath "$BIN")
WORK=${CHAOS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tessera-chaos-XXXXXX")}
mkdir -p "$WORK"
echo "chaos: $KILLS kills per rank count ($RANKS), $STEPS steps, seed $SEED, in $WORK"

mpirun_cmd() {  # the options of tests/dist/dist_test_util.h: loopback only, no binding
  local np=$1
  local s="mpirun -np $np --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo"
  s+=" --mca oob_tcp_if_include lo --mca plm_rsh_agent false -x OMP_NUM_THREADS=1"
  [ "$(id -u)" -eq 0 ] && s+=" --allow-run-as-root"
  echo "$s"
}

# The training command of run $2 on $1 ranks: a tiny model, a checkpoint every 2 steps, written in
# the background while the next steps run, and every step's loss in the metrics file.
train_cmd() {
  local np=$1 run=$2 launcher=""
  [ "$np" -gt 1 ] && launcher="$(mpirun_cmd "$np") "
  echo "${launcher}$BIN train configs/base.yml model_name=llama-test run_name=$run" \
    "base_output_directory=$WORK metrics_file=$WORK/$run.jsonl max_target_length=32" \
    "per_device_batch_size=2 steps=$STEPS learning_rate_schedule_steps=$STEPS log_period=1" \
    "enable_checkpointing=true async_checkpointing=true checkpoint_period=2 num_threads=1" \
    "device_peak_tflops=1 enable_tensorboard=false"
}

# Every <step>/ folder under the run's checkpoints is whole (manifest parses, files have its sizes).
check_checkpoints() {
  python3 - "$WORK/$1/checkpoints" "${2:-}" <<'PY'
import json, os, re, sys
root, final = sys.argv[1], sys.argv[2] == "final"
bad = []
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name)
    if re.fullmatch(r"\d+", name):
        try:
            m = json.load(open(os.path.join(path, "manifest.json")))
            for f, e in m["files"].items():
                size = os.path.getsize(os.path.join(path, f))
                if size != e["bytes"]:
                    bad.append(f"{path}/{f}: {size} bytes, the manifest says {e['bytes']}")
        except Exception as ex:  # missing or unparsable manifest, missing file
            bad.append(f"{path}: {ex!r}")
    elif final and name.endswith(".tmp"):
        bad.append(f"{path}: left behind after the run completed")
for b in bad:
    print("chaos: half-written checkpoint:", b)
sys.exit(1 if bad else 0)
PY
}

# The loss of every step in run $2's metrics equals run $1's, bit for bit (each line of a step logged
# twice, before and after a resume, must agree too).
compare_losses() {
  python3 - "$WORK/$1.jsonl" "$WORK/$2.jsonl" "$STEPS" <<'PY'
import json, struct, sys
def losses(path):
    out = {}
    for line in open(path):
        if line.strip():
            j = json.loads(line)
            out.setdefault(j["step"], []).append(struct.pack("<d", j["learning/loss"]))
    return out
a, b, steps = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
bad = [s for s in range(steps) if s not in b or s not in a or any(x != a[s][0] for x in b[s])]
for s in bad[:10]:
    print(f"chaos: step {s}: uninterrupted {a.get(s)}, after kills {b.get(s)}")
print(f"chaos: {steps - len(bad)} of {steps} steps match bit for bit")
sys.exit(1 if bad else 0)
PY
}

for np in $RANKS; do
  start=$SECONDS start_ns=$(date +%s%N)
  straight="straight-np$np" chaos="chaos-np$np"
  $(train_cmd "$np" "$straight") > "$WORK/$straight.log" 2>&1 ||
    { echo "chaos: the uninterrupted run failed:"; tail -20 "$WORK/$straight.log"; exit 1; }
  run_ms=$(( ($(date +%s%N) - start_ns) / 1000000 + 1 ))
  echo "chaos: np=$np uninterrupted run: $run_ms ms"
  for ((k = 1; k <= KILLS; k++)); do
    # A new session, so that the kill reaches mpirun and every rank at once.
    setsid $(train_cmd "$np" "$chaos") >> "$WORK/$chaos.log" 2>&1 &
    pid=$!
    delay_ms=$(( (RANDOM * 32768 + RANDOM) % run_ms ))  # uniform over an uninterrupted run's time
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -KILL -- "-$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    echo "--- chaos: SIGKILL $k after ${delay_ms} ms" >> "$WORK/$chaos.log"
    check_checkpoints "$chaos" || { echo "chaos: after kill $k (log: $WORK/$chaos.log)"; exit 1; }
  done
  $(train_cmd "$np" "$chaos") >> "$WORK/$chaos.log" 2>&1 ||
    { echo "chaos: the last, uninterrupted start failed:"; tail -20 "$WORK/$chaos.log"; exit 1; }
  check_checkpoints "$chaos" final || exit 1
  compare_losses "$straight" "$chaos" || { echo "chaos: logs in $WORK"; exit 1; }
  echo "chaos: np=$np: $KILLS kills, resumed each time: $((SECONDS - start)) s"
done
[ -n "${CHAOS_DIR:-}" ] || rm -rf "$WORK"
