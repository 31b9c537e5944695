#!/usr/bin/env bash
# gpu-check.sh: snnc's CUDA backend checked on a real NVIDIA GPU, everything in one call of a lent
# machine (the checks CI runs on the CUDA emulator, now on hardware, and the sanitizers).
#
#   tools/gpu-check.sh prepare            # here (LLVM, flex, bison): build-gpu/ and its references
#   tools/gpu-check.sh run OUT [SECONDS]  # on the GPU machine, from the repository root
#
# prepare: builds snnc and npycmp in build-gpu/ without LLVM and HDF5 (the GPU machine has neither;
# the binaries link only libc, libm and libz), and writes build-gpu/ref/: the CPU backend's outputs
# on the Fashion-MNIST test set (MLP all 10,000 images, conv SNN the first 2,048; float and exact
# sums), made by the LLVM build ($SNNC_CPU, default build/driver/snnc). Carry build-gpu/ and
# bench/gpu/prebuilt/ (its data/ folder holds the test set) with the call.
#
# run: every check in parallel, each under a time limit of SECONDS (default 170):
#   kir_diff      every example and parity fixture: interpreter (float32) = CUDA, bit for bit
#                 (tests/kir_diff.sh with SNN_DIFF_REQUIRE=cuda)
#   kir_tiles     the same with the layers' register tiles at every batch (SNN_GPU_FILL_THREADS=1)
#   random        random models (tests/diff/diff.sh, SNN_DIFF_REQUIRE=cuda; $SNN_GPU_SEEDS seeds,
#                 default 40), tiles at every batch: interpreter = CUDA at two batch sizes, -O2
#                 and -O3
#   memcheck, racecheck, initcheck, synccheck
#                 kir_diff's CUDA runs under compute-sanitizer --tool T --error-exitcode 1
#   memcheck_tiles  memcheck with tiles at every batch
#   fmnist        the trained MLP and conv SNN over the test set on the GPU (-O2, -O3, exact sums):
#                 outputs equal the CPU backend's bit for bit, predictions equal the framework's
#   train         snnc --train --device=cuda on the 29 training fixtures (tests/grad.sh): gradients
#                 and weights after the steps equal the interpreter's bit for bit
# It prints the device, driver, CUDA and NVRTC versions, one line per check (PASS, FAIL or TIME:
# cut by the limit, with the checks done so far), and writes OUT/gpu-check.tgz (every log; failing
# random seeds' folders). Exit status 0 when every check passed, 1 otherwise, 77 without a device.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SNN_GPU_BUILD:-$root/build-gpu}

if [ "${1:-}" = prepare ]; then
  set -e
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON \
    -DSNN_NO_HDF5=ON >/dev/null
  cmake --build "$build" -j"$(nproc)" --target snnc npycmp >/dev/null
  cpu=${SNNC_CPU:-$root/build/driver/snnc}
  ref=$build/ref
  mkdir -p "$ref"
  conv=(--run -q "$root/examples/fmnist_conv.snn" --data=fashion-mnist --limit=2048 --batch=64)
  mlp=(--run -q "$root/examples/fmnist_mlp.snn" --data=fashion-mnist --batch=256)
  "$cpu" "${conv[@]}" --backend=cpu --output="$ref/conv.npy"
  "$cpu" "${conv[@]}" --backend=cpu --accumulate=exact --output="$ref/conv_exact.npy"
  "$cpu" "${mlp[@]}" --backend=cpu --output="$ref/mlp.npy"
  "$cpu" "${mlp[@]}" --backend=cpu --accumulate=exact --output="$ref/mlp_exact.npy"
  echo "wrote $build (snnc, npycmp: $(ldd "$build/driver/snnc" | grep -c '=>') shared libraries) and $ref"
  exit 0
fi
if [ "${1:-}" = fmnist ]; then # (run's check) the trained networks over the test set on the GPU
  set -o pipefail
  work=$2 snnc=$build/driver/snnc npycmp=$build/tests/npycmp
  fail=0
  for net in mlp conv; do
    args=(--run -q --device=cuda --data=fashion-mnist --report=json)
    if [ $net = conv ]; then args+=(--limit=2048 --batch=64); else args+=(--batch=256); fi
    for opt in -O2 -O3 --accumulate=exact; do
      ref=$build/ref/$net.npy
      [ "$opt" = --accumulate=exact ] && ref=$build/ref/${net}_exact.npy
      o="$work/fmnist_${net}${opt//[^a-zA-Z0-9]/_}.npy"
      if "$snnc" "${args[@]}" "$root/examples/fmnist_$net.snn" "$opt" --output="$o" | tail -1 &&
         "$npycmp" --exact '*' "$o" "$ref" >/dev/null 2>&1 &&
         "$npycmp" --argmax 1.0 "$o" "$root/tests/parity/fmnist_$net/predictions.npy"; then
        echo "ok: fmnist_$net $opt: outputs = CPU backend's, bit for bit; predictions = the framework's"
      else
        echo "FAIL: fmnist_$net $opt"
        "$npycmp" --exact '*' "$o" "$ref" 2>&1 | head -5
        fail=1
      fi
    done
  done
  exit $fail
