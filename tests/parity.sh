#!/usr/bin/env bash
# Runs every parity fixture (tests/parity/<case>: model.snn, input.npy, expected.npz made by the
# frameworks themselves) through the interpreter in float32 mode, and through the compiled CPU backend
# when the build has it, and compares every array bit for bit,
# unless the case has a `tolerance` file with npycmp options: cases with a dense layer keep spikes exact
# and allow |a - b| <= 1e-5 + 1e-6 |b| on membranes, because PyTorch's float32 GEMM sums in another order.
# Usage: parity.sh SNNC NPYCMP PARITY_DIR WORK_DIR
set -u
snnc=$1 npycmp=$2 dir=$3 work=$4
mkdir -p "$work"
pass=0 fail=0
backends=(interp)
"$snnc" --help | grep -q -- '--backend=cpu' && backends+=(cpu)
for backend in "${backends[@]}"; do
for case in "$dir"/*/; do
  name=$(basename "$case")
  [ -f "$case/model.snn" ] || continue
  out="$work/$name.$backend.npz"
  cmp_args=(--exact '*')
  [ -f "$case/tolerance" ] && read -r -a cmp_args < "$case/tolerance"
  log="$work/$name.$backend.log"
  if "$snnc" --run --backend="$backend" "$case/model.snn" --input="$case/input.npy" --precision=f32 \
       --output="$out" -q && "$npycmp" "${cmp_args[@]}" "$out" "$case/expected.npz" >"$log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name ($backend)"
    cat "$log" 2>/dev/null
  fi
done
done
echo "parity (${backends[*]}): $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
