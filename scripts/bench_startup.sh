#!/usr/bin/env bash
# Start-up of atoll's commands: `atoll --help`, `atoll validate` and a 1-step `atoll simulate`
# of the quickstart, best of REPEATS (default 5) runs, alternated with another binary
# (OLD, default build/atoll-engine: the engine alone, i.e. one program that loads libtorch
# before main(), which is what `atoll` was before the front end).
#
#   scripts/bench_startup.sh
#   OLD=/path/to/an/older/atoll REPEATS=7 scripts/bench_startup.sh
#
# For simulate, "over the run" is the process's wall time minus the run's own wall_time_s
# (summary.json: from simulate() entering to its end), i.e. what the process spends before
# and after the run: loading libraries, parsing, exec'ing the engine, exiting.
set -euo pipefail
cd "$(dirname "$0")/.."

NEW=${NEW:-build/atoll}
OLD=${OLD:-build/atoll-engine}
REPEATS=${REPEATS:-5}
CONFIG=${CONFIG:-configs/quickstart.yaml}
for b in "$NEW" "$OLD"; do
  [ -x "$b" ] || { echo "bench_startup: $b is not built (ninja -C build atoll)" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

/usr/bin/python3 - "$NEW" "$OLD" "$REPEATS" "$CONFIG" "$out" <<'PY'
import json, subprocess, sys, time

new, old, repeats, config, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
cases = [
    ("--help", ["--help"]),
    ("validate", ["validate", config]),
    ("simulate, 1 step", ["simulate", config, "--quiet", "--force", "--set", "train.steps=1",
                          "--set", "train.eval_every=0", "--set", "run.out_dir=" + out, "--set", "run.name=startup"]),
]
best = {}
for r in range(repeats):
    for label, args in cases:
        for side, binary in (("new", new), ("old", old)) if r % 2 == 0 else (("old", old), ("new", new)):
            t0 = time.perf_counter()
            p = subprocess.run([binary] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                sys.exit(f"bench_startup: {binary} {' '.join(args)} failed:\n{p.stderr.decode()}")
            over = wall
            if args[0] == "simulate":
                with open(f"{out}/startup/summary.json") as f:
                    over = wall - json.load(f)["wall_time_s"]
            key = (label, side)
            best[key] = min(best.get(key, (1e9, 1e9)), (over, wall))
print(f"best of {repeats}, alternated; new = {new}, old = {old}")
print(f"{'command':<18} {'new (s)':>9} {'old (s)':>9}   (simulate: seconds over the run's own wall time; total in brackets)")
for label, _ in cases:
    n, o = best[(label, "new")], best[(label, "old")]
    if label.startswith("simulate"):
        print(f"{label:<18} {n[0]:>9.3f} {o[0]:>9.3f}   [{n[1]:.3f} / {o[1]:.3f}]")
    else:
        print(f"{label:<18} {n[0]:>9.3f} {o[0]:>9.3f}")
PY
