#!/usr/bin/env bash
# Installs the Debian packages that Tessera's build, tests and benchmarks need, then configures and
# builds Tessera in ./build. Idempotent: apt-get runs only when a package is missing, and the build
# is incremental. Run as root or with sudo available.
#
#   scripts/setup.sh            # packages + Release build in ./build
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail

cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  ccache                 # compiler cache: a rebuild of an unchanged file (a fresh clone, CI) is a copy
  libdnnl-dev            # oneDNN: the GEMM library behind ops::matmul
  libyaml-cpp-dev        # configs
  nlohmann-json3-dev     # manifests, metrics
  libcli11-dev           # command line
  libfmt-dev             # formatting
  libzstd-dev            # compressed shards
  libpcre2-dev           # byte-level BPE pre-tokeniser
  libunwind-dev libdw-dev  # stack traces: unwinding (libunwind), symbols and lines (elfutils)
  libsentencepiece-dev sentencepiece
  libopenmpi-dev openmpi-bin
  iproute2 util-linux    # the two-host test: ip netns, veth links, unshare (tests/dist)
  slurm-wlm              # the Slurm test: a private slurmctld + slurmd, srun (tests/dist/slurm_one_node.sh)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-pip  # test-only tools (TensorBoard's reader, the openai client)
  # The hardening jobs (scripts/hardening.sh): clang's sanitizers and libFuzzer, its OpenMP,
  # clang-tidy and clang-format.
  clang libclang-rt-14-dev libomp-dev clang-tidy clang-format
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Test-only Python tools from PyPI, in a virtual environment of the checkout (.venv-test, ignored
# by git): TensorBoard's own event reader checks Tessera's event files, and the official `openai`
# client checks `tessera serve`. Tessera itself never runs Python. A test whose Python package is
# missing reports itself skipped, saying why.
if [ ! -x .venv-test/bin/python ]; then
  python3 -m venv .venv-test || echo "setup: cannot create .venv-test (python3-venv missing?)"
fi
for py_package in tensorboard openai; do
  if [ -x .venv-test/bin/python ] && ! .venv-test/bin/python -c "import $py_package" 2>/dev/null; then
    .venv-test/bin/python -m pip install --quiet --disable-pip-version-check "$py_package" ||
      echo "setup: could not install the $py_package Python package; the tests that use it will be skipped"
  fi
done

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # ccache with base_dir at the checkout hashes paths relative to it, so a clone in another folder
  # (CI's) reuses these objects; hash_dir off for the same reason where there is debug info.
  launcher=()
  command -v ccache > /dev/null &&
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache")
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON "${launcher[@]}"
fi
# The compiler's output is kept for CI's warnings job (scripts/hardening.sh); ccache replays a
# cached object's warnings, so a clean clone's log holds every file's.
cmake --build "$BUILD_DIR" -j "$(nproc)" 2>&1 | tee "$BUILD_DIR/build.log"
