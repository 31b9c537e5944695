#!/usr/bin/env python3
"""Write a .safetensors file by hand (stdlib only).

mkst.py OUT NAME:DTYPE:D1,D2[:X] ... [--fill X] [--spread] [--truncate N] [--hlen N]
        [--offsets NAME=BEGIN,END]
DTYPE is F32, F16, BF16, I64, ...; every tensor is filled with X (its own, else --fill's, default
0.1; BF16 truncates it) and laid out in order (other dtypes are zeros);
--spread makes F32 (F16: rounded to it) element k of each tensor X * (1 + ((k * 37) % 11) / 10),
so neighbours differ.
--truncate drops the last N bytes; --hlen writes N as the header length; --offsets overrides one
tensor's data_offsets in the header."""
import argparse
import json
import struct

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("tensors", nargs="*")
ap.add_argument("--fill", type=float, default=0.1)
ap.add_argument("--spread", action="store_true")
ap.add_argument("--truncate", type=int, default=0)
ap.add_argument("--hlen", type=int)
ap.add_argument("--offsets", action="append", default=[])
a = ap.parse_args()

size = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "F64": 8}
header, data = {}, b""
for spec in a.tensors:
    name, dt, dims, *own = spec.split(":")
    fill = float(own[0]) if own else a.fill
    shape = [int(d) for d in dims.split(",") if d]
    n = 1
    for d in shape:
        n *= d
    if dt in ("F32", "F16") and a.spread:
        body = struct.pack("<%d%s" % (n, "f" if dt == "F32" else "e"),
                           *[fill * (1 + ((k * 37) % 11) / 10) for k in range(n)])
    elif dt == "F32":
        body = struct.pack("<%df" % n, *([fill] * n))
    elif dt == "F16":
        body = struct.pack("<%de" % n, *([fill] * n))
    elif dt == "BF16":  # the top half of the float32 (X exact in bfloat16, or inf/nan)
        body = struct.pack("<%dH" % n, *([struct.unpack("<I", struct.pack("<f", fill))[0] >> 16] * n))
    elif dt == "I64":
        body = struct.pack("<%dq" % n, *([int(fill)] * n))
    else:
        body = b"\0" * (n * size[dt])
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(body)]}
    data += body
for o in a.offsets:
    name, be = o.split("=")
    header[name]["data_offsets"] = [int(x) for x in be.split(",")]
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
hlen = a.hlen if a.hlen is not None else len(h)
blob = struct.pack("<Q", hlen) + h + data
if a.truncate:
    blob = blob[: len(blob) - a.truncate]
with open(a.out, "wb") as f:
    f.write(blob)
