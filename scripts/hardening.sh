#!/usr/bin/env bash
# CI's hardening jobs, run by scripts/test.sh after the Release build and its test suite
# (docs/testing.md describes each). Every job is bounded in time; the whole of CI must stay within
# 45 minutes on 2 cores. Each job's time is printed at the end.
#
#   scripts/hardening.sh                  every job
#   HARDENING_JOBS="format tidy" scripts/hardening.sh
#
# Jobs, with the times measured on an idle 2-core Intel Xeon VM (2026-12-03, no ccache, cold
# build folders; docs/testing.md has the table):
#   format  clang-format check of every tracked C++ file                              5 s
#   asan    clang -O1 build with ASan + UBSan + fuzzing coverage (build-asan) of the library, the
#           tests and the harnesses, about 6 min; then the whole suite under it less the per-ISA
#           reruns of test_ops (638 tests with leak detection, then the 38 that start MPI ranks
#           without it), under 3 min
#   fuzz    each of the 8 libFuzzer harnesses 30 s from its seed corpus, 2 at a time  2 min
#   tidy    clang-tidy (.clang-tidy) over the .cc files of src/ a change since
#           .ci/tidy-baseline can affect (tidy_sources), 2 at a time; all: 3.6 min
#   tsan    clang -O1 build with TSan (build-tsan) of the library, test_infer, test_train and
#           test_dist, then the server, scheduler, async checkpointing and communicator tests  3 min
#   warnings  no compiler warning in the Release, ASan and TSan builds' logs (job_warnings)  1 s
#   chaos   scripts/chaos.sh 10: 10 SIGKILLs on 1 rank, 10 on 2 ranks                  1 min
# All of them after the Release build and suite (about 10 min): about 32 min of CI's 45.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${HARDENING_JOBS:-"format asan fuzz tidy tsan warnings chaos"}
RELEASE_BUILD=${BUILD_DIR:-build}
NPROC=$(nproc)
# ccache with base_dir at the checkout hashes paths relative to it, so a clone in another folder
# (CI's) reuses these objects; hash_dir off for the same reason where there is debug info.
launcher=()
command -v ccache > /dev/null &&
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache")
SUPP="$PWD/scripts/sanitizers"
# The CTest names of the tests that launch MPI ranks (mpirun or srun).
MPI_TESTS='^(MpiCommunicator|KillOneRank|TwoHosts|ParallelTraining|ShardedCheckpointTools|ExpertParallel|TensorParallel|HangWatchdog)'

# A clang build folder with the given sanitizers: -O1 (the sanitizers' advice; -O0 makes the test
# suite several times slower) and line tables for the reports.
configure_sanitized() {
  local dir=$1 sanitize=$2
  shift 2
  [ -f "$dir/build.ninja" ] && return 0
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" -DTESSERA_SANITIZE="$sanitize" \
    -DTESSERA_BUILD_BENCH=OFF "${launcher[@]}" "$@" > /dev/null
}

job_format() { scripts/check_format.sh; }

job_asan() {
  configure_sanitized build-asan address,undefined -DTESSERA_FUZZ=ON
  cmake --build build-asan -j "$NPROC" 2>&1 | tee build-asan/build.log
  # The per-ISA reruns of test_ops repeat a suite that already compares every ISA (for_each_isa):
  # left out here for time. Leaks are errors; third-party ones are suppressed (lsan.supp).
  local ubsan=print_stacktrace=1:halt_on_error=1
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS=suppressions=$SUPP/lsan.supp UBSAN_OPTIONS=$ubsan \
    ctest --test-dir build-asan --output-on-failure -j "$NPROC" --timeout 900 -E "^ops_isa_|$MPI_TESTS"
  # The tests that start ranks under mpirun: OpenMPI keeps allocations of components it has
  # dlclose'd by exit, which LeakSanitizer sees in "<unknown module>" frames that no suppression
  # can name, so these run with leak detection off (addressing and undefined behaviour still
  # checked); Tessera's own code on those paths is leak-checked by the one-process tests.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=$ubsan \
    ctest --test-dir build-asan --output-on-failure -j "$NPROC" --timeout 900 -R "$MPI_TESTS"
}

job_fuzz() {
  [ -x build-asan/fuzz/fuzz_config ] || job_asan
  scripts/fuzz.sh "${FUZZ_SECONDS:-30}" build-asan
}

