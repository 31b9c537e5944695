#!/usr/bin/env python3
"""npzdiff.py OUTPUTS_MANIFEST GOT.npz EXPECTED.npz: bit-for-bit comparison of two of snnc's
.npz outputs (float32 arrays), stricter than npycmp --exact on one point: +0 and -0 differ (any two NaNs
are equal, as in npycmp: their payloads are not specified). Exit status 1 if anything differs.

It also says where: for each output that differs, how many values differ and its first difference,
earliest step first over all samples -- which layer (from gen_model.py's manifest: output name,
readout, what it reads, per-sample shape), sample, step and neuron (the flat index within the sample's
layer, and as a [c, h, w]-style index)."""
import ast
import struct
import sys
import zipfile


def load(path):
    out = {}
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            b = z.read(n)
            if b[6] == 1:
                hl, at = struct.unpack("<H", b[8:10])[0], 10
            else:
                hl, at = struct.unpack("<I", b[8:12])[0], 12
            h = ast.literal_eval(b[at:at + hl].decode("latin1"))
            cnt = 1
            for d in h["shape"]:
                cnt *= d
            if h["descr"] != "<f4":
                raise SystemExit("npzdiff: %s: %s is %s, not <f4" % (path, n, h["descr"]))
            body = b[at + hl:at + hl + 4 * cnt]
            out[n[:-4]] = (list(h["shape"]), struct.unpack("<%dI" % cnt, body),
                           struct.unpack("<%df" % cnt, body))
    return out


def is_nan(bits):
    return (bits & 0x7FFFFFFF) > 0x7F800000


def main():
    argv = sys.argv[1:]
    man = {}
    for line in open(argv[0]):
        name, ro, what, shape = line.rstrip("\n").split("\t")
        man[name] = (ro, what, [int(d) for d in shape.split(",") if d])
    order = {name: i for i, name in enumerate(man)}
    got, exp = load(argv[1]), load(argv[2])
    rows = []
    for name, (shape, ebits, evals) in exp.items():
        if name not in got or got[name][0] != shape:
            rows.append((-1, 0, "%s: missing, or of another shape (%s, expected %s)"
                         % (name, got[name][0] if name in got else "none", shape)))
            continue
        gbits, gvals = got[name][1], got[name][2]
        ro, what, sshape = man.get(name, ("?", "?", shape[1:]))
        seq = ro == "sequence"
        per_sample = len(evals) // shape[0] if shape and shape[0] else 1
        per_step = per_sample // shape[1] if seq and len(shape) > 1 and shape[1] else per_sample
        bad, first = 0, None
        for i, (p, q) in enumerate(zip(gbits, ebits)):
            if p == q or (is_nan(p) and is_nan(q)):
                continue
            bad += 1
            sample, rest = divmod(i, per_sample)
            step, neuron = divmod(rest, per_step) if seq else (None, rest)
            key = (step if seq else 10 ** 9, sample, neuron)
            if first is None or key < first[0]:
                first = (key, sample, step, neuron, gvals[i], evals[i])
        if not bad:
            continue
        key, sample, step, neuron, x, y = first
        idx, k = [], neuron
        for d in reversed(sshape):
            idx.insert(0, k % d)
            k //= d
        where = "sample %d, %sneuron %d%s" % (sample, "step %d, " % step if seq else "", neuron,
                                              " %s" % idx if len(idx) > 1 else "")
        rows.append((key[0], order.get(name, 0),
                     "%s = %s(%s): %d of %d values differ; first: %s: got %.9g, expected %.9g"
                     % (name, ro, what, bad, len(evals), where, x, y)))
    rows.sort(key=lambda r: (r[0], r[1]))
    for _, _, text in rows:
        print("    " + text)
    if rows and 0 <= rows[0][0] < 10 ** 9:
        print("    the earliest step that differs is %d (%s)" % (rows[0][0], rows[0][2].split(" =")[0]))
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