fi
if [ "${1:-}" != run ] || [ $# -lt 2 ]; then
  echo "usage: tools/gpu-check.sh prepare | run OUT [SECONDS]" >&2
  exit 2
fi
out=$2 limit=${3:-170}
mkdir -p "$out"
snnc=$build/driver/snnc npycmp=$build/tests/npycmp
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
for f in "$snnc" "$npycmp" "$build/ref/conv.npy"; do
  [ -e "$f" ] || { echo "gpu-check: $f is missing (run tools/gpu-check.sh prepare here, carry build-gpu)" >&2; exit 1; }
done
export SNN_DATA_DIR=${SNN_DATA_DIR:-$root/bench/gpu/prebuilt/data}

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
  --format=csv 2>&1 | head -3
nvidia-smi 2>/dev/null | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1/p' | head -1
command -v nvcc >/dev/null && nvcc --version | tail -2 | head -1
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
[ -n "$san" ] && "$san" --version | head -2 | tail -1
# NVRTC: snnc dlopens libnvrtc.so.13 (then .12); where the loader does not find it, name the file
if [ -z "${SNN_NVRTC:-}" ] && ! ldconfig -p | grep -q 'libnvrtc\.so\.1[23] '; then
  lib=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnvrtc.so.1[23]' 2>/dev/null | head -1)
  if [ -n "$lib" ]; then
    export SNN_NVRTC=$lib LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
echo "NVRTC: ${SNN_NVRTC:-found by the loader}"
"$snnc" --version | head -1

# a device at all?
printf 'model probe {\n  timesteps 1\n  input x : f32[1]\n  output o = IF(x)\n}\n' >"$work/probe.snn"
python3 "$root/tests/lit/Inputs/mknpy.py" "$work/probe.npy" --shape 1,1 --fill 1
if ! "$snnc" --run --device=cuda "$work/probe.snn" --input="$work/probe.npy" >"$work/probe.log" 2>&1; then
  echo "SKIP: no CUDA device: $(cat "$work/probe.log")"
  exit 77
fi

echo "== checks (in parallel, $limit s each at most)"
start=$(date +%s)
check() { # NAME COMMAND... (its output in $work/NAME.log, its status in $work/NAME.rc)
  local name=$1
  shift
  (timeout "$limit" "$@" >"$work/$name.log" 2>&1; echo $? >"$work/$name.rc") &
}
export SNN_DIFF_REQUIRE=cuda SNN_DIFF_VERBOSE=1
# the dense and conv layers' register tiles run from a batch that fills the GPU (lower_layers.c,
# "GPU"), far past these tests' batches: the *_tiles checks run them at every batch
tiles=(env SNN_GPU_FILL_THREADS=1)
check kir_diff bash "$root/tests/kir_diff.sh" "$snnc" "$npycmp" "$root" "$work/kir_diff"
check kir_tiles "${tiles[@]}" bash "$root/tests/kir_diff.sh" "$snnc" "$npycmp" "$root" "$work/kir_tiles"
check random "${tiles[@]}" SNN_DIFF_SEEDS="${SNN_GPU_SEEDS:-40}" SNN_DIFF_JOBS=6 \
  bash "$root/tests/diff/diff.sh" "$snnc" "$npycmp" "$root" "$work/random"
if [ -n "$san" ]; then
  for tool in memcheck racecheck initcheck synccheck; do
    check "$tool" env SNN_DIFF_WRAP="$san --tool $tool --error-exitcode 1" \
      bash "$root/tests/kir_diff.sh" "$snnc" "$npycmp" "$root" "$work/$tool"
  done
  check memcheck_tiles "${tiles[@]}" SNN_DIFF_WRAP="$san --tool memcheck --error-exitcode 1" \
    bash "$root/tests/kir_diff.sh" "$snnc" "$npycmp" "$root" "$work/memcheck_tiles"
fi

check fmnist bash "$0" fmnist "$work"
check train bash "$root/tests/grad.sh" "$snnc" "$npycmp" "$root/tests/grad" "$work/train"
wait
echo "== results ($(($(date +%s) - start)) s)"
status=0
summary() { # NAME: one line
  local name=$1 rc
  [ -f "$work/$name.rc" ] || return 0
  rc=$(cat "$work/$name.rc")
  local verdict=PASS
  [ "$rc" = 124 ] && verdict="TIME (cut at $limit s)"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && verdict="FAIL (exit $rc)"
  [ "$rc" != 0 ] && status=1
  local what
  what=$(grep -E '^(backend diff|random models|training parity|SKIP)' "$work/$name.log" | tail -1)
  [ -z "$what" ] && what="$(grep -c '^ok' "$work/$name.log") checks passed, $(grep -c '^FAIL' "$work/$name.log") failed"
  printf '%-10s %-22s %s\n' "$name" "$verdict" "$what"
}
names=(kir_diff kir_tiles random memcheck memcheck_tiles racecheck initcheck synccheck fmnist train)
for name in "${names[@]}"; do summary "$name"; done
for name in "${names[@]}"; do
  [ -f "$work/$name.rc" ] && [ "$(cat "$work/$name.rc")" != 0 ] || continue
  echo "== $name: the first failures"
  grep -A12 -E '^FAIL|ERROR SUMMARY: [1-9]|========= (Invalid|Race|Uninit|Barrier)' "$work/$name.log" | head -40
done
# the logs, and the folders of failing seeds (passing ones are deleted by diff.sh)
(cd "$work" && tar czf "$out/gpu-check.tgz" --exclude='*.npz' --exclude='*.npy' --exclude='*.kir.txt' \
  ./*.log ./*.rc random 2>/dev/null)
rm -rf "$work"
exit $status
