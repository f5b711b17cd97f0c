#!/usr/bin/env bash
# Prepares atoll's default data sets into data/ (git-ignored), from Debian packages only:
#   data/kjv.txt                    King James Bible, plain UTF-8 text (bible-kjv)
#   data/fashion-mnist/*-ubyte      Fashion-MNIST IDX files (dataset-fashion-mnist)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data

if [ ! -s data/kjv.txt ]; then
  command -v bible >/dev/null || { echo "prepare_data: 'bible' not found (package bible-kjv)" >&2; exit 1; }
  tmp=$(mktemp data/kjv.txt.XXXXXX)
  bible -f gen1:1-rev22:21 </dev/null | sed 's/^[^ ]* //' >"$tmp"
  [ "$(wc -c <"$tmp")" -gt 1000000 ] || { echo "prepare_data: KJV text too small" >&2; rm -f "$tmp"; exit 1; }
  mv "$tmp" data/kjv.txt
  echo "prepare_data: wrote data/kjv.txt ($(wc -c <data/kjv.txt) bytes)"
fi

src=/usr/share/datasets/fashion-mnist
mkdir -p data/fashion-mnist
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [ ! -s "data/fashion-mnist/$f" ]; then
    [ -f "$src/$f.gz" ] || { echo "prepare_data: $src/$f.gz not found (package dataset-fashion-mnist)" >&2; exit 1; }
    gzip -dc "$src/$f.gz" >"data/fashion-mnist/$f.tmp"
    mv "data/fashion-mnist/$f.tmp" "data/fashion-mnist/$f"
  fi
done
