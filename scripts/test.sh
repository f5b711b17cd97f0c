#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest (all labels).
#   scripts/test.sh                 # everything
#   scripts/test.sh -L cli          # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
# Each test binary runs its tests one process at a time; two cores -> two at once.
ctest --output-on-failure -j "${ATOLL_TEST_JOBS:-2}" "$@"
