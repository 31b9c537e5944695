#!/usr/bin/env bash
# Differential test of random models: for each seed, gen_model.py writes a random valid model, its inputs
# and (for about half of the seeds) its weights; the reference interpreter in float32 mode is the oracle
# and the JIT-compiled CPU backend (and the CUDA backend, where a device or tests/cuda_emu's stand-in
# answers) must reproduce every output of it at several batch sizes.
#
# Per seed (N = 3..7 samples, B2 = 2, 3 or 4 chosen not to divide N):
#   - IR round trip: --emit=ir of the model, --emit=ir of that, byte-identical;
#   - oracle: --backend=interp --precision=f32 (one batch); the interpreter at --batch=B2 must equal it;
#   - cpu at the default batch (all N samples in one batch), at --batch=1 (loading the first run's code
#     from a compile cache private to the test) and at --batch=B2 with --threads=1..4 (run from the
#     emitted .snnir, so the IR's semantics are checked too);
#   - the kernel-IR evaluator (--backend=kir) at --batch=B2, which tells lowering bugs from LLVM ones;
#   - the CUDA backend (a GPU, or the stand-in) at --batch=B2, -O2 or -O3; odd seeds with the GPU's
#     register tiles at every batch (SNN_GPU_FILL_THREADS=1), even seeds one thread per output;
#   - every output compared with npycmp --exact '*' and bit for bit (npzdiff.py: also +0 vs -0), and the
#     firing rates of --report=json compared as text.
#
# Oracle and tolerance: none. Spikes must be identical, and so must every real value: the CPU backend
# is specified to equal --precision=f32 bit for bit (docs/design.md: float ops round after every
# operation, dense/conv layers accumulate in float in the order the model fixes (in double, rounded
# once, under `accumulate exact`), pools in double, the same libm float functions, no
# fast-math, no FMA contraction), so any difference is a bug to report, not noise to tolerate. The only
# freedom: NaNs compare equal whatever their sign and payload (which IEEE 754 leaves open).
#
# Localisation: the models expose every neuron layer and its states over time (sequence outputs
# o_<layer>, st_<layer>_<var>; see gen_model.py), so a mismatch is reported as output, sample, step and
# neuron, earliest step first. A failing seed's directory (model, inputs, weights, outputs, logs) is kept
# and the snnc command lines to reproduce it are printed. Passing seeds are deleted (SNN_DIFF_KEEP=1 keeps
# them).
#
# Usage: diff.sh SNNC NPYCMP SOURCE_ROOT WORK_DIR [SEEDS]
#   SEEDS (default 20) is what CTest runs; the environment overrides it for soak runs:
#   SNN_DIFF_SEEDS=500   how many seeds          SNN_DIFF_FIRST=1   the first seed
#   SNN_DIFF_JOBS=N      seeds run in parallel (default: online CPUs, at most 4)
#   SNN_DIFF_KEEP=1      keep passing seeds' files
#   SNN_DIFF_REQUIRE=cuda on a GPU: the interpreter against the CUDA backend alone (at two batch sizes
#                        and -O levels; no CPU backend needed), skipped (77) without a device
# Exit status: 0 all passed, 1 a failure, 77 (skip) when snnc was built without the CPU backend.
set -u
if [ $# -lt 4 ]; then
  echo "usage: diff.sh SNNC NPYCMP SOURCE_ROOT WORK_DIR [SEEDS]" >&2
  exit 2
fi
snnc=$(realpath "$1") npycmp=$(realpath "$2") root=$(realpath "$3") work=$4
nseeds=${SNN_DIFF_SEEDS:-${5:-20}}
first=${SNN_DIFF_FIRST:-1}
python=${PYTHON:-python3}
gen="$root/tests/diff/gen_model.py"
npzdiff="$root/tests/diff/npzdiff.py"
jobs=${SNN_DIFF_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$jobs" -gt 4 ] && [ -z "${SNN_DIFF_JOBS:-}" ] && jobs=4
[ "$jobs" -ge 1 ] || jobs=1
mkdir -p "$work"
work=$(realpath "$work")
limit=120 # seconds for one snnc command: a hang is a failure, not a stuck test

# Skip cleanly without the CPU backend. (Probe by running it: snnc --help lists --backend=cpu even in
# builds without LLVM.)
printf 'model probe {\n  timesteps 1\n  input x : f32[1]\n  output o = IF(x)\n}\n' >"$work/probe.snn"
"$python" "$root/tests/lit/Inputs/mknpy.py" "$work/probe.npy" --shape 1,1 --fill 1 || exit 1
# SNN_DIFF_REQUIRE=cuda (on a GPU): the CUDA backend alone is compared with the interpreter, which
# needs no CPU backend (a build without LLVM will do); skipped (77) without a device.
require=${SNN_DIFF_REQUIRE:-}
if [ "$require" != cuda ] &&
   ! "$snnc" --run -q "$work/probe.snn" --input="$work/probe.npy" --backend=cpu >"$work/probe.log" 2>&1; then
  if grep -q "not available in this build" "$work/probe.log"; then
    echo "SKIP: $snnc has no cpu backend (built without LLVM): nothing to compare the interpreter with"
    exit 77
  fi
  echo "FAIL: the cpu backend does not run a one-neuron model:"
  cat "$work/probe.log"
  exit 1
fi

# The CUDA backend joins when a device answers: a GPU, or the stand-in SNN_CUDA_DRIVER/SNN_NVRTC name.
has_cuda=0
if "$snnc" --run -q --device=cuda "$work/probe.snn" --input="$work/probe.npy" >"$work/probe-cuda.log" 2>&1; then
  has_cuda=1
  echo "cuda: compared too (${SNN_CUDA_DRIVER:-the NVIDIA driver})"
elif [ "$require" = cuda ]; then
  echo "SKIP: no CUDA device: $(cat "$work/probe-cuda.log")"
  exit 77
fi

# The firing rates of a --report=json line, one "layer": rate per line, sorted (the report lists layers
# in node order, which the printed IR may change).
rates() { # JSON
  sed -n 's/.*"firing_rates": {\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' | sed 's/^ *//' | sort
}

# Compares one run with the oracle; on a difference writes a report to $dir/FAIL. npycmp --exact is the
# verdict; npzdiff.py adds +0 != -0 and says where the outputs differ (layer, sample, step, neuron).
compare() { # DIR LABEL NPZ JSON RUN_COMMAND...
  local dir=$1 label=$2 npz=$3 json=$4
  shift 4
  local log="$dir/$label.cmp" bad=0
  "$npycmp" --exact '*' "$npz" "$dir/interp.npz" >"$log" 2>&1 || bad=1
  "$python" "$npzdiff" "$dir/outputs" "$npz" "$dir/interp.npz" >"$log.where" 2>&1 || bad=1
  if [ $bad -ne 0 ]; then
    {
      echo "  $label: outputs differ from the interpreter's (float32):"
      if [ -s "$log.where" ]; then cat "$log.where"; else sed 's/^/    /' "$log"; fi
      grep -q mismatches "$log" && ! grep -q "[1-9][0-9]* mismatches" "$log" &&
        echo "    (npycmp sees no difference: only the sign of a zero differs)"
    } >>"$dir/FAIL"
  fi
  local want got
  want=$(rates "$dir/interp.json")
  got=$(rates "$json")
  if [ "$label" = cpu-O0 ]; then
    # without dce, layers no output needs still run and report a rate: those the oracle reports
    # must be there, equal
    want=$(sort <<<"$want")
    got=$(comm -12 <(sort <<<"$got") <(echo "$want"))
  fi
  if [ "$want" != "$got" ]; then
    bad=1
    { echo "  $label: firing rates differ (got <, expected >):"
      diff <(echo "$got") <(echo "$want") | grep '^[<>]' | sed 's/^/    /'; } >>"$dir/FAIL"
  fi
  if [ $bad -ne 0 ]; then
    printf '  reproduce (in %s):\n    %s\n' "$dir" "$*" >>"$dir/FAIL"
  fi
}

# Runs snnc, logging the command; a crash or an error is a failure with its output.
run_snnc() { # DIR LABEL STDOUT_FILE ARGS...
  local dir=$1 label=$2 out=$3
  shift 3
  echo "${SNN_GPU_FILL_THREADS:+SNN_GPU_FILL_THREADS=$SNN_GPU_FILL_THREADS }SNN_CACHE_DIR=$cache snnc $*" >>"$dir/commands"
  (cd "$dir" && SNN_CACHE_DIR=$cache timeout "$limit" "$snnc" "$@") >"$out" 2>"$dir/$label.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    {
      local why=""
      [ $rc -eq 124 ] && why=": timed out after $limit s"
      [ $rc -gt 128 ] && [ $rc -ne 124 ] && why=": killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
      echo "  $label: snnc failed (exit status $rc$why):"
      sed 's/^/    /' "$dir/$label.err" | head -20
      echo "  reproduce (in $dir):"
      echo "    ${SNN_GPU_FILL_THREADS:+SNN_GPU_FILL_THREADS=$SNN_GPU_FILL_THREADS }SNN_CACHE_DIR=$cache $snnc $*"
    } >>"$dir/FAIL"
    return 1
  fi
}

one_seed() { # SEED
  local seed=$1 cache=off
  local dir="$work/s$seed"
  rm -rf "$dir"
  mkdir -p "$dir"
  # the GPU's register tiles run from a batch that fills a GPU, far past these batches: odd seeds
  # run them at every batch (unless the caller chose), even seeds one thread per output
  # (lower_layers.c, "GPU"); it changes nothing but the CUDA lowering
  if [ -z "${SNN_GPU_FILL_THREADS:-}" ] && [ $((seed % 2)) -eq 1 ]; then
    export SNN_GPU_FILL_THREADS=1
  fi
  local n=$((3 + seed % 5)) b2="" threads=$((1 + seed % 4))
  for b in $(((seed % 3) + 2)) 2 3 4; do
    if [ $((n % b)) -ne 0 ]; then b2=$b; break; fi
  done
  echo "--samples=$n" >"$dir/gen.args"
  if ! "$python" "$gen" "$seed" -o "$dir/model.snn" --data "$dir" --samples "$n" 2>"$dir/gen.err"; then
    { echo "  the generator failed:"; sed 's/^/    /' "$dir/gen.err"; } >>"$dir/FAIL"
    return
  fi
  local args
  mapfile -t args <"$dir/args"
  # the IR round trip: print(parse(print(m))) == print(m)
  run_snnc "$dir" emit1 /dev/null --emit=ir model.snn -o model.snnir || return
  run_snnc "$dir" emit2 /dev/null --emit=ir model.snnir -o model2.snnir || return
  if ! cmp -s "$dir/model.snnir" "$dir/model2.snnir"; then
    { echo "  IR round trip: model.snnir and model2.snnir differ:"
      diff "$dir/model.snnir" "$dir/model2.snnir" | head -10 | sed 's/^/    /'; } >>"$dir/FAIL"
  fi
  # the oracle
  local oracle=(--run -q model.snn "${args[@]}" --backend=interp --precision=f32 --report=json)
  run_snnc "$dir" interp "$dir/interp.json" "${oracle[@]}" --output=interp.npz || return
  run_snnc "$dir" "interp-b$b2" "$dir/interp-b$b2.json" "${oracle[@]}" --batch="$b2" --output="interp-b$b2.npz" &&
    compare "$dir" "interp-b$b2" "$dir/interp-b$b2.npz" "$dir/interp-b$b2.json" \
      "$snnc ${oracle[*]} --batch=$b2 --output=interp-b$b2.npz  # vs: $snnc ${oracle[*]} --output=interp.npz"
  # training: one epoch of the oracle's --train (the interpreter, float32) on the same inputs, the
  # loss on the first output that is class scores, labels from the sample index; where the compiled
  # trainer differentiates every layer, its gradients and weights must equal the oracle's (npycmp:
  # NaNs equal); a model neither trains (a refractory neuron, -1 spikes, no such output, outputs
  # not finite) is skipped
  [ "$require" != cuda ] && train_leg "$dir" "$b2" "$n" "${args[@]}"
  # the kernel-IR evaluator (what the CPU backend compiles, evaluated directly): when cpu differs, says
  # whether the lowering or the LLVM code generation is at fault
  local kir=(--run -q model.snn "${args[@]}" --backend=kir --report=json --batch="$b2" --output=kir.npz)
  run_snnc "$dir" kir "$dir/kir.json" "${kir[@]}" &&
    compare "$dir" kir "$dir/kir.npz" "$dir/kir.json" "$snnc ${kir[*]}  # vs: $snnc ${oracle[*]} --output=interp.npz"
  # the CPU backend: all samples in one batch, one sample per batch, and a batch that does not divide N
  # (with 1-4 threads, from the printed IR), and with no pass (-O0: every layer step by step, spike
  # layers through the kernels for real inputs). The first two share a compile cache private to the
  # test: the first compiles (a miss) and the second loads that code (a hit); the others compile
  # without a cache.
  # Every third seed also with --events=auto: spike-fed layers measured on the model's own inputs
  # (the calibration copy, a sequence output per layer input, must read back for any model) and
  # summed densely where they fire past the crossover; either way is the oracle's (the same terms
  # in the same order).
  local label model cache extra specs=()
  specs=("cpu-bN|model.snn|$work/cache|" "cpu-b1|model.snn|$work/cache|--batch=1"
         "cpu-b$b2|model.snnir|off|--batch=$b2 --threads=$threads"
         "cpu-O0|model.snn|off|-O0 --batch=$b2")
  [ $((seed % 3)) -eq 0 ] && specs+=("cpu-auto|model.snn|off|--events=auto --batch=$b2")
  [ "$require" = cuda ] && specs=()
  for spec in "${specs[@]}"; do
    IFS='|' read -r label model cache extra <<<"$spec"
    # shellcheck disable=SC2206
    local cmd=(--run -q "$model" "${args[@]}" --backend=cpu --report=json $extra --output="$label.npz")
    run_snnc "$dir" "$label" "$dir/$label.json" "${cmd[@]}" &&
      compare "$dir" "$label" "$dir/$label.npz" "$dir/$label.json" \
        "SNN_CACHE_DIR=$cache $snnc ${cmd[*]}  # vs: $snnc ${oracle[*]} --output=interp.npz"
  done
  # the CUDA backend (a GPU, or tests/cuda_emu's stand-in) at the batch that does not divide N; odd
  # seeds at -O3, where layers read only by a neuron scan are summed in it (scan-epilogue)
  if [ "$has_cuda" = 1 ]; then
    local cmd=(--run -q model.snn "${args[@]}" --device=cuda --report=json --batch="$b2"
               "-O$((2 + seed % 2))" --output=cuda.npz)
    run_snnc "$dir" cuda "$dir/cuda.json" "${cmd[@]}" &&
      compare "$dir" cuda "$dir/cuda.npz" "$dir/cuda.json" \
        "SNN_CACHE_DIR=$cache $snnc ${cmd[*]}  # vs: $snnc ${oracle[*]} --output=interp.npz"
    # on a GPU alone: also every sample in one batch at the other -O level
    if [ "$require" = cuda ]; then
      cmd=(--run -q model.snn "${args[@]}" --device=cuda --report=json "-O$((3 - seed % 2))"
           --output=cuda-bN.npz)
      run_snnc "$dir" cuda-bN "$dir/cuda-bN.json" "${cmd[@]}" &&
        compare "$dir" cuda-bN "$dir/cuda-bN.npz" "$dir/cuda-bN.json" \
          "SNN_CACHE_DIR=$cache $snnc ${cmd[*]}  # vs: $snnc ${oracle[*]} --output=interp.npz"
    fi
  fi
  cache=off
  if [ -f "$dir/FAIL" ] && [ -f "$dir/few" ]; then
    localise "$seed" "$dir"
  fi
}

train_leg() { # DIR BATCH SAMPLES DATA_ARGS...
  local dir=$1 b=$2 n=$3
  shift 3
  # the first output that is class scores: a count, mean, rate, last or max readout of 2+ values
  local out k
  read -r out k < <(awk -F'\t' '$2 ~ /^(count|mean|rate|last|max)$/ {
      n = split($4, d, ","); p = 1; for (i = 1; i <= n; i++) p *= d[i]
      if (p >= 2) { print $1, p; exit } }' "$dir/outputs")
  [ -n "${out:-}" ] || return 0
  "$python" -c "import numpy as np; np.save('$dir/labels.npy', (np.arange($n) % $k).astype(np.float32))"
  local common=(--train model.snn "$@" --labels=labels.npy --loss-output="$out" --batch="$b"
                --epochs=1 --no-shuffle -q)
  echo "snnc ${common[*]} --backend=interp -o train-interp.safetensors --grads=grads-interp.safetensors" >>"$dir/commands"
  (cd "$dir" && timeout "$limit" "$snnc" "${common[@]}" --backend=interp \
     -o train-interp.safetensors --grads=grads-interp.safetensors) >"$dir/train-interp.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    grep -q "cannot be trained\|is not finite" "$dir/train-interp.log" && return 0
    { echo "  train-interp: snnc --train failed (exit status $rc):"
      sed 's/^/    /' "$dir/train-interp.log" | head -20; } >>"$dir/FAIL"
    return 1
  fi
  (cd "$dir" && timeout "$limit" "$snnc" "${common[@]}" --backend=cpu \
     -o train-cpu.safetensors --grads=grads-cpu.safetensors) >"$dir/train-cpu.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    grep -q "does not differentiate" "$dir/train-cpu.log" && return 0
    { echo "  train-cpu: snnc --train --backend=cpu failed (exit status $rc):"
      sed 's/^/    /' "$dir/train-cpu.log" | head -20; } >>"$dir/FAIL"
    return 1
  fi
  echo compiled >"$dir/trained"
  # and on the GPU (or the stand-in): the same compiled step as CUDA C
  local legs=(cpu)
  if [ "$has_cuda" = 1 ]; then
    echo "snnc ${common[*]} --device=cuda -o train-cuda.safetensors --grads=grads-cuda.safetensors" >>"$dir/commands"
    if (cd "$dir" && timeout "$limit" "$snnc" "${common[@]}" --device=cuda \
          -o train-cuda.safetensors --grads=grads-cuda.safetensors) >"$dir/train-cuda.log" 2>&1; then
      legs+=(cuda)
      echo gpu >>"$dir/trained"
    else
      { echo "  train-cuda: snnc --train --device=cuda failed:"
        sed 's/^/    /' "$dir/train-cuda.log" | head -20; } >>"$dir/FAIL"
    fi
  fi
  local f leg
  for leg in "${legs[@]}"; do
    for f in grads train; do
      if ! "$npycmp" --exact '*' "$dir/$f-$leg.safetensors" "$dir/$f-interp.safetensors" \
           >"$dir/$f-$leg.cmp" 2>&1; then
        { echo "  training ($f): $leg differs from --backend=interp:"
          sed 's/^/    /' "$dir/$f-$leg.cmp" | grep -v ' 0 mismatches' | head -10; } >>"$dir/FAIL"
      fi
    done
  done
}

# A failing model that does not expose all its neuron layers (the generator's "few outputs" models):
# run the same model with every layer exposed (gen_model.py --expose-all) to say where it first differs.
localise() { # SEED DIR
  local seed=$1 dir=$2/exposed n cache=off
  mkdir -p "$dir"
  n=$(sed -n 's/^--samples=//p' "$2/gen.args")
  "$python" "$gen" "$seed" -o "$dir/model.snn" --data "$dir" --samples "$n" --expose-all || return
  local args
  mapfile -t args <"$dir/args"
  local oracle=(--run -q model.snn "${args[@]}" --backend=interp --precision=f32 --report=json)
  run_snnc "$dir" interp "$dir/interp.json" "${oracle[@]}" --output=interp.npz || return
  local be=cpu
  [ "$require" = cuda ] && be=cuda
  local cmd=(--run -q model.snn "${args[@]}" --backend=$be --report=json --batch=1 --output=$be-b1.npz)
  run_snnc "$dir" $be-b1 "$dir/$be-b1.json" "${cmd[@]}" &&
    compare "$dir" $be-b1 "$dir/$be-b1.npz" "$dir/$be-b1.json" "$snnc ${cmd[*]}  # vs: $snnc ${oracle[*]} --output=interp.npz"
  if [ -f "$dir/FAIL" ]; then
    echo "  the same model with every layer exposed ($dir):"
    cat "$dir/FAIL"
  else
    echo "  (the same model with every layer exposed, $dir, does not differ at --batch=1)"
  fi >>"$2/FAIL"
}

# a seed's verdict: its FAIL report (and its directory kept), or nothing (directory removed)
finish_seed() { # SEED
  local dir="$work/s$1"
  if [ -f "$dir/FAIL" ]; then
    {
      echo "FAIL: seed $1 ($dir: model.snn, its inputs and weights, commands, logs)"
      cat "$dir/FAIL"
      if grep -q '^  cpu-.*differ' "$dir/FAIL"; then
        if grep -q '^  kir: outputs differ' "$dir/FAIL"; then
          echo "  (the kernel-IR evaluator differs too: look at the lowering, codegen/kir_lower.c)"
        else
          echo "  (the kernel-IR evaluator agrees with the interpreter: look at the LLVM code generation)"
        fi
      fi
    } >"$work/result.$1"
  else
    echo "ok $(cat "$dir"/cpu-*.json 2>/dev/null | grep -c '"cache": "hit"') $([ -f "$dir/trained" ] && echo 1 || echo 0) $(grep -c '^gpu' "$dir/trained" 2>/dev/null || echo 0)" >"$work/result.$1"
    [ "${SNN_DIFF_KEEP:-0}" != "0" ] || rm -rf "$dir"
  fi
}

start=$(date +%s)
rm -rf "$work"/result.* "$work/cache"
last=$((first + nseeds - 1))
running=0
for seed in $(seq "$first" "$last"); do
  (one_seed "$seed"; finish_seed "$seed") &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
pass=0 fail=0 hits=0 trained=0 trained_gpu=0
for seed in $(seq "$first" "$last"); do
  verdict="" nhits=0 ntrained=0 ngpu=0
  [ -f "$work/result.$seed" ] && read -r verdict nhits ntrained ngpu <"$work/result.$seed"
  if [ "${verdict:-}" = "ok" ]; then
    pass=$((pass + 1)) hits=$((hits + nhits)) trained=$((trained + ${ntrained:-0}))
    trained_gpu=$((trained_gpu + ${ngpu:-0}))
  else
    fail=$((fail + 1))
    cat "$work/result.$seed" 2>/dev/null || echo "FAIL: seed $seed (no result)"
  fi
done
echo "random models, interp (f32) vs $([ "$require" = cuda ] && echo "cuda alone" || echo "cpu$([ "$has_cuda" = 1 ] && echo " and cuda")"): seeds $first..$last: $pass passed, $fail failed" \
  "($(($(date +%s) - start)) s, $jobs in parallel; compile cache hits in passing seeds: $hits;" \
  "trained compiled to the interpreter's bits: $trained$([ "$has_cuda" = 1 ] && echo ", on the GPU too: $trained_gpu"))"
[ "$fail" -eq 0 ]