# The library sources clang-tidy must read: those that changed since .ci/tidy-baseline (a commit
# whose whole library passed clang-tidy) or that include a header that changed, from build-asan's
# recorded dependencies; every source when TIDY_ALL=1, when the baseline is missing or not an
# ancestor, when a build or clang-tidy setting changed, or when build-asan has no dependencies
# recorded yet. Prints one regular expression per source for run-clang-tidy, or nothing.
tidy_sources() {
  local all="$PWD/src/tessera/.*\\.cc" base changed
  base=$(cat .ci/tidy-baseline 2>/dev/null || true)
  if [ "${TIDY_ALL:-0}" = 1 ] || [ -z "$base" ] || ! git merge-base --is-ancestor "$base" HEAD 2>/dev/null ||
    ! ninja -C build-asan -t deps > build-asan/tidy-deps.txt 2>/dev/null || ! [ -s build-asan/tidy-deps.txt ]; then
    echo "$all"
    return
  fi
  changed=$(git diff --name-only "$base" --)
  if grep -qE '^(CMakeLists\.txt|cmake/|\.clang-tidy$)' <<< "$changed"; then
    echo "$all"
    return
  fi
  # ninja's dependency listing: "object: #deps ..." then the object's inputs, one an indented line.
  awk -v root="$PWD/" -v changed="$changed" '
    BEGIN { n = split(changed, c, "\n"); for (i = 1; i <= n; ++i) if (c[i] != "") hit[root c[i]] = 1 }
    /^[^ ]/ { src = ""; next }
    /^    / { f = $1; sub(/^\.\.\//, root, f)  # ccache base_dir: paths relative to build-asan
              if (src == "" && f ~ /\.cc$/) src = f; if (f in hit && src ~ ("^" root "src/tessera/")) print src }
  ' build-asan/tidy-deps.txt | sort -u | sed 's/[.]/\\./g'
}

job_tidy() {
  [ -f build-asan/compile_commands.json ] || configure_sanitized build-asan address,undefined -DTESSERA_FUZZ=ON
  # The library's sources (headers through HeaderFilterRegex) that changed since the baseline, or
  # that include a changed header (tidy_sources); tests and tools left out for time. -quiet prints
  # only findings.
  local sources
  mapfile -t sources < <(tidy_sources)
  echo "tidy: ${#sources[@]} source(s)$([ "${sources[0]:-}" = "$PWD/src/tessera/.*\\.cc" ] && echo ": all of src/")"
  ((${#sources[@]})) || return 0
  run-clang-tidy -quiet -j "$NPROC" -p build-asan "${sources[@]}" > build-asan/tidy.log 2>&1 || {
    sed 's/\x1b\[[0-9;]*m//g' build-asan/tidy.log | grep -E "(warning|error):" | sort -u | head -50
    return 1
  }
}

job_tsan() {
  configure_sanitized build-tsan thread -DTESSERA_BUILD_TESTS=ON
  cmake --build build-tsan -j "$NPROC" --target test_infer test_train test_dist tessera 2>&1 | tee build-tsan/build.log
  # One OpenMP thread: libomp is not instrumented, so TSan cannot see its barriers; the threads
  # under test are Tessera's own (connections, scheduler, checkpoint writer, communicator).
  local env=(env OMP_NUM_THREADS=1 TESSERA_BINARY="$PWD/build-tsan/tessera"
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$SUPP/tsan.supp")
  "${env[@]}" build-tsan/test_infer --gtest_filter='ServerHttp.*:ServerScheduler.*:ServerService.*:ServerApi.*'
  "${env[@]}" build-tsan/test_train --gtest_filter='Checkpoints.*'
  "${env[@]}" build-tsan/test_dist --gtest_filter='SingleProcessCommunicator.*:MpiCommunicator.*'
}

# No compiler warnings, in GCC's Release build (scripts/setup.sh's log) or clang's sanitizer builds
# (the logs job_asan and job_tsan leave); a log that is missing is skipped. Each log holds what its
# last build compiled, every file on a clean clone (ccache replays a cached object's warnings).
# One warning is expected of the sanitizer builds and passed over: at -O1 clang does not vectorise,
# so it reports each `#pragma omp simd` loop as "not vectorized" (-Wpass-failed).
job_warnings() {
  local log found=0 lines
  for log in "$RELEASE_BUILD/build.log" build-asan/build.log build-tsan/build.log; do
    [ -f "$log" ] || continue
    lines=$(grep -E '(warning|error): ' "$log" | grep -vF '[-Wpass-failed=transform-warning]' | sort -u || true)
    if [ -n "$lines" ]; then
      echo "$log:"
      head -30 <<< "$lines"
      found=1
    fi
  done
  return "$found"
}

job_chaos() { TESSERA_BINARY="$RELEASE_BUILD/tessera" scripts/chaos.sh "${CHAOS_KILLS:-10}"; }

summary=() failed=0
for job in $JOBS; do
  echo "=== hardening: $job"
  start=$SECONDS
  # The job in a subshell with errexit set again inside it, so that its first failing command
  # stops it and fails it (the subshell would inherit the `set +e` that lets this loop go on, and
  # a job's status would then be only its last command's).
  set +e
  (
    set -e
    "job_$job"
  )
  rc=$?
  set -e
  if ((rc == 0)); then status=ok; else status=FAILED failed=1; fi
  summary+=("$(printf '%-7s %-6s %4d s' "$job" "$status" $((SECONDS - start)))")
done
echo "=== hardening: summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
