#!/usr/bin/env bash
# The conv example with its trained weights (examples/fmnist_conv.safetensors, one epoch of
# SpikingJelly training) predicts what SpikingJelly predicts with the same f16 weights
# (tests/parity/fmnist_conv/predictions.npy, all 10,000 test images): on the first 2,048 images
# (the benchmark set) with the default backend, and on the first 64 with the interpreter in float32;
# every prediction equal, and the accuracy over the 2,048 the framework's.
# Usage: fmnist_conv.sh SNNC NPYCMP SOURCE_ROOT WORK_DIR
set -euo pipefail
snnc=$1 npycmp=$2 root=$3 work=$4
mkdir -p "$work"
want=$(python3 - "$root" <<'PY'
import gzip, os, sys
import numpy as np
root = sys.argv[1]
p = np.load(f"{root}/tests/parity/fmnist_conv/predictions.npy")[:2048]
with gzip.open(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist") + "/t10k-labels-idx1-ubyte.gz", "rb") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)[:2048]
print(f"{(p == y).mean():.6f}")
PY
)
for backend in default interp; do
  args=(--limit=2048) n=2048
  [ "$backend" = interp ] && args=(--backend=interp --precision=f32 --limit=64) n=64
  report=$("$snnc" --run "${args[@]}" "$root/examples/fmnist_conv.snn" \
           --weights="$root/examples/fmnist_conv.safetensors" --data=fashion-mnist --batch=64 \
           --output="$work/rates.npy" --report=json -q | tail -n 1)
  echo "$report"
  "$npycmp" --argmax 1.0 "$work/rates.npy" "$root/tests/parity/fmnist_conv/predictions.npy"
  if [ "$n" = 2048 ]; then
    acc=$(echo "$report" | sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p')
    printf 'accuracy over %s images: snnc %s, framework %s\n' "$n" "$acc" "$want"
    awk -v a="$acc" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.0000005) }'
  fi
done
