#!/usr/bin/env bash
# Differential test of the kernel IR and the CPU and CUDA backends: for every example and every parity
# fixture, runs the reference interpreter in float32 mode, the kernel-IR evaluator (--backend=kir),
# when the build has LLVM the compiled CPU code (--backend=cpu), and when a CUDA device answers (a GPU,
# or tests/cuda_emu's stand-in named by SNN_CUDA_DRIVER/SNN_NVRTC) the CUDA backend, on the same
# inputs and requires identical outputs, bit for bit. SNN_DIFF_REQUIRE=cuda: the CUDA backend alone,
# skipped (77) without a device; SNN_DIFF_WRAP: a command the CUDA runs go through (compute-sanitizer
# --tool memcheck --error-exitcode 1, on a GPU). Models without an input file get generated inputs
# (tests/lit/Inputs/mknpy.py); fmnist_conv, slow in both, runs on 2 samples. SNN_DIFF_VERBOSE=1 prints
# each check that passes too (progress for a run that may be cut short). Batches of 2 make the
# Poisson keys cross batch boundaries (sample_base). Also checks that --emit=kernel prints.
# Usage: kir_diff.sh SNNC NPYCMP SOURCE_ROOT WORK_DIR
set -u
snnc=$1 npycmp=$2 root=$3 work=$4
mkdir -p "$work"
pass=0 fail=0
python=${PYTHON:-python3}
backends=(kir)
# cpu-O0: the CPU backend with no pass run (every layer step by step: the lowering without time
# batching)
"$snnc" --help | grep -q -- '--backend=cpu' && backends+=(cpu cpu-O0)
# cuda: on a GPU, or on tests/cuda_emu's stand-in when SNN_CUDA_DRIVER and SNN_NVRTC name it
mkdir -p "$work/probe"
printf 'model probe {\n  timesteps 1\n  input x : f32[1]\n  output o = IF(x)\n}\n' >"$work/probe/m.snn"
"$python" "$root/tests/lit/Inputs/mknpy.py" "$work/probe/x.npy" --shape 1,1 --fill 1
if "$snnc" --run -q --device=cuda "$work/probe/m.snn" --input="$work/probe/x.npy" >"$work/probe/log" 2>&1; then
  backends+=(cuda)
  echo "cuda: ${SNN_CUDA_DRIVER:-the NVIDIA driver}"
elif [ "${SNN_DIFF_REQUIRE:-}" = cuda ]; then
  echo "SKIP: no CUDA device: $(cat "$work/probe/log")"
  exit 77
fi
[ "${SNN_DIFF_REQUIRE:-}" = cuda ] && backends=(cuda)
true
echo "backends compared with the interpreter: ${backends[*]}"

# the shape of a model's single input file, sample-major: N, [T,] dims
input_shape() { # MODEL N
  local ir t decl
  ir=$("$snnc" --emit=ir "$1") || return 1
  t=$(printf '%s\n' "$ir" | sed -n 's/^ *timesteps \([0-9]*\).*/\1/p' | head -1)
  decl=$(printf '%s\n' "$ir" | sed -n 's/^ *input [A-Za-z_0-9]* : [a-z0-9]*\[\(.*\)\].*/\1/p')
  [ "$(printf '%s\n' "$decl" | grep -c .)" -eq 1 ] || return 1
  printf '%s,%s\n' "$2" "$(printf '%s' "$decl" | sed "s/T/$t/; s/ //g")"
}

check() { # NAME MODEL INPUT [extra args...]
  local name=$1 model=$2 input=$3
  shift 3
  local a="$work/$name.interp.npz" b="$work/$name.kir.npz"
  if ! "$snnc" --emit=kernel "$model" -o "$work/$name.kir.txt" 2>"$work/$name.log"; then
    echo "FAIL (--emit=kernel): $name"; cat "$work/$name.log"; fail=$((fail + 1)); return
  fi
  if ! "$snnc" --run --backend=interp "$model" --input="$input" --precision=f32 --output="$a" -q "$@" 2>>"$work/$name.log"; then
    echo "FAIL (interp): $name"; cat "$work/$name.log"; fail=$((fail + 1)); return
  fi
  for be in "${backends[@]}"; do
    b="$work/$name.$be.npz"
    local wrap=()
    [ "$be" = cuda ] && [ -n "${SNN_DIFF_WRAP:-}" ] && read -r -a wrap <<<"$SNN_DIFF_WRAP"
    local how=(--backend="$be")
    [ "$be" = cpu-O0 ] && how=(--backend=cpu -O0)
    # the GPU's register tiles run from a batch that fills a GPU, far past these: the exact-sum
    # checks run them at every batch (unless the caller chose), the others one thread per output
    local tiles=()
    [ "$be" = cuda ] && [ -z "${SNN_GPU_FILL_THREADS:-}" ] && [[ $name == *.exact ]] &&
      tiles=(env SNN_GPU_FILL_THREADS=1)
    if "${wrap[@]}" "${tiles[@]}" "$snnc" --run "$model" --input="$input" "${how[@]}" --output="$b" -q "$@" 2>>"$work/$name.log" &&
       "$npycmp" --exact '*' "$b" "$a" >>"$work/$name.log" 2>&1; then
      pass=$((pass + 1))
      [ -n "${SNN_DIFF_VERBOSE:-}" ] && echo "ok ($be): $name"
    else
      echo "FAIL ($be): $name"; cat "$work/$name.log"; fail=$((fail + 1))
    fi
  done
}

for model in "$root"/examples/*.snn; do
  name=$(basename "$model" .snn)
  n=3 extra=(--batch=2)
  case $name in
    fmnist_conv) n=2 ;;
    lif_layer) n=1 ;;
  esac
  shape=$(input_shape "$model" "$n") || { echo "FAIL: $name (no single input)"; fail=$((fail + 1)); continue; }
  # values that make neurons fire and stay silent, including negatives and zeros
  "$python" "$root/tests/lit/Inputs/mknpy.py" "$work/$name.input.npy" --shape "$shape" \
    --values 0.9,0.1,1.7,-0.3,0.55,2.2,0,0.35,1.1,-1.2,0.8,0.05,3 || { fail=$((fail + 1)); continue; }
  check "$name" "$model" "$work/$name.input.npy" "${extra[@]}"
  # double sums (--accumulate=exact) as well as the default float ones, whose order of terms
  # every backend and the interpreter's float32 mode share
  check "$name.exact" "$model" "$work/$name.input.npy" "${extra[@]}" --accumulate=exact
  # 16-bit weights (--precision=fp16|bf16): every backend loads the same rounded values
  case $name in
    fmnist_mlp|fmnist_conv|recurrent)
      check "$name.fp16" "$model" "$work/$name.input.npy" "${extra[@]}" --precision=fp16
      check "$name.bf16" "$model" "$work/$name.input.npy" "${extra[@]}" --precision=bf16 ;;
  esac
done

for case in "$root"/tests/parity/*/; do
  name=$(basename "$case")
  [ -f "$case/model.snn" ] && [ -f "$case/input.npy" ] || continue
  check "parity_$name" "$case/model.snn" "$case/input.npy" --batch=3
done

echo "backend diff: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
