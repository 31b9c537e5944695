#!/usr/bin/env bash
# Found by the random-model test (seed 29): `snnc --run --input=FILE.npz` crashed (SIGSEGV, every
# backend) when the .npz held an array per input of a model with several inputs. driver/snnc.c
# load_inputs moved each bound array out of the set with memset(t, 0, ...), name included, and the
# lookup of the next input strcmp()ed that NULL name. Fixed in 589758f (the lookup skips moved arrays);
# no other test reads a multi-array .npz, so this stays as its regression test.
# Usage: npz-two-inputs.sh SNNC [WORK_DIR]; exit 0 when snnc reads the file and runs.
set -u
snnc=$1 work=${2:-$(mktemp -d)}
mkdir -p "$work"
cat >"$work/two.snn" <<'SNN'
model two {
  timesteps 2
  input a : f32[3]
  input b : f32[3]
  output o = IF(a + b)
}
SNN
python3 - "$work/two.npz" <<'PY'
import struct, sys, zipfile
def npy(vals):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }"
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<3f", *vals)
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("a.npy", npy([0.5, 0.25, 1.0]))
    z.writestr("b.npy", npy([0.5, 0.0, 1.0]))
PY
"$snnc" --run -q --backend=interp "$work/two.snn" --input="$work/two.npz" --output="$work/out.npy"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: snnc exited with status $rc reading a two-array .npz"; exit 1; }
echo "ok: a two-array .npz is read"
