#!/usr/bin/env bash
# examples/c-api end to end: build the Fashion-MNIST MLP into a model.so, compile the C example with
# the system compiler (it needs only snn.h, libdl and zlib), run it and the Python ctypes example
# (when numpy is installed), and require the accuracy snnc itself reports on the same images.
# Usage: examples.sh SNNC SOURCE_ROOT WORK_DIR
set -eu
snnc=$1 root=$2 work=$3
mkdir -p "$work"
cd "$work"
n=600
"$snnc" "$root/examples/fmnist_mlp.snn" -o fmnist_mlp.so
${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -I "$root/runtime" \
  "$root/examples/c-api/classify.c" -o classify -ldl -lz
want=$("$snnc" --run -q --jit "$root/examples/fmnist_mlp.snn" --data=fashion-mnist --limit=$n \
  --batch=100 --report=json | sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p')
want=$(printf '%.4f' "$want")
./classify ./fmnist_mlp.so --limit=$n --batch=100 | tee c.out
grep -q "^accuracy $want " c.out || { echo "FAIL: the C example's accuracy is not snnc's ($want)"; exit 1; }
grep -q "^spikes s1: [1-9]" c.out || { echo "FAIL: no spike counts"; exit 1; }
if python3 -c 'import numpy' 2> /dev/null; then
  python3 "$root/examples/c-api/classify.py" ./fmnist_mlp.so --limit=$n --batch=100 | tee py.out
  grep -q "^accuracy $want " py.out || { echo "FAIL: the Python example's accuracy is not snnc's"; exit 1; }
  diff <(grep spikes c.out) <(grep spikes py.out)
else
  echo "numpy is not installed: the Python example is not run"
fi
echo PASS
