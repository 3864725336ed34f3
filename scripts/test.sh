#!/usr/bin/env bash
# The README's test command: set up, build, and run the whole test suite with CTest.
# Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# Interoperability tests run Python tools from the set-up's virtual environment.
[ -x .venv-test/bin/python ] && export TESSERA_PYTHON="$PWD/.venv-test/bin/python"
# OMP_NUM_THREADS is left to the environment; tests that compare thread counts set them explicitly.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1 --timeout 600
