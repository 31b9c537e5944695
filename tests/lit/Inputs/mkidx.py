#!/usr/bin/env python3
"""Write a Fashion-MNIST-like test split (t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) into DIR.

mkidx.py DIR [--n N] [--truncate-images K] [--garbage-images]"""
import argparse
import os
import struct

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--n", type=int, default=2)
ap.add_argument("--truncate-images", type=int, default=0)
ap.add_argument("--garbage-images", action="store_true")
a = ap.parse_args()

os.makedirs(a.dir, exist_ok=True)
img = struct.pack(">BBBBIII", 0, 0, 8, 3, a.n, 28, 28) + bytes(i % 256 for i in range(a.n * 784))
lbl = struct.pack(">BBBBI", 0, 0, 8, 1, a.n) + bytes(i % 10 for i in range(a.n))
if a.truncate_images:
    img = img[: len(img) - a.truncate_images]
if a.garbage_images:
    img = b"this is not an IDX file\n"
with open(os.path.join(a.dir, "t10k-images-idx3-ubyte"), "wb") as f:
    f.write(img)
with open(os.path.join(a.dir, "t10k-labels-idx1-ubyte"), "wb") as f:
    f.write(lbl)
