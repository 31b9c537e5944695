#!/usr/bin/env python3
"""Check `snnc --emit=cuda` output against runtime/cuda_abi.h, and PTX compiled from it.

cuda_abi_check.py CU [PTX...]
CU: the --emit=cuda text. Its leading comments hold the cuda_buf and cuda_kernel records; every
cuda_kernel record must have exactly one extern "C" __global__ definition of its symbol whose
parameters are its NB buffers (pointers to their cuda_buf element types, in record order; never an
input or output, whose addresses come through dyn), then
long long B, long long t, const long long *dyn. Kernel indices run 0..n-1; buffer indices
increase and name cuda_buf records; WORK is RPN over integers, B and + - * / % >= leaving one value
(`single` kernels: WORK 1). Each PTX file must define every kernel as a .visible .entry with
NB + 3 parameters. Prints "ok: N kernels, M buffers" (and one line per PTX file), else the
problems, exit status 1."""
import re
import sys

CTYPES = {"f32": "float", "f64": "double", "i64": "long long", "u8": "unsigned char",
          "bool": "unsigned char", "i8": "signed char", "f16": "unsigned short",
          "bf16": "unsigned short"}
problems = []


def fail(msg):
    problems.append(msg)


def rpn_ok(toks):
    depth = 0
    for t in toks:
        if t == "B" or t.isdigit():
            depth += 1
        elif t in ("+", "-", "*", "/", "%", ">="):
            if depth < 2:
                return False
            depth -= 1
        else:
            return False
    return depth == 1


text = open(sys.argv[1]).read()
records = [l[3:] for l in text.splitlines() if l.startswith("// cuda_")]
bufs = [r.split() for r in records if r.startswith("cuda_buf ")]
kernels = [r.split() for r in records if r.startswith("cuda_kernel ")]
if not kernels:
    fail("no cuda_kernel records")
defs = {}
for m in re.finditer(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)',
                     text):
    if m.group(1) in defs:
        fail("%s is defined twice" % m.group(1))
    defs[m.group(1)] = [p.strip() for p in m.group(2).split(",")]
for i, k in enumerate(kernels):
    index, sym, step, mode, nb = int(k[1]), k[2], k[3], k[4], int(k[5])
    ids = [int(b) for b in k[6:6 + nb]]
    work = k[6 + nb:]
    if index != i:
        fail("cuda_kernel %d is record %d" % (index, i))
    if step not in ("0", "1") or mode not in ("grid", "single"):
        fail("%s: STEP %s MODE %s" % (sym, step, mode))
    if ids != sorted(set(ids)) or any(b < 0 or b >= len(bufs) for b in ids):
        fail("%s: buffer indices %s" % (sym, ids))
    elif any(bufs[b][2] in ("input", "output") for b in ids):
        fail("%s: an input or output buffer as a parameter (they come through dyn)" % sym)
    if not rpn_ok(work) or (mode == "single" and work != ["1"]):
        fail("%s: WORK %s" % (sym, " ".join(work)))
    params = defs.pop(sym, None)
    if params is None:
        fail("%s: no extern \"C\" __global__ definition" % sym)
        continue
    if len(params) != nb + 3:
        fail("%s: %d parameters for %d buffers" % (sym, len(params), nb))
        continue
    for b, p in zip(ids, params):
        want = CTYPES.get(bufs[b][3] if b < len(bufs) else "", "?")
        if not re.fullmatch(r"(const )?%s \*(__restrict__ )?\w+" % re.escape(want), p):
            fail("%s: parameter '%s' for buffer %d (%s)" % (sym, p, b, want))
    tail = params[nb:]
    if (not re.fullmatch(r"long long B", tail[0]) or not re.fullmatch(r"long long t", tail[1])
            or not re.fullmatch(r"const long long \*(__restrict__ )?dyn", tail[2])):
        fail("%s: last parameters %s" % (sym, tail))
for sym in defs:
    fail("%s is a __global__ function without a cuda_kernel record" % sym)
for ptx in sys.argv[2:]:
    ptext = open(ptx).read()
    entries = {m.group(1): m.group(2).count(".param")
               for m in re.finditer(r"\.visible \.entry (\w+)\(([^)]*)\)", ptext)}
    for k in kernels:
        n = entries.get(k[2])
        if n is None:
            fail("%s: no .entry %s" % (ptx, k[2]))
        elif n != int(k[5]) + 3:
            fail("%s: .entry %s has %d parameters, not %d" % (ptx, k[2], n, int(k[5]) + 3))
    target = re.search(r"^\.target (\w+)", ptext, re.M)
    print("%s: %d entries, .target %s" % (ptx.rsplit("/", 1)[-1], len(entries),
                                          target.group(1) if target else "?"))
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("ok: %d kernels, %d buffers" % (len(kernels), len(bufs)))
