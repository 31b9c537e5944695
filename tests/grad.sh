#!/usr/bin/env bash
# Training parity: every case of tests/grad (made by tools/fixtures/make_grad_parity.py with the
# frameworks' own autograd) trained by `snnc --train` over its one batch from the same initial
# weights: the loss within 1e-6 relative, every gradient (--grads) within 1e-4 relative, or 1e-4
# of its tensor's largest (float32 gradients of a spiking network are that sensitive to the order
# of their sums: snnc's double sums against PyTorch's float32 GEMMs differ there in the last four
# digits of elements that cancel; so do snnc's own float32 and double gradients; a wrong surrogate,
# reset or detach differs in the first), and for the network cases the update of one SGD step
# (momentum, weight decay) and of one Adam step, new weights minus initial ones, within the same
# tolerance (Adam's: 1e-3 of its largest, about lr: a first Adam step is lr g / (|g| + eps), so an
# element whose gradient is near eps moves by as much as its gradient's last digits do). Where the
# compiled trainer (--backend=cpu) differentiates every layer, its gradients and weights must equal
# the interpreter's bit for bit; where it does not, it must say so. With a CUDA device, or
# tests/cuda_emu's stand-in named by SNN_CUDA_DRIVER and SNN_NVRTC (CTest sets them), the same
# compiled step on the GPU (--device=cuda) must give the same bits too.
# Usage: grad.sh SNNC NPYCMP GRAD_DIR WORK_DIR
set -u
snnc=$1 npycmp=$2 dir=$3 work=$4
mkdir -p "$work"
pass=0 fail=0 compiled=0 on_gpu=0
# the GPU leg: where a device (or the stand-in) is there; named but failing is a failure
gpu=0
if [ -n "${SNN_CUDA_DRIVER:-}" ] || [ -e /dev/nvidia0 ]; then gpu=1; fi
# the CPU leg: where this build compiles for the CPU (a GPU machine's build may not)
has_cpu=0
"$snnc" --run --backend=none x.snn 2>&1 | grep -q 'available: .*\bcpu\b' && has_cpu=1
report() { echo "FAIL: $1"; cat "$2" 2>/dev/null; fail=$((fail + 1)); }
for case in "$dir"/*/; do
  name=$(basename "$case")
  [ -f "$case/model.snn" ] || continue
  log="$work/$name.log"
  read -r -a args < "$case/args"
  if ! (cd "$case" && "$snnc" --train --backend=interp model.snn --input=input.npy --labels=labels.npy "${args[@]}" \
          --no-shuffle --grads="$work/$name.grads.safetensors" -o "$work/$name.w.safetensors" \
          --report=json -q) >"$log" 2>&1; then
    report "$name (snnc --train)" "$log"; continue
  fi
  got=$(sed -n 's/.*"epoch": 1, "loss": \([^,]*\),.*/\1/p' "$log" | tail -1)
  want=$(cat "$case/loss")
  if ! awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; a = w < 0 ? -w : w;
                                              exit !(g != "" && d <= 1e-6 * a + 1e-12) }'; then
    echo "loss: snnc $got, framework $want" >> "$log"
    report "$name (loss)" "$log"; continue
  fi
  if ! "$npycmp" --rtol 1e-4 --mtol 1e-4 --atol 0 "$work/$name.grads.safetensors" "$case/grads.safetensors" \
       >>"$log" 2>&1; then
    report "$name (gradients)" "$log"; continue
  fi
  # the compiled trainer, where it differentiates every layer: the same bits as the interpreter,
  # on the CPU (where this build has it) and on the GPU (where there is one)
  legs=()
  [ "$has_cpu" = 1 ] && legs+=(cpu)
  [ "$gpu" = 1 ] && legs+=(cuda)
  bad=0
  for leg in "${legs[@]}"; do
    how=(--backend=cpu)
    [ "$leg" = cuda ] && how=(--device=cuda)
    if (cd "$case" && "$snnc" --train "${how[@]}" model.snn --input=input.npy --labels=labels.npy \
          "${args[@]}" --no-shuffle --grads="$work/$name.grads.$leg.safetensors" \
          -o "$work/$name.w.$leg.safetensors" -q) >>"$log" 2>&1; then
      if ! cmp "$work/$name.grads.$leg.safetensors" "$work/$name.grads.safetensors" >>"$log" 2>&1 ||
         ! cmp "$work/$name.w.$leg.safetensors" "$work/$name.w.safetensors" >>"$log" 2>&1; then
        report "$name (${how[0]} differs from --backend=interp)" "$log"; bad=1; break
      fi
      if [ "$leg" = cpu ]; then compiled=$((compiled + 1)); else on_gpu=$((on_gpu + 1)); fi
    elif ! grep -q "does not differentiate" "$log"; then
      report "$name (${how[0]})" "$log"; bad=1; break
    fi
  done
  [ "$bad" = 1 ] && continue
  ok=1
  for opt in sgd adam; do
    [ -f "$case/$opt.args" ] || continue
    mtol=1e-4
    [ "$opt" = adam ] && mtol=1e-3
    read -r -a oargs < "$case/$opt.args"
    if ! (cd "$case" && "$snnc" --train --backend=interp model.snn --input=input.npy --labels=labels.npy \
            "${args[@]}" "${oargs[@]}" --no-shuffle -o "$work/$name.$opt.safetensors" -q) >>"$log" 2>&1 ||
       ! "$npycmp" --minus "$case/init.safetensors" --rtol 1e-4 --mtol "$mtol" --atol 0 \
         "$work/$name.$opt.safetensors" "$case/$opt.safetensors" \
         >>"$log" 2>&1; then
      report "$name (weights after one $opt step)" "$log"; ok=0; break
    fi
  done
  [ "$ok" = 1 ] && pass=$((pass + 1))
done
echo "training parity: $pass passed ($compiled of them also compiled for the CPU$([ "$has_cpu" = 1 ] || echo " (not in this build)"), $on_gpu on the GPU$([ "$gpu" = 1 ] || echo " (none here)"), equal to the interpreter bit for bit), $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
