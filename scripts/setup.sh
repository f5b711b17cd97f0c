#!/usr/bin/env bash
# atoll setup: installs missing Debian packages (as root), prepares the default data into
# data/, configures and builds into build/. Idempotent and fast when nothing changed.
#
#   scripts/setup.sh            # everything
#   ATOLL_BUILD_TYPE=Debug scripts/setup.sh
#   ATOLL_SKIP_BUILD=1 scripts/setup.sh   # packages + data only
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# --- packages -----------------------------------------------------------------------------
PACKAGES=(
  g++ cmake ninja-build ccache pkg-config make
  libtorch-dev libgloo-dev libzmq3-dev cppzmq-dev libzstd-dev libxxhash-dev
  libcli11-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas0-pthread
  clang libclang-rt-14-dev
  bible-kjv bible-kjv-text dataset-fashion-mnist
  python3-matplotlib    # atoll report: plots (scripts/report.py)
  python3-torch         # tests/checkpoint: torch.load of `atoll export` files (~9 MB download)
  slurmd slurmctld slurm-client munge   # tests/run/slurm_test: a local Slurm (scripts/slurm_local.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "atoll setup: missing Debian packages: ${missing[*]}" >&2
    echo "atoll setup: run as root:  apt-get update && $cmd" >&2
    exit 1
  fi
  echo "atoll setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has empty package lists; refresh them once before installing.
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# libtorch calls whatever libblas.so.3 is selected; the reference BLAS is ~50x slower than
# OpenBLAS here. Select OpenBLAS (pthread variant, see docs/benchmarks.md) when it is not.
if [ "$(id -u)" -eq 0 ]; then
  for alt in libblas.so.3 liblapack.so.3; do
    want=$(update-alternatives --list "$alt-x86_64-linux-gnu" 2>/dev/null | grep openblas-pthread | head -n1 || true)
    cur=$(readlink -f "/etc/alternatives/$alt-x86_64-linux-gnu" 2>/dev/null || true)
    if [ -n "$want" ] && [ "$cur" != "$(readlink -f "$want")" ]; then
      update-alternatives --quiet --set "$alt-x86_64-linux-gnu" "$want"
    fi
  done
fi

# --- data ---------------------------------------------------------------------------------
scripts/prepare_data.sh

# --- build --------------------------------------------------------------------------------
[ "${ATOLL_SKIP_BUILD:-0}" = 1 ] && exit 0
BUILD_TYPE=${ATOLL_BUILD_TYPE:-Release}
JOBS=${ATOLL_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$ROOT/.ccache}
if [ ! -f build/build.ninja ] || ! grep -q "CMAKE_BUILD_TYPE:STRING=$BUILD_TYPE" build/CMakeCache.txt 2>/dev/null; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${ATOLL_CMAKE_ARGS:-}
fi
cmake --build build -j "$JOBS"
