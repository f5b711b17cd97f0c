#!/usr/bin/env bash
# Inner-step throughput: atoll's C++ GPT step on flat buffers vs the same loop in PyTorch Python
# (same libtorch 1.13, same shapes, same thread count). Prints both JSON lines and a table.
#
#   scripts/bench_inner.sh                       # quickstart GPT, threads = nproc
#   scripts/bench_inner.sh --model cnn --batch 32  # the FedAvg CNN on 28x28 images (also lenet5)
#   THREADS=1 REPEATS=3 scripts/bench_inner.sh --steps 30
#   ATOLL_BUILD_DIR=build-bench scripts/bench_inner.sh
#
# Extra arguments go to both programs (--model --layers --heads --dim --seq-len --vocab --batch
# --warmup --steps --device --seed). The two run alternately REPEATS times; the best run of
# each is reported (the machine may be busy with other work).
#
# On a busy machine libgomp's spinning worker threads starve OpenBLAS's own threads: with
# 2 threads on 2 shared cores a step took ~3x longer than with OMP_WAIT_POLICY=PASSIVE (the
# environment passes through to both programs, so the comparison stays fair either way).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${ATOLL_BUILD_DIR:-build}
THREADS=${THREADS:-$(nproc)}
REPEATS=${REPEATS:-2}
PYTHON=/usr/bin/python3
# atoll itself runs with passive OpenMP waiting (src/cli/main.cpp); give both sides the same.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# --- build the C++ side ---------------------------------------------------------------------
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target inner_step_bench -j"$(nproc)" >/dev/null

# --- PyTorch Python (Debian python3-torch: the same libtorch as libtorch-dev) ----------------
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench_inner: python3-torch is missing; as root run: apt-get install -y python3-torch" >&2
    exit 1
  fi
  echo "bench_inner: installing python3-torch" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null; }
fi

# --- run, alternating -------------------------------------------------------------------------
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < REPEATS; r++)); do
  "$BUILD/tests/bench/inner_step_bench" --threads "$THREADS" "$@" | tee -a "$results"
  "$PYTHON" tests/bench/inner_step_pytorch.py --threads "$THREADS" "$@" | tee -a "$results"
done

"$PYTHON" - "$results" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
best = {}
for r in runs:
    if r["impl"] not in best or r["tokens_per_s"] > best[r["impl"]]["tokens_per_s"]:
        best[r["impl"]] = r
a, p = best["atoll"], best["pytorch"]
print()
print(f"{a.get('model', 'gpt')} inner step: {a['params']:,} params, batch {a['batch']} x seq {a['seq_len']}, "
      f"{a['threads']} threads, {a['device']}, best of {len(runs) // 2}")
print(f"{'':<22}{'tokens/s':>12}{'ms/step':>10}{'loss':>8}")
print(f"{'atoll (C++)':<22}{a['tokens_per_s']:>12,.0f}{a['ms_per_step']:>10.1f}{a['final_loss']:>8.3f}")
print(f"{'PyTorch (Python)':<22}{p['tokens_per_s']:>12,.0f}{p['ms_per_step']:>10.1f}{p['final_loss']:>8.3f}")
print(f"{'ratio atoll/pytorch':<22}{a['tokens_per_s'] / p['tokens_per_s']:>11.2f}x")
PY
