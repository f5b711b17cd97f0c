#!/usr/bin/env bash
# Reproduces the papers' comparisons of docs/reproductions.md:
#
#   scripts/reproduce.sh                 # every configs/sweeps/paper-*.yaml
#   scripts/reproduce.sh diloco-scaling  # one (or several) by name: paper-NAME.yaml
#   scripts/reproduce.sh --list          # the names, with their runs
#
# For each: `atoll sweep configs/sweeps/paper-NAME.yaml` (it skips the runs already finished
# in sweeps/paper-NAME/, so a second call finishes what an interrupted one left and, when
# every run is there, only redraws the report), then scripts/reproduction.py rewrites the
# section's generated block of docs/reproductions.md (tables) and copies its plots to
# docs/reproductions/NAME/. Extra arguments after `--` go to `atoll sweep` (e.g. -- -j 1).
# Each sweep takes up to about an hour on a 2-core machine (docs/reproductions.md).
set -euo pipefail
cd "$(dirname "$0")/.."

names=()
sweep_args=()
list=0
while (($#)); do
  case "$1" in
    --list) list=1 ;;
    --) shift; sweep_args=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) names+=("$1") ;;
  esac
  shift
done

if ((${#names[@]} == 0)); then
  for f in configs/sweeps/paper-*.yaml; do
    n=$(basename "$f" .yaml)
    names+=("${n#paper-}")
  done
fi
for n in "${names[@]}"; do
  if [[ ! -f "configs/sweeps/paper-$n.yaml" ]]; then
    echo "reproduce.sh: no configs/sweeps/paper-$n.yaml (known: $(cd configs/sweeps && ls paper-*.yaml | sed 's/^paper-//; s/\.yaml$//' | tr '\n' ' '))" >&2
    exit 2
  fi
done

scripts/setup.sh >&2  # packages, data and the build, each only when missing

if ((list)); then
  for n in "${names[@]}"; do
    printf '%-20s %s\n' "$n" "$(build/atoll sweep "configs/sweeps/paper-$n.yaml" --dry-run | head -1)"
  done
  exit 0
fi

for n in "${names[@]}"; do
  echo "== $n: configs/sweeps/paper-$n.yaml" >&2
  status=0
  build/atoll sweep "configs/sweeps/paper-$n.yaml" "${sweep_args[@]}" || status=$?
  if ((status == 130)); then exit 130; fi  # interrupted: the next call goes on from here
  if ((status == 2)); then exit 2; fi      # the file was refused before anything ran
  # A failed or diverged run is reported by the sweep and shows in the table as such.
  python3 scripts/reproduction.py "$n" "sweeps/paper-$n" docs/reproductions.md
done
