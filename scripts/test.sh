#!/usr/bin/env bash
# Installs what is missing, builds, fuzzes the wire-frame decoder for ATOLL_FUZZ_SECONDS
# (default 60; 0 skips it), then runs every test with ctest (all labels). Any test failure
# or fuzzer crash exits non-zero.
#   scripts/test.sh                 # everything
#   scripts/test.sh -L cli          # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Fuzz first, so that ctest's summary is what the run ends with.
if [ "${ATOLL_FUZZ_SECONDS:-60}" != 0 ]; then
  FUZZ_SECONDS="${ATOLL_FUZZ_SECONDS:-60}" scripts/fuzz.sh
fi
cd build
# ctest runs each test as its own process; two cores -> two at once.
ctest --output-on-failure -j "${ATOLL_TEST_JOBS:-2}" "$@"
