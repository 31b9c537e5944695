#!/usr/bin/env python3
"""Write a little-endian .npy file by hand (tests must not need numpy).

mknpy.py OUT --shape 2,4 (--fill X | --values a,b,c,...) [--descr <f4] [--truncate N]
         [--header-only | --rows K]
The values are repeated to fill the shape. --truncate drops the last N bytes of the file;
--header-only writes the header alone and --rows K the data of the first K rows only (files that
claim more than they hold)."""
import argparse
import struct

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--shape", required=True)
ap.add_argument("--fill", type=float)
ap.add_argument("--values")
ap.add_argument("--descr", default="<f4")
ap.add_argument("--truncate", type=int, default=0)
ap.add_argument("--header-only", action="store_true")
ap.add_argument("--rows", type=int)
a = ap.parse_args()

shape = tuple(int(d) for d in a.shape.split(",") if d)
n = 1
for d in shape:
    n *= d
full = shape
if a.header_only:
    n = 0
elif a.rows is not None:
    n = n // shape[0] * a.rows
vals = [a.fill if a.fill is not None else 0.0]
if a.values:
    vals = [float(v) for v in a.values.split(",")]
data = [vals[i % len(vals)] for i in range(n)]
fmt = {"<f4": "f", "<f8": "d", "<i8": "q", "|u1": "B"}[a.descr]
if fmt in "qB":
    data = [int(v) for v in data]
body = struct.pack("<%d%s" % (n, fmt), *data)

shape_s = "(" + ", ".join(str(d) for d in full) + ("," if len(full) == 1 else "") + ")"
header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (a.descr, shape_s)
pad = 64 - (10 + len(header) + 1) % 64
header = header + " " * (pad % 64) + "\n"
blob = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + body
if a.truncate:
    blob = blob[: len(blob) - a.truncate]
with open(a.out, "wb") as f:
    f.write(blob)
