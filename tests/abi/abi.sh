#!/usr/bin/env bash
# The C ABI of model.so, end to end: build tests/abi/abi_model.snn into a model.so (weights embedded)
# and one without weights, check what it exports and links against, run abi_test (every error path,
# threads, concurrent sessions, weight reloads) and compare its outputs bit for bit with snnc's own
# run of the same inputs (interpreter, float32). Under valgrind too when it is installed and the
# build is not sanitized.
# Usage: abi.sh SNNC ABI_TEST NPYCMP SOURCE_ROOT WORK_DIR [sanitized]
set -eu
snnc=$1 abi_test=$2 npycmp=$3 root=$4 work=$5 sanitized=${6:-}
mkdir -p "$work"
cd "$work"
model=$root/tests/abi/abi_model.snn
inputs=$root/tests/lit/Inputs

# CPU code only (--cuda-arch=none): what this test checks is the CPU library (devices "cpu")
"$snnc" "$model" --cuda-arch=none -o abi.so
"$snnc" "$model" --cuda-arch=none --no-embed-weights -o abi_noweights.so
"$snnc" --emit=weights "$model" -o abi.safetensors

# only snn_* is exported, and nothing of LLVM or snnc is needed at run time
bad=$(nm -D --defined-only abi.so | awk '{print $3}' | grep -v '^snn_' || true)
if [ -n "$bad" ]; then echo "FAIL: abi.so exports more than snn_*: $bad"; exit 1; fi
nm -D --defined-only abi.so | grep -q ' snn_run$' || { echo "FAIL: snn_run not exported"; exit 1; }
if ldd abi.so | grep -Eiq 'llvm|snn|libz'; then
  echo "FAIL: abi.so depends on:"; ldd abi.so; exit 1
fi

# 11 samples: batches of 3 leave a short one; values in [0, 1] for the Poisson encoder
python3 "$inputs/mknpy.py" a.npy --shape 11,2,5,5 --values 0.9,0.1,0.7,0.3,1.0,0.55,0.2,0.8,0.05
python3 "$inputs/mknpy.py" b.npy --shape 11,5,4 --values 1.5,-0.5,2.5,0.25,0.0,3.0,-1.0
python3 - <<'PY'
import zipfile
with zipfile.ZipFile("inputs.npz", "w", zipfile.ZIP_STORED) as z:
    z.write("a.npy", "a.npy")
    z.write("b.npy", "b.npy")
PY

"$snnc" --run -q --backend=interp --precision=f32 "$model" --input=inputs.npz --batch=3 \
  --output=ref.npz
run=("$abi_test" ./abi.so ./abi_noweights.so abi.safetensors inputs.npz out.npz)
# with NVRTC, the model with CUDA code too: where no GPU can be had (no driver), "auto" is the CPU
if "$snnc" --version | grep -q '^nvrtc: [0-9]'; then
  "$snnc" "$model" --cuda-arch=sm_80 -o abi_cuda.so
  SNN_CUDA_DRIVER=/nonexistent/libcuda.so.1 "${run[@]}" ./abi_cuda.so
fi
"${run[@]}"
"$npycmp" --exact '*' out.npz ref.npz

# lossless 16-bit weights (the narrow-weights pass): a 2 MiB dense weight of f16 values is stored
# in f16; the library refuses weights loaded later that f16 would change
printf 'model exact {\n  timesteps 3\n  input x : f32[1024]\n  d = dense(x, 512)\n  output r = count(LIF(d, tau = 2.0))\n}\n' > exact.snn
python3 - <<'PY'
import json, struct
n = 512 * 1024
w = [0.0015 * (1 + ((k * 37) % 11) / 10) for k in range(n)]
def save(path, dt, vals):
    body = struct.pack("<%d%s" % (n, "e" if dt == "F16" else "f"), *vals)
    bias = struct.pack("<512f", *([-0.25] * 512))
    h = {"d.weight": {"dtype": dt, "shape": [512, 1024], "data_offsets": [0, len(body)]},
         "d.bias": {"dtype": "F32", "shape": [512], "data_offsets": [len(body), len(body) + len(bias)]}}
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + body + bias)
save("exact16.safetensors", "F16", w)
w16 = list(struct.unpack("<%de" % n, struct.pack("<%de" % n, *w)))
w16[5] = 0.0015  # not an f16 value
save("exact_other.safetensors", "F32", w16)
PY
"$snnc" exact.snn --weights=exact16.safetensors --cuda-arch=none -o exact.so
"$snnc" --explain exact.snn --weights=exact16.safetensors | grep -q 'd.weight .* f16 .*every value exact in f16' ||
  { echo "FAIL: exact.so does not store d.weight in f16"; exit 1; }
"$abi_test" --exact ./exact.so exact16.safetensors exact_other.safetensors

# valgrind does not decode every instruction of a recent host: the library under it is built for
# an older CPU (x86-64-v2)
if [ -z "$sanitized" ] && command -v valgrind > /dev/null; then
  "$snnc" "$model" --cpu=x86-64-v2 --cuda-arch=none -o abi_v2.so
  "$snnc" "$model" --cpu=x86-64-v2 --cuda-arch=none --no-embed-weights -o abi_v2_noweights.so
  run=("$abi_test" ./abi_v2.so ./abi_v2_noweights.so abi.safetensors inputs.npz out_v2.npz)
  valgrind -q --error-exitcode=3 --leak-check=full --errors-for-leak-kinds=definite,indirect \
    "${run[@]}" > valgrind.log 2>&1 || { cat valgrind.log; echo "FAIL: valgrind"; exit 1; }
  echo "valgrind: no errors, no leaks"
  "$npycmp" --exact '*' out_v2.npz ref.npz
fi
echo "PASS"
