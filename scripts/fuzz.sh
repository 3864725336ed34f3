#!/usr/bin/env bash
# Runs every libFuzzer harness (fuzz/*_fuzz.cc) for a bounded time, each from its committed seed
# corpus (fuzz/corpus/<name>/, never modified here: new inputs go to a scratch copy). Fails when
# any harness finds a crash, a sanitizer report, a leak, an input slower than 10 s or one that needs
# over 2 GB; the input is saved as $FUZZ_ARTIFACTS/<name>/crash-* (or leak-*, timeout-*, oom-*).
#
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]     (default 30 s each, build-asan)
#   FUZZ_RUNS=1000000 scripts/fuzz.sh 0       a fixed number of executions instead of a time
#   FUZZ_ONLY="config http" scripts/fuzz.sh   a subset
#
# The build folder must be configured with -DTESSERA_FUZZ=ON (clang++); scripts/hardening.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
BUILD_DIR=${2:-build-asan}
ARTIFACTS=${FUZZ_ARTIFACTS:-$BUILD_DIR/fuzz-artifacts}
names=${FUZZ_ONLY:-$(ls fuzz/*_fuzz.cc | sed 's|fuzz/\(.*\)_fuzz.cc|\1|')}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for name in $names; do
  bin="$BUILD_DIR/fuzz/fuzz_$name"
  [ -x "$bin" ] || { echo "fuzz: $bin is not built"; failed+=("$name"); continue; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz-$name-XXXXXX")
  mkdir -p "$ARTIFACTS/$name"
  limit=(-max_total_time="$SECONDS_EACH")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  log="$ARTIFACTS/$name/fuzz.log"
  if "$bin" "${limit[@]}" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$ARTIFACTS/$name/" "$work" "fuzz/corpus/$name" > "$log" 2>&1; then
    echo "fuzz: $name: $(grep -o 'number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') executions," \
      "$(grep -o 'average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')/s, no crash"
  else
    echo "fuzz: $name FAILED (log: $log):"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
    failed+=("$name")
  fi
  rm -rf "$work"
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
