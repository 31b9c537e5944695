#!/usr/bin/env bash
# Found by the random-model test (seed 19 of the first version with special input values): count and
# mean of a value that is -0 at every step are -0 in the interpreter but +0 in the kernel IR and the CPU
# backend. ir/interp.c starts the sum with the first step's value (`t == 0 ? x : acc + x`: -0 stays -0),
# codegen/kir_lower.c lower_readout starts it at +0.0 (+0 + -0 = +0). npycmp cannot see it (it compares
# with ==), so this script compares the sign bits. Which sign is right is for the owners to say; the
# backends must agree. -0 at every step arises from -0 inputs, and inside a model too (e.g. a decaying
# negative membrane that underflows, `x * 0` of a negative x, a scale by -1 of a zero).
# Usage: count-negative-zero.sh SNNC [WORK_DIR]; exit 0 when every backend gives the same bits.
set -u
snnc=$1 work=${2:-$(mktemp -d)}
mkdir -p "$work"
cat >"$work/nz.snn" <<'SNN'
model nz {
  timesteps 2
  input x : f32[2]
  output c = count(x)
  output m = mean(x)
}
SNN
python3 - "$work/x.npy" <<'PY'
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }"
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() +
                              struct.pack("<2f", -0.0, 1.0))
PY
for be in interp kir cpu; do
  prec=()
  [ $be = interp ] && prec=(--precision=f32)
  "$snnc" --run -q --backend=$be "${prec[@]}" "$work/nz.snn" --input="$work/x.npy" --output="$work/$be.npz" || exit 1
done
python3 - "$work" <<'PY'
import sys, zipfile
def bits(path):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n)[-8:].hex() for n in sorted(z.namelist())}  # the 2 floats of sample 0
got = {be: bits("%s/%s.npz" % (sys.argv[1], be)) for be in ("interp", "kir", "cpu")}
for be, b in got.items():
    print("%-6s count(x), mean(x) bits: %s" % (be, b))
same = got["interp"] == got["kir"] == got["cpu"]
print("ok: the backends agree bit for bit" if same else "FAIL: count/mean of -0 differ in the sign of zero")
sys.exit(0 if same else 1)
PY
