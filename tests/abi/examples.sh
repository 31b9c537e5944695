#!/usr/bin/env bash
# examples/c-api end to end: build the Fashion-MNIST MLP into a model.so, compile the C example with
# the system compiler (it needs only snn.h, libdl and zlib), run it and the Python ctypes example
# (when numpy is installed), and require the accuracy snnc itself reports on the same images. Then
# the training examples: the MLP built with --train into a library carrying its training step,
# trained by train.c and train.py (snn_trainer_*) for an epoch over 2,560 images, which must give
# the same weights, bit for bit, as `snnc --train --no-shuffle` on the same images.
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
# training through the library
"$snnc" --train "$root/examples/fmnist_mlp.snn" -o fmnist_mlp_train.so
${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -I "$root/runtime" \
  "$root/examples/c-api/train.c" -o train -ldl -lz
./train ./fmnist_mlp_train.so --limit=2560 --batch=128 --test-limit=1000 -o c-train.safetensors \
  | tee c-train.out
"$snnc" --train "$root/examples/fmnist_mlp.snn" --data=fashion-mnist --limit=2560 --batch=128 \
  --no-shuffle --test-limit=1000 -q -o snnc-train.safetensors
cmp c-train.safetensors snnc-train.safetensors ||
  { echo "FAIL: train.c's weights are not snnc --train's"; exit 1; }
grep -q "^test accuracy 0\.8[5-9]" c-train.out || { echo "FAIL: train.c's test accuracy"; exit 1; }
if python3 -c 'import numpy' 2> /dev/null; then
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$root/examples/c-api/train.py" \
    ./fmnist_mlp_train.so --limit=2560 --batch=128 --test-limit=1000 -o py-train.safetensors \
    | tee py-train.out
  cmp py-train.safetensors snnc-train.safetensors ||
    { echo "FAIL: train.py's weights are not snnc --train's"; exit 1; }
  diff <(grep "test accuracy" c-train.out) <(grep "test accuracy" py-train.out)
fi
# a conv net whose dense layer (6272 -> 600, 15 MB) the library's step reads as the trainer holds
# it (no packed copy), its first conv computed again for the backward, batchnorm recomputed in
# the scan: the same weights as snnc --train
printf 'model mem {\n  timesteps 2\n  seed 3\n  input image : f32[1, 28, 28]\n  c1 = conv2d(image, 32, 3, pad = 1, bias = false)\n  s1 = IF(batchnorm(c1), v_th = 0.5)\n  f = dense(flatten(maxpool2d(s1, 2)), 600, bias = false)\n  q = IF(dense(LIF(f, tau = 2.0, v_th = 0.3), 10), v_th = 0.2)\n  output r = mean(q)\n}\n' > mem.snn
"$snnc" --train mem.snn --cuda-arch=none -o mem_train.so
strings mem_train.so | grep -q '^train_buf f.weight weight f32 0 3763200 [0-9]* 0 0 1 0$' ||
  { echo "FAIL: the library's step keeps a packed copy of f.weight"; exit 1; }
./train ./mem_train.so --limit=128 --batch=32 --test-limit=64 -o c-mem.safetensors | tee c-mem.out
"$snnc" --train mem.snn --data=fashion-mnist --limit=128 --batch=32 --no-shuffle --test-limit=64 -q \
  -o snnc-mem.safetensors
cmp c-mem.safetensors snnc-mem.safetensors ||
  { echo "FAIL: train.c's weights of the conv net are not snnc --train's"; exit 1; }
echo PASS
