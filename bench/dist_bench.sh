#!/usr/bin/env bash
# Distributed throughput on one machine: the llama-125m preset, 4 sequences of 256 tokens per step
# in all, bfloat16, trained by 1 rank x 2 threads (the reference) and by 2 ranks x 1 thread with
# FSDP, data parallelism and ZeRO-1 (OpenMPI, shared memory between the ranks). Prints each run's
# JSON line (bench/dist_bench.cc) and a table: throughput against the reference (median step and
# best step), the collectives' time left on the compute thread (waits, progress calls) against
# their whole time (serial), the share hidden, and bytes per step per collective, measured and
# expected.
#
#   bench/dist_bench.sh [STEPS] [key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-3}
shift || true
BUILD_DIR=${BUILD_DIR:-build}
MPIRUN=(mpirun -np 2 --bind-to none --mca btl self,vader,tcp -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
out=$(mktemp -d)
run() {  # NAME LAUNCHER... -- ARGS...
  local name=$1
  shift
  echo "== $name" >&2
  "$@" 2> "$out/$name.log" | tee "$out/$name.json"
}
run one env OMP_NUM_THREADS=2 "$BUILD_DIR/dist_bench" --steps "$STEPS" num_threads=2 "$@"
run fsdp "${MPIRUN[@]}" "$BUILD_DIR/dist_bench" --steps "$STEPS" num_threads=1 "$@"
run dp "${MPIRUN[@]}" "$BUILD_DIR/dist_bench" --steps "$STEPS" num_threads=1 ici_fsdp_parallelism=1 \
  ici_data_parallelism=2 "$@"
run zero1 "${MPIRUN[@]}" "$BUILD_DIR/dist_bench" --steps "$STEPS" num_threads=1 ici_fsdp_parallelism=1 \
  ici_data_parallelism=2 shard_optimizer_over_data=true "$@"
python3 - "$out" << 'EOF'
import json, sys, os
out = sys.argv[1]
rows = {n: json.load(open(os.path.join(out, n + ".json"))) for n in ["one", "fsdp", "dp", "zero1"]}
ref, ref_best = rows["one"]["tokens_per_second"], rows["one"]["best_tokens_per_second"]
mib = lambda b: b / 2**20
print(f"{'run':<6} {'tokens/s':>9} {'vs 1x2':>7} {'best':>7} {'step s':>7} {'waits s':>7} {'progress s':>10} "
      f"{'serial s':>8} {'hidden':>6}  {'all-gather MiB (exp.)':>21} {'reduce-scatter MiB (exp.)':>25} "
      f"{'all-reduce MiB (exp.)':>21}")
for n, r in rows.items():
    b, e = r["bytes"], r["expected_bytes"]
    print(f"{n:<6} {r['tokens_per_second']:>9.1f} {r['tokens_per_second'] / ref:>6.1%} "
          f"{r['best_tokens_per_second'] / ref_best:>6.1%} {r['step_seconds']:>7.3f} {r['blocked_seconds']:>7.3f} "
          f"{r['progress_seconds']:>10.3f} {r['serial_blocked_seconds']:>8.3f} {r['hidden_share']:>6.1%}  "
          f"{mib(b['all_gather']):>9.1f} ({mib(e['all_gather']):>8.1f}) "
          f"{mib(b['reduce_scatter']):>12.1f} ({mib(e['reduce_scatter']):>8.1f}) "
          f"{mib(b['all_reduce']):>9.1f} ({mib(e['all_reduce']):>8.1f})")
EOF
