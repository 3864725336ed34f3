#!/usr/bin/env bash
# Runs every libFuzzer harness (fuzz/*_fuzz.cc) for a bounded time, each from its committed seed
# corpus (fuzz/corpus/<name>/, never modified here: new inputs go to a scratch copy). Fails when
# any harness finds a crash, a sanitizer report, a leak, an input slower than 10 s or one that needs
# over 2 GB; the input is saved as $FUZZ_ARTIFACTS/<name>/crash-* (or leak-*, timeout-*, oom-*).
#
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]     (default 30 s each, build-asan)
#   FUZZ_RUNS=1000000 scripts/fuzz.sh 0       a fixed number of executions instead of a time
#   FUZZ_ONLY="config http" scripts/fuzz.sh   a subset
#   FUZZ_JOBS=1 scripts/fuzz.sh               one harness at a time (default: one per core)
#
# The build folder must be configured with -DTESSERA_FUZZ=ON (clang++); scripts/hardening.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
BUILD_DIR=${2:-build-asan}
ARTIFACTS=${FUZZ_ARTIFACTS:-$BUILD_DIR/fuzz-artifacts}
names=${FUZZ_ONLY:-$(ls fuzz/*_fuzz.cc | sed 's|fuzz/\(.*\)_fuzz.cc|\1|')}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One harness: its summary line (or failure lines) on stdout, non-zero when it failed.
fuzz_one() {
  local name=$1 bin="$BUILD_DIR/fuzz/fuzz_$1" work log limit
  [ -x "$bin" ] || { echo "fuzz: $bin is not built"; return 1; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz-$name-XXXXXX")
  mkdir -p "$ARTIFACTS/$name"
  limit=(-max_total_time="$SECONDS_EACH")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  log="$ARTIFACTS/$name/fuzz.log"
  local rc=0
  if "$bin" "${limit[@]}" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$ARTIFACTS/$name/" "$work" "fuzz/corpus/$name" > "$log" 2>&1; then
    echo "fuzz: $name: $(grep -o 'number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') executions," \
      "$(grep -o 'average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')/s, no crash"
  else
    echo "fuzz: $name FAILED (log: $log):"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
    rc=1
  fi
  rm -rf "$work"
  return "$rc"
}

# The harnesses run FUZZ_JOBS at a time (default: one per core; each is one process on one core),
# so the job takes SECONDS x harnesses / cores. Each writes its summary to a file of its own; the
# summaries are printed in order once all have finished.
jobs_at_once=${FUZZ_JOBS:-$(nproc)}
out=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz-summary-XXXXXX")
for name in $names; do
  while (($(jobs -rp | wc -l) >= jobs_at_once)); do wait -n || true; done
  (fuzz_one "$name" > "$out/$name.txt" 2>&1 || touch "$out/$name.failed") &
done
wait
failed=()
for name in $names; do
  cat "$out/$name.txt"
  [ -e "$out/$name.failed" ] && failed+=("$name")
done
rm -rf "$out"
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
