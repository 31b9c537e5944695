"""Reads `ptxas -v` output on stdin; prints each entry function and the bytes it spills (stores),
sorted by name, then "within bounds", or "over N bytes: KERNELS" and exits 1, for --at-most=N."""
import argparse
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--at-most", type=int, required=True)
args = ap.parse_args()
spills = {}
kernel = None
for line in sys.stdin:
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        kernel = m.group(1)
        continue
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and kernel:
        spills[kernel] = int(m.group(1))
if not spills:
    sys.exit("spills.py: no 'Compiling entry function' with spill figures in the input")
for k in sorted(spills):
    print(k, spills[k])
over = [k for k in sorted(spills) if spills[k] > args.at_most]
if over:
    print("over %d bytes: %s" % (args.at_most, " ".join(over)))
    sys.exit(1)
print("within bounds")
