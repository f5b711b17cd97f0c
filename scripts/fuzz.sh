#!/usr/bin/env bash
# Fuzzes the frame decoder (tests/fuzz/frame_fuzz.cpp) with libFuzzer for a bounded time.
# Exits non-zero on a crash, a sanitizer report or a leak; the reproducer lands in
# build-fuzz/artifacts/.
#
#   scripts/fuzz.sh                       # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   scripts/fuzz.sh --regenerate-corpus   # rewrite tests/fuzz/corpus/ (after a format change)
#
# Needs Debian's clang (clang-14) and its compiler-rt (libclang-rt-14-dev: libFuzzer, ASan,
# UBSan runtimes); installs them when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(clang libclang-rt-14-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "fuzz: missing Debian packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DATOLL_FUZZ=ON -DATOLL_BUILD_TESTS=OFF -DATOLL_BUILD_BENCHMARKS=OFF -DATOLL_PCH=OFF
fi

if [ "${1:-}" = "--regenerate-corpus" ]; then
  cmake --build build-fuzz --target make_corpus -j "${ATOLL_JOBS:-$(nproc)}"
  rm -f tests/fuzz/corpus/*
  build-fuzz/tests/fuzz/make_corpus tests/fuzz/corpus
  exit 0
fi

cmake --build build-fuzz --target frame_fuzz -j "${ATOLL_JOBS:-$(nproc)}"

# libFuzzer adds what it finds to the first corpus directory; keep the committed seed corpus
# read-only by working on a copy.
work=build-fuzz/corpus
mkdir -p "$work" build-fuzz/artifacts
cp -n tests/fuzz/corpus/* "$work"/ 2>/dev/null || true
seconds=${FUZZ_SECONDS:-60}
echo "fuzz: frame_fuzz for ${seconds} s"
build-fuzz/tests/fuzz/frame_fuzz "$work" \
  -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1
