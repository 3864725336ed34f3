#!/usr/bin/env bash
# The README's test command: set up, build, and run the whole test suite with CTest, then the
# hardening jobs. Exits non-zero when any test or job fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# Interoperability tests run Python tools from the set-up's virtual environment.
[ -x .venv-test/bin/python ] && export TESSERA_PYTHON="$PWD/.venv-test/bin/python"
# OMP_NUM_THREADS is left to the environment; tests that compare thread counts set them explicitly.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1 --timeout 600
# Then the hardening jobs (sanitizers, fuzzing, clang-tidy, format, chaos; docs/testing.md), which
# CI runs; TESSERA_HARDENING=0 stops after the test suite.
if [ "${TESSERA_HARDENING:-1}" != 0 ]; then
  BUILD_DIR="$BUILD_DIR" scripts/hardening.sh
fi
