#!/usr/bin/env bash
# Runs every parity fixture (tests/parity/<case>: model.snn, input.npy, expected.npz made by the
# frameworks themselves) through the interpreter in float32 mode and compares: spikes exactly, states
# within 1e-6 (|a - b| <= 1e-6 + 1e-6 |b|). Usage: parity.sh SNNC NPYCMP PARITY_DIR WORK_DIR
set -u
snnc=$1 npycmp=$2 dir=$3 work=$4
mkdir -p "$work"
pass=0 fail=0
for case in "$dir"/*/; do
  name=$(basename "$case")
  [ -f "$case/model.snn" ] || continue
  out="$work/$name.npz"
  if "$snnc" --run "$case/model.snn" --input="$case/input.npy" --precision=f32 --output="$out" -q \
       && "$npycmp" --exact spikes "$out" "$case/expected.npz" >"$work/$name.log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name"
    cat "$work/$name.log" 2>/dev/null
  fi
done
echo "parity: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
