#!/usr/bin/env bash
# Reproduces docs/diloco-vs-ddp.md: DiLoCo (H = 50) vs DDP, 4 islands, equal inner steps,
# same model, data and inner optimizer, both from the same pre-trained model (the DiLoCo
# paper's protocol): configs/pretrain-kjv.yaml, then configs/diloco.yaml and configs/ddp.yaml.
# About 15 minutes on 2 quiet cores.
#   scripts/compare_diloco_ddp.sh [--set key=value ...]   # overrides go to the two compared runs
#   scripts/compare_diloco_ddp.sh --set model.init_from=  # the same comparison from scratch
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
build/atoll simulate configs/pretrain-kjv.yaml --force
for cfg in diloco ddp; do
  build/atoll simulate "configs/$cfg.yaml" --force "$@"
done
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "runs/$1/summary.json"; }
d_loss=$(field diloco-kjv final_val_loss); p_loss=$(field ddp-kjv final_val_loss)
d_bytes=$(field diloco-kjv bytes_sent_total); p_bytes=$(field ddp-kjv bytes_sent_total)
awk -v dl="$d_loss" -v pl="$p_loss" -v db="$d_bytes" -v pb="$p_bytes" 'BEGIN {
  printf "| run | final val loss | bytes sent (all islands) |\n|---|---|---|\n"
  printf "| ddp | %.4f | %.0f |\n| diloco H=50 | %.4f | %.0f |\n", pl, pb, dl, db
  printf "\nDiLoCo loss vs DDP: %+.2f%%; DDP sends %.1fx the bytes of DiLoCo\n", (dl - pl) / pl * 100, pb / db
}'
