#!/usr/bin/env python3
"""Print a float32 .npy (as snnc writes it) for FileCheck: 'shape: (N, ...)' then one line per row of
the last dimension, each value with %g. dumpnpy.py FILE [--name NAME] reads member NAME.npy of an .npz."""
import ast
import struct
import sys
import zipfile

path = sys.argv[1]
if len(sys.argv) > 3 and sys.argv[2] == "--name":
    with zipfile.ZipFile(path) as z:
        blob = z.read(sys.argv[3] + ".npy")
else:
    with open(path, "rb") as f:
        blob = f.read()
assert blob[:6] == b"\x93NUMPY", "not an npy file"
major = blob[6]
if major == 1:
    hlen = struct.unpack("<H", blob[8:10])[0]
    start = 10
else:
    hlen = struct.unpack("<I", blob[8:12])[0]
    start = 12
hdr = ast.literal_eval(blob[start : start + hlen].decode("latin1"))
assert hdr["descr"] == "<f4", hdr
shape = tuple(hdr["shape"])
n = 1
for d in shape:
    n *= d
vals = struct.unpack("<%df" % n, blob[start + hlen : start + hlen + 4 * n])
print("shape: %s" % (shape,))
row = shape[-1] if shape and shape[-1] else 1
for i in range(0, n, row):
    print(" ".join("%g" % v for v in vals[i : i + row]))
