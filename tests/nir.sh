#!/usr/bin/env bash
# Runs every NIR fixture (tests/nir/<case>: model.nir exported by a framework or built with the nir
# package, input.npy, expected.npz with the framework's own outputs, args with the snnc options that
# state the exporter's discretisation) through the interpreter (float32) and the compiled CPU
# backend when the build has it, comparing every output bit for bit unless the case has a
# `tolerance` file (npycmp options; tests/nir/README.md says why), and through the CUDA backend
# on a GPU or on tests/cuda_emu's stand-in (SNN_CUDA_DRIVER, SNN_NVRTC). Each case is also translated
# with --emit=snn and the written .snn model (with its weights file) run again, and that model
# exported with --emit=nir and run again: the same bytes each time (nir -> snn -> nir).
# Without NIR support in the build (no libhdf5) the test is skipped (exit 77).
# Usage: nir.sh SNNC NPYCMP NIR_DIR WORK_DIR
set -u
snnc=$1 npycmp=$2 dir=$3 work=$4
mkdir -p "$work"
first=$(ls -d "$dir"/*/ | head -1)
if "$snnc" --emit=snn "$first/model.nir" --timesteps=1 -q 2>&1 >/dev/null | grep -q "NIR support is off"; then
  echo "nir: skipped (this build has no NIR support)"
  exit 77
fi
pass=0 fail=0
backends=(interp)
"$snnc" --help | grep -q -- '--backend=cpu' && backends+=(cpu)
# cuda: on a GPU, or on tests/cuda_emu's stand-in when SNN_CUDA_DRIVER and SNN_NVRTC name it
probe=$(ls "$dir"/*/model.nir | head -1)
read -r -a probe_args < "$(dirname "$probe")/args"
if "$snnc" --run -q --device=cuda "$probe" "${probe_args[@]}" \
     --input="$(dirname "$probe")/input.npy" --output="$work/probe.npz" >"$work/probe.log" 2>&1; then
  backends+=(cuda)
fi
for case in "$dir"/*/; do
  name=$(basename "$case")
  [ -f "$case/model.nir" ] || continue
  read -r -a args < "$case/args"
  cmp_args=(--exact '*')
  [ -f "$case/tolerance" ] && read -r -a cmp_args < "$case/tolerance"
  for backend in "${backends[@]}"; do
    out="$work/$name.$backend.npz"
    log="$work/$name.$backend.log"
    how=(--backend="$backend" --precision=f32)
    [ "$backend" = cuda ] && how=(--device=cuda)
    if "$snnc" --run "${how[@]}" "$case/model.nir" "${args[@]}" \
         --input="$case/input.npy" --output="$out" -q >"$log" 2>&1 &&
       "$npycmp" "${cmp_args[@]}" "$out" "$case/expected.npz" >>"$log" 2>&1; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      echo "FAIL: $name ($backend)"
      cat "$log"
    fi
  done
  # --emit=snn writes an equivalent model: it computes the same bytes
  snn="$work/$name/imported.snn"
  mkdir -p "$work/$name"
  log="$work/$name.emit.log"
  if "$snnc" --emit=snn "$case/model.nir" "${args[@]}" -o "$snn" -q >"$log" 2>&1 &&
     [ -f "$work/$name/imported.safetensors" ] &&
     "$snnc" --run --backend=interp --precision=f32 "$snn" --input="$case/input.npy" \
       --output="$work/$name.emitted.npz" -q >>"$log" 2>&1 &&
     "$npycmp" --exact '*' "$work/$name.emitted.npz" "$work/$name.interp.npz" >>"$log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name (--emit=snn, then the .snn)"
    cat "$log"
  fi
  # and that model exported again as NIR (--emit=nir), read back with the same options: the same bytes
  log="$work/$name.export.log"
  export_args=()
  for a in "${args[@]}"; do
    case "$a" in --dt=*|--impulses|--framework=*) export_args+=("$a") ;; esac
  done
  if "$snnc" --emit=nir "$snn" "${export_args[@]}" -o "$work/$name/exported.nir" -q >"$log" 2>&1 &&
     "$snnc" --run --backend=interp --precision=f32 "$work/$name/exported.nir" "${args[@]}" \
       --input="$case/input.npy" --output="$work/$name.exported.npz" -q >>"$log" 2>&1 &&
     "$npycmp" --exact '*' "$work/$name.exported.npz" "$work/$name.interp.npz" >>"$log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name (--emit=snn, --emit=nir, then the .nir)"
    cat "$log"
  fi
done
echo "nir (${backends[*]}, --emit=snn, --emit=nir): $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
