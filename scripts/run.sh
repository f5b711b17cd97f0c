#!/usr/bin/env bash
# Runs atoll after making sure it is installed and built:  scripts/run.sh simulate configs/quickstart.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
exec build/atoll "$@"
