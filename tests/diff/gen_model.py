#!/usr/bin/env python3
"""Random valid .snn models for the differential test (tests/diff/diff.sh). Standard library only.

  gen_model.py SEED                   print the model to stdout
  gen_model.py SEED -o DIR/model.snn --data DIR [--expose-all]
                                      also write, next to it, the inputs (.npy or one .npz), the weights
                                      (model.safetensors, named by the model's `weights` statement, for
                                      about half of the seeds), DIR/args (snnc's data options, one per
                                      line) and DIR/outputs (one line per output: name, readout, what it
                                      reads, its per-sample shape)

Everything is a function of SEED alone (random.Random(int) and the methods used here are stable across
Python 3 versions), so a failing seed reproduces anywhere.

What a model may contain (see docs/language.md): 1-3 inputs (static f32/f16/bf16/spike, per-step
f32/spike [T, ...], ranks 0-4); encoders poisson/bernoulli (gain, seed, stream); layers dense (with and
without bias), conv2d (kernel/stride/pad/dilation as ints or pairs, groups incl. depthwise), conv1d over
[C, L] values, max/avg/sum
pooling (stride 0 or not, padding), flatten, batchnorm (any rank), add/sub/mul, scale (k * x, x / k,
scale(x, f, divisor = d)), delay/prev (1..T+1 steps) and recurrences (dense, conv, direct, two-layer
cycles, through a state probe, of f32-emitting neurons); every prelude neuron with random parameters
(positional and keyword), and 0-3 random user neurons (states, lets, folded parameter expressions, every
neuron function, comparisons, ?:, && || !, fire/fire down, reset = / -= before or after fire, refractory
with constant or state-dependent length, output expressions at any position, surrogates), among them
often a bipolar one whose -1/0/1 spikes feed pooling, conv and dense; readouts
count/mean/rate/last/max/sequence and plain `output y = x`. Layers are nested or bound at random,
attributes positional or by name. T is 1-16; sizes are mostly not multiples of 8. About a third of
the models sum their dense and conv layers in double (`accumulate exact`), the rest in float.

Data: inputs are mixes of uniform values, zeros and exact values such as 0.5 and 1 (ties with
thresholds), spikes 0/1, written as <f4, <f8, <f2, |u1 or |b1 .npy files or one .npz; some models get
subnormals, huge values and (some) inf/NaN. Weights files hold random f32, f16 or bf16 tensors scaled so
that neurons fire, and random batchnorm statistics.

Localisation: unless the seed draws a "few outputs" model (about 1 in 5, for coverage of models whose
intermediate values are not outputs; --expose-all turns it off), every neuron layer has a sequence
output `o_<layer>` and each neuron layer's states get `st_<layer>_<var>` sequence outputs, so a mismatch
names the first layer, step and neuron that differ."""
import argparse
import json
import math
import os
import random
import re
import struct
import sys
import zipfile

# ---- numbers ----


def num(x):
    """A number as .snn text: short, no exponent, always parseable."""
    if isinstance(x, int):
        return str(x)
    s = "%.4f" % x
    s = s.rstrip("0").rstrip(".") if "." in s else s
    if s in ("-0", ""):
        s = "0"
    return s


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---- the prelude's neurons: states and a parameter generator each ----


def _vth(r):
    return r.choice([1.0, 1.0, 0.5, 0.75, r.uniform(0.2, 1.5)])


# per prelude neuron: the parameters its states' initial values use (they cannot be learned)
INIT_PARAMS = {}
_neuron = None
for _line in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontend",
                               "prelude.snn")):
    _m = re.match(r"\s*neuron\s+(\w+)", _line)
    if _m:
        _neuron = _m.group(1)
        INIT_PARAMS[_neuron] = set()
    _m = re.match(r"\s*state\s+\w+\s*=\s*(.*)", _line)
    if _m and _neuron:
        INIT_PARAMS[_neuron] |= set(re.findall(r"[A-Za-z_]\w*", _m.group(1)))

PRELUDE = {
    # name: (states, [(param, generator)], emits f32?, bipolar?)
    "IF": (["v"], [("v_th", _vth), ("v_reset", lambda r: r.choice([0.0, 0.0, -0.3, 0.2]))]),
    "IFSoft": (["v"], [("v_th", _vth)]),
    "LIF": (["v"], [("tau", lambda r: r.choice([2.0, r.uniform(1.1, 6)])), ("v_th", _vth),
                    ("v_reset", lambda r: r.choice([0.0, 0.0, -0.2])),
                    ("decay_input", lambda r: r.choice([0, 1]))]),
    "LIFSoft": (["v"], [("tau", lambda r: r.uniform(1.1, 6)), ("v_th", _vth),
                        ("decay_input", lambda r: r.choice([0, 1]))]),
    "PLIF": (["v"], [("w", lambda r: r.uniform(-2, 2)), ("v_th", _vth),
                     ("v_reset", lambda r: r.choice([0.0, -0.1])),
                     ("decay_input", lambda r: r.choice([0, 1]))]),
    "Leaky": (["u"], [("beta", lambda r: r.choice([0.9, r.uniform(0.3, 1.2)])), ("threshold", _vth)]),
    "LeakyZero": (["u"], [("beta", lambda r: r.uniform(0.3, 1.1)), ("threshold", _vth)]),
    "Synaptic": (["syn", "u"], [("alpha", lambda r: r.uniform(0.2, 1.0)),
                                ("beta", lambda r: r.uniform(0.2, 1.1)), ("threshold", _vth)]),
    "CubaLIF": (["v", "i"], [("tau_syn_inv", lambda r: r.uniform(50, 300)),
                             ("tau_mem_inv", lambda r: r.uniform(50, 300)),
                             ("v_leak", lambda r: r.choice([0.0, 0.1, -0.1])), ("v_th", _vth),
                             ("v_reset", lambda r: r.choice([0.0, -0.1])),
                             ("dt", lambda r: r.choice([0.001, 0.002, 0.005]))]),
    "LIFBox": (["v"], [("tau_mem_inv", lambda r: r.uniform(50, 400)),
                       ("v_leak", lambda r: r.choice([0.0, 0.2])), ("v_th", _vth),
                       ("v_reset", lambda r: r.choice([0.0, -0.1])),
                       ("dt", lambda r: r.choice([0.001, 0.003]))]),
    "ALIF": (["v", "a"], [("tau", lambda r: r.uniform(2, 30)), ("tau_adapt", lambda r: r.uniform(3, 300)),
                          ("beta", lambda r: r.uniform(0.1, 2)), ("v_th", _vth)]),
    "LI": (["v"], [("tau", lambda r: r.uniform(1.1, 8))]),
    "Izhikevich": (["v", "u"], [("a", lambda r: r.choice([0.02, 0.1])), ("b", lambda r: r.choice([0.2, 0.25])),
                                ("c", lambda r: r.choice([-65.0, -50.0, -55.0])),
                                ("d", lambda r: r.choice([8.0, 2.0, 4.0])),
                                ("v_peak", lambda r: r.choice([30.0, 25.0])),
                                ("dt", lambda r: r.choice([1.0, 0.5]))]),
    "STBIF": (["q", "acc_q"], [("q_threshold", lambda r: r.choice([1.0, 0.25, r.uniform(0.05, 1)])),
                               ("level", lambda r: r.choice([4, 8, 16, 5])),
                               ("sym", lambda r: r.choice([0, 1]))]),
}
# gain put in front of a neuron's input so that it fires now and then
INPUT_GAIN = {"Izhikevich": (10.0, 40.0), "CubaLIF": (2.0, 6.0), "LIFBox": (2.0, 6.0), "LIF": (1.5, 3.0),
              "PLIF": (1.5, 4.0), "LIFSoft": (1.5, 3.0)}
F32_EMITTERS = {"LI", "STBIF"}

FUNCS = [("exp", 1), ("log", 1), ("sqrt", 1), ("tanh", 1), ("sigmoid", 1), ("abs", 1), ("floor", 1),
         ("min", 2), ("max", 2), ("pow", 2), ("clamp", 3), ("select", 3)]
SURROGATES = ["atan(alpha = 2.0)", "sigmoid(alpha = 4.0)", "triangle", "superspike(alpha = 100)",
              "sigmoid(alpha = 4, beta = 0.5)"]
ODD = [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 17, 19, 23, 29, 31, 33, 37]


class Val:
    """A value of the model: its text (a name, or a nested expression used once), its sample shape
    (without T and B) and its element kind: 'f' (f32/f16/bf16), 's' (spike 0/1), 'b' (i8 bipolar)."""

    def __init__(self, expr, shape, kind, bound):
        self.expr, self.shape, self.kind, self.bound = expr, tuple(shape), kind, bound

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class Gen:
    """One model: self.r draws the model, self.rd its data and weights, self.ro its outputs (so that
    --expose-all changes the outputs only)."""

    def __init__(self, seed, expose_all):
        self.seed = seed
        self.r = random.Random(seed * 1000003 + 17)
        self.rd = random.Random(seed * 1000003 + 29)   # data and weights
        self.ro = random.Random(seed * 1000003 + 41)   # outputs
        self.rl = random.Random(seed * 1000003 + 53)   # which neuron parameters are learned
        self.expose_all = expose_all
        self.lines = []
        self.neuron_defs = []
        self.custom = {}          # name -> (states, [(param, gen)], emits_f32, bipolar)
        self.pool = []
        self.neurons = []         # (layer name, neuron name, states, shape, kind)
        self.names = set()
        self.counter = 0
        self.wall = []            # (op, name, sizes...) of every named weighted layer made
        self.wnames = set()
        self.inputs = []          # (name, dtype, per_step, shape)
        self.manifest = []
        self.bound = []           # (name, the expression it binds, shape, kind)
        self.direct_outputs = set()  # values that are outputs themselves (output o = v)

    # -- helpers --
    def fresh(self, prefix):
        self.counter += 1
        n = "%s%d" % (prefix, self.counter)
        self.names.add(n)
        return n

    def emit(self, text):
        r = self.r.random()
        if r < 0.05:
            text += ";"
        elif r < 0.08:
            text += "  # step %d" % self.counter
        self.lines.append("  " + text)

    def bind(self, v, prefix="v"):
        if v.bound:
            return v
        name = self.fresh(prefix)
        self.emit("%s = %s" % (name, v.expr))
        self.bound.append((name, v.expr, v.shape, v.kind))
        v.expr, v.bound = name, True
        return v

    def add(self, v, bind_p=0.55, prefix="v"):
        if self.r.random() < bind_p:
            self.bind(v, prefix)
        self.pool.append(v)
        return v

    def take(self, pred=lambda v: True, keep=False):
        cands = [v for v in self.pool if pred(v)]
        if not cands:
            return None
        # prefer recent values a bit: deeper graphs
        k = len(cands)
        i = min(k - 1, int(k * (self.r.random() ** 0.6)))
        v = cands[i]
        if not v.bound and not keep:
            self.pool.remove(v)
        return v

    def layer_name(self, op):
        """an explicit name attribute for a weighted layer (always when the model has a weights file, so
        the file's tensor names are known; sometimes otherwise)"""
        if self.use_weights or self.r.random() < 0.2:
            while True:
                self.counter += 1
                n = self.r.choice(["%s%d", "blk.%s.%d", "layer%d.%s"])
                n = n % ((op, self.counter) if n.startswith("%s") or n.startswith("blk")
                         else (self.counter, op))
                if n not in self.wnames:
                    self.wnames.add(n)
                    return n
        return None

    def args(self, positional, order):
        """attributes written positionally up to a random point of `order`, then by name"""
        out = list(positional)
        k = self.r.randint(0, len(order))
        pos_ok = True
        for i, (key, text) in enumerate(order):
            if text is None:
                pos_ok = False
                continue
            if pos_ok and i < k:
                out.append(text)
            else:
                pos_ok = False
                out.append("%s = %s" % (key, text))
        return ", ".join(out)

    # -- inputs --
    def gen_inputs(self):
        r = self.r
        n_in = r.choice([1, 1, 2, 2, 3])
        for k in range(n_in):
            name = r.choice(["x", "img", "ev", "u", "inp"]) + str(k)
            self.names.add(name)
            per_step = r.random() < 0.45
            kind = r.random()
            if kind < 0.2:
                dtype = "spike"
            elif kind < 0.27:
                dtype = "f16"
            elif kind < 0.32:
                dtype = "bf16"
            else:
                dtype = "f32"
            rk = r.random()
            if rk < 0.45:
                shape = (r.choice(ODD + [4, 8, 12, 16, 24]),)
            elif rk < 0.85:
                shape = (r.randint(1, 4), r.randint(3, 11), r.randint(3, 11))
            elif rk < 0.92:
                shape = (r.randint(2, 5), r.randint(2, 7))
            elif rk < 0.96 and per_step:
                shape = ()
            else:
                shape = (2, r.randint(1, 3), 2, r.randint(2, 3))
            if shape == () and not per_step:
                shape = (3,)
            dims = (["T"] if per_step else []) + [str(d) for d in shape]
            self.lines.append("  input %s : %s[%s]" % (name, dtype, ", ".join(dims)))
            self.inputs.append((name, dtype, per_step, shape))
            v = Val(name, shape, "s" if dtype == "spike" else "f", True)
            self.pool.append(v)
            # encoders
            if dtype != "spike" and r.random() < 0.3:
                enc = r.choice(["poisson", "poisson", "bernoulli"])
                a = [name]
                if r.random() < 0.5:
                    a.append("gain = %s" % num(r.choice([1.0, 0.5, 2.0, r.uniform(0.3, 3)])))
                if r.random() < 0.4:
                    a.append("seed = %d" % r.choice([-1, 0, 7, 12345, r.randint(1, 10 ** 6)]))
                if r.random() < 0.2:
                    a.append("stream = %d" % r.choice([-1, 0, 3]))
                self.add(Val("%s(%s)" % (enc, ", ".join(a)), shape, "s", False), 0.7, "e")

    # -- layers --
    def dense(self, src, out=None, bias=None):
        r = self.r
        out = out or r.choice(ODD + [4, 8, 16])
        bias = r.random() < 0.7 if bias is None else bias
        name = self.layer_name("fc")
        order = [("out", str(out)), ("bias", "true" if bias else "false")]
        if bias and r.random() < 0.5:
            order[1] = ("bias", None)
        if name:
            order.append(("name", '"%s"' % name))
        op = r.choice(["dense", "dense", "linear"])
        v = Val("%s(%s)" % (op, self.args([src.expr], order)), (out,), "f", False)
        if name:
            self.wall.append(("dense", name, out, src.numel(), bias))
        return v

    def conv_out(self, h, k, s, p, d):
        return (h + 2 * p - d * (k - 1) - 1) // s + 1

    def conv2d(self, src, same=False, out=None, bias=None):
        r = self.r
        c, h, w = src.shape
        groups = 1
        if r.random() < 0.3:
            divs = [g for g in range(2, c + 1) if c % g == 0]
            if divs:
                groups = r.choice(divs)
        if out is None:
            out = groups * r.randint(1, max(1, 6 // groups)) if groups > 1 else r.randint(1, 7)
        assert out % groups == 0
        for _ in range(50):
            kh, kw = r.choice([1, 2, 3, 3, 5]), r.choice([1, 2, 3, 3])
            if r.random() < 0.6:
                kw = kh
            sh = sw = r.choice([1, 1, 1, 2, 3])
            if r.random() < 0.2:
                sw = r.choice([1, 2])
            dh = dw = r.choice([1, 1, 1, 2])
            ph, pw = r.randint(0, kh // 2 + 1), r.randint(0, kw // 2 + 1)
            if same:
                kh, kw = r.choice([1, 3, 3, 5]), r.choice([1, 3])
                sh = sw = 1
                ph, pw = dh * (kh - 1) // 2, dw * (kw - 1) // 2
            oh, ow = self.conv_out(h, kh, sh, ph, dh), self.conv_out(w, kw, sw, pw, dw)
            if oh >= 1 and ow >= 1 and (not same or (oh, ow) == (h, w)):
                break
        else:
            kh = kw = 1
            sh = sw = dh = dw = 1
            ph = pw = 0
            oh, ow = h, w
        bias = r.random() < 0.6 if bias is None else bias

        def pair(a, b, allow_int=True):
            return str(a) if a == b and allow_int and r.random() < 0.8 else "(%d, %d)" % (a, b)

        name = self.layer_name("conv")
        order = [("out", str(out)), ("kernel", pair(kh, kw))]
        for key, a, b, dflt in (("stride", sh, sw, 1), ("pad", ph, pw, 0), ("dilation", dh, dw, 1)):
            if (a, b) != (dflt, dflt) or r.random() < 0.2:
                order.append((key, pair(a, b)))
            else:
                order.append((key, None))
        if groups != 1 or r.random() < 0.1:
            order.append(("groups", str(groups)))
        else:
            order.append(("groups", None))
        if not bias or r.random() < 0.2:
            order.append(("bias", "true" if bias else "false"))
        else:
            order.append(("bias", None))
        if name:
            order.append(("name", '"%s"' % name))
        v = Val("conv2d(%s)" % self.args([src.expr], order), (out, oh, ow), "f", False)
        if name:
            self.wall.append(("conv2d", name, out, c // groups, kh, kw, bias))
        return v

    def conv1d(self, src):
        """conv1d over a [C, L] value: stride, padding, dilation, groups, bias at random"""
        r = self.r
        c, l = src.shape
        groups = 1
        if r.random() < 0.3:
            divs = [g for g in range(2, c + 1) if c % g == 0]
            if divs:
                groups = r.choice(divs)
        out = groups * r.randint(1, max(1, 6 // groups)) if groups > 1 else r.randint(1, 7)
        for _ in range(50):
            k, s, d = r.choice([1, 2, 3, 3, 5]), r.choice([1, 1, 2, 3]), r.choice([1, 1, 2])
            p = r.randint(0, k // 2 + 1)
            ol = self.conv_out(l, k, s, p, d)
            if ol >= 1:
                break
        else:
            k, s, d, p, ol = 1, 1, 1, 0, l
        bias = r.random() < 0.6
        name = self.layer_name("conv")
        order = [("out", str(out)), ("kernel", str(k)),
                 ("stride", str(s) if s != 1 or r.random() < 0.2 else None),
                 ("pad", str(p) if p or r.random() < 0.2 else None),
                 ("dilation", str(d) if d != 1 or r.random() < 0.2 else None),
                 ("groups", str(groups) if groups != 1 or r.random() < 0.1 else None),
                 ("bias", ("true" if bias else "false") if not bias or r.random() < 0.2 else None)]
        if name:
            order.append(("name", '"%s"' % name))
        v = Val("conv1d(%s)" % self.args([src.expr], order), (out, ol), "f", False)
        if name:
            self.wall.append(("conv1d", name, out, c // groups, k, bias))
        return v

    def pool2d(self, src):
        r = self.r
        c, h, w = src.shape
        op = r.choice(["maxpool2d", "maxpool", "avgpool2d", "avgpool", "sumpool2d", "sumpool"])
        for _ in range(50):
            kh = r.randint(1, min(3, h + 1))
            kw = kh if r.random() < 0.7 else r.randint(1, min(3, w + 1))
            ph, pw = r.randint(0, kh // 2), r.randint(0, kw // 2)
            if r.random() < 0.5:
                ph = pw = 0
            stride = r.choice([0, 0, 1, 2, 3])
            sh = sw = stride if stride else None
            eh, ew = sh or kh, sw or kw
            if h + 2 * ph >= kh and w + 2 * pw >= kw:
                break
        else:
            kh = kw = 1
            ph = pw = 0
            stride, sh, sw, eh, ew = 0, None, None, 1, 1
        oh, ow = (h + 2 * ph - kh) // eh + 1, (w + 2 * pw - kw) // ew + 1
        ks = str(kh) if kh == kw and r.random() < 0.8 else "(%d, %d)" % (kh, kw)
        order = [("kernel", ks)]
        order.append(("stride", str(stride)) if stride or r.random() < 0.2 else ("stride", None))
        if ph or pw or r.random() < 0.1:
            order.append(("pad", str(ph) if ph == pw else "(%d, %d)" % (ph, pw)))
        kind = src.kind if op.startswith("max") else "f"
        return Val("%s(%s)" % (op, self.args([src.expr], order)), (c, oh, ow), kind, False)

    def batchnorm(self, src):
        r = self.r
        name = self.layer_name("bn")
        order = []
        if r.random() < 0.3:
            order.append(("eps", num(r.choice([1e-3, 0.01, 0.1, 0.0001]))))
        else:
            order.append(("eps", None))
        if name:
            order.append(("name", '"%s"' % name))
        v = Val("batchnorm(%s)" % self.args([src.expr], order), src.shape, "f", False)
        if name:
            self.wall.append(("batchnorm", name, src.shape[0]))
        return v

    def scale(self, src, factor=None):
        r = self.r
        f = factor if factor is not None else r.choice([2.0, 0.5, -1.0, 3.0, r.uniform(-2, 4)])
        form = r.random()
        if form < 0.5:
            e = "%s * %s" % (num(f), self.paren(src))
        elif form < 0.7:
            e = "%s / %s" % (self.paren(src), num(r.choice([2.0, 3.0, 0.7, 7.0])))
        elif form < 0.85:
            e = "scale(%s, %s, divisor = %s)" % (src.expr, num(f), num(r.choice([3.0, 1.0, 0.3])))
        else:
            e = "scale(%s, factor = %s)" % (src.expr, num(f))
        return Val(e, src.shape, "f", False)

    def paren(self, v):
        """v's text as an operand of * / + -: a name or a call as it is, anything else in parentheses"""
        e = v.expr
        if v.bound or is_call(e):
            return e
        return "(%s)" % e

    def binop(self, a, b):
        op = self.r.choice(["+", "+", "-", "*", "add", "sub", "mul"])
        if op in "+-*":
            return Val("%s %s %s" % (self.paren(a), op, self.paren(b)), a.shape, "f", False)
        return Val("%s(%s, %s)" % (op, a.expr, b.expr), a.shape, "f", False)

    def partner(self, v):
        """another value of v's shape: from the pool, or made for it"""
        r = self.r
        same = [p for p in self.pool if p.shape == v.shape and p is not v and p.bound]
        if same and r.random() < 0.6:
            return r.choice(same)
        src = self.take(lambda p: p is not v and p.bound, keep=True) or v
        if len(v.shape) == 1:
            return self.dense(src, v.shape[0])
        if len(v.shape) == 3 and v.bound:
            t = r.random()
            if t < 0.4:
                return self.conv2d(v, same=True, out=v.shape[0])
            if t < 0.7:
                return self.neuron_layer(v, bound=False)
            return Val("prev(%s)" % v.expr, v.shape, v.kind, False)
        if v.bound:
            return Val("prev(%s)" % v.expr if r.random() < 0.5 else "delay(%s, steps = %d)" % (v.expr, r.randint(1, 3)),
                       v.shape, v.kind, False)
        return None

    # -- neurons --
    def call_neuron(self, nname, current):
        r = self.r
        states, params = (PRELUDE.get(nname) or self.custom[nname])[:2]
        args = [current]
        vals = [(p, g(r)) for p, g in params]
        k = r.randint(0, len(vals))
        positional = r.random() < 0.5
        for i, (p, v) in enumerate(vals):
            # a prelude neuron's parameter learned (p = learn(x)) where the model has no weights
            # file (the seeded value is x) and it sets no state's initial value
            val = num(v)
            if (nname in PRELUDE and not self.use_weights and p not in INIT_PARAMS.get(nname, ())
                    and self.rl.random() < 0.2):
                val = "learn(%s)" % val
            if positional and i < k:
                args.append(val)
                continue
            positional = False
            if r.random() < 0.6:
                args.append("%s = %s" % (p, val))
        if r.random() < 0.5:
            # keyword order does not matter
            head, kw = args[: 1 + (k if positional else 0)], args[1 + (k if positional else 0):]
            pos = [a for a in kw if "=" not in a]
            kw = [a for a in kw if "=" in a]
            r.shuffle(kw)
            args = head + pos + kw
        return "%s(%s)" % (nname, ", ".join(args))

    def pick_neuron(self):
        r = self.r
        if self.custom and r.random() < 0.35:
            return r.choice(sorted(self.custom))
        return r.choice(sorted(PRELUDE))

    def neuron_info(self, nname):
        if nname in self.custom:
            states, _, emits_f, bip = self.custom[nname]
            return states, ("f" if emits_f else "b" if bip else "s")
        states = PRELUDE[nname][0]
        return states, "f" if nname in F32_EMITTERS else "s"

    def current(self, src, nname):
        r = self.r
        lo_hi = INPUT_GAIN.get(nname)
        if lo_hi and r.random() < (0.9 if nname == "Izhikevich" else 0.6):
            return self.scale(src, r.uniform(*lo_hi)).expr
        if r.random() < 0.2:
            return self.scale(src, r.uniform(1.0, 3.0)).expr
        return src.expr

    def neuron_layer(self, src, bound=True, nname=None, name=None):
        nname = nname or self.pick_neuron()
        states, kind = self.neuron_info(nname)
        v = Val(self.call_neuron(nname, self.current(src, nname)), src.shape, kind, False)
        if bound:
            name = name or self.fresh("s")
            self.emit("%s = %s" % (name, v.expr))
            v.expr, v.bound = name, True
            self.neurons.append((name, nname, states, src.shape, kind))
        return v

    # -- recurrences --
    def recurrence(self):
        r = self.r
        src = self.take()
        if src is None:
            return
        t = r.random()
        h = self.fresh("h")
        nname = self.pick_neuron()
        states, kind = self.neuron_info(nname)
        if len(src.shape) == 3 and r.random() < 0.6:
            feed = self.conv2d(src) if r.random() < 0.7 else src
            if not all(d >= 1 for d in feed.shape):
                feed = src
            shape = feed.shape
            rec = Val("prev(%s)" % h, shape, kind, False)
            if r.random() < 0.6:
                if r.random() < 0.3:
                    rec = Val("delay(%s, steps = %d)" % (h, r.randint(1, self.T + 1)), shape, kind, False)
                rec = self.conv2d(rec, same=True, out=shape[0], bias=r.random() < 0.3)
            cur = self.binop(feed, rec) if r.random() < 0.8 else Val(
                "%s - %s" % (self.paren(feed), self.paren(rec)), shape, "f", False)
            self.emit_neuron(h, nname, cur, shape, kind, states)
            return
        n = r.choice(ODD + [8, 16])
        feed = self.dense(src, n) if (len(src.shape) != 1 or r.random() < 0.8) else src
        n = feed.shape[0] if len(feed.shape) == 1 else feed.numel()
        if len(feed.shape) != 1:
            feed = self.dense(src, n)
        if t < 0.35:
            # h = N(dense(x) + dense(prev(h)))
            steps = r.choice([1, 1, 1, 2, self.T, self.T + 1])
            d = "prev(%s)" % h if steps == 1 and r.random() < 0.7 else (
                "prev(%s, %d)" % (h, steps) if r.random() < 0.5 else "delay(%s, steps = %d)" % (h, steps))
            rec = self.dense(Val(d, (n,), kind, False), n, bias=r.random() < 0.3)
            self.emit_neuron(h, nname, self.binop(feed, rec), (n,), kind, states)
        elif t < 0.55:
            # h = N(x + k * prev(h))
            rec = Val("prev(%s)" % h, (n,), kind, False)
            if r.random() < 0.6:
                rec = self.scale(rec, r.uniform(-1, 1))
            self.emit_neuron(h, nname, self.binop(feed, rec), (n,), kind, states)
        elif t < 0.75:
            # a two-layer cycle: a = N1(dense(x) + dense(prev(b))); b = N2(dense(a))
            b = self.fresh("h")
            nname2 = self.pick_neuron()
            states2, kind2 = self.neuron_info(nname2)
            m = r.choice(ODD)
            rec = self.dense(Val("prev(%s)" % b if r.random() < 0.7 else "delay(%s, steps = 2)" % b,
                                 (m,), kind2, False), n, bias=False)
            self.emit_neuron(h, nname, self.binop(feed, rec), (n,), kind, states)
            mid = Val(h, (n,), kind, True)
            self.emit_neuron(b, nname2, self.dense(mid, m), (m,), kind2, states2)
        elif t < 0.88:
            # through a state probe: h = N(x + k * prev(hv)); hv = state(h, "v")
            var = r.choice(states)
            hv = self.fresh("st")
            rec = self.scale(Val("prev(%s)" % hv, (n,), "f", False), r.uniform(-0.5, 0.5))
            self.emit_neuron(h, nname, self.binop(feed, rec), (n,), kind, states)
            self.emit('%s = state(%s, "%s")' % (hv, h, var))
            self.pool.append(Val(hv, (n,), "f", True))
        else:
            # a recurrent readout-like layer of an f32-emitting neuron
            nname = r.choice(["LI", "STBIF"] + [c for c in sorted(self.custom) if self.custom[c][2]])
            states, kind = self.neuron_info(nname)
            rec = self.dense(Val("prev(%s)" % h, (n,), kind, False), n, bias=False)
            self.emit_neuron(h, nname, self.binop(feed, rec), (n,), kind, states)

    def emit_neuron(self, h, nname, cur, shape, kind, states):
        text = self.call_neuron(nname, self.current(cur, nname))
        self.emit("%s = %s" % (h, text))
        self.neurons.append((h, nname, states, shape, kind))
        self.pool.append(Val(h, shape, kind, True))

    # -- user neurons --
    def gen_custom_neuron(self, name, bipolar=False):
        """a random user neuron; bipolar: one that emits -1/0/1 spikes (i8 values)"""
        r = self.r
        # th: the threshold; others: decays, gains, offsets
        pvals = {"th": r.choice([1.0, 0.5, r.uniform(0.3, 1.5)])}
        params = ["th"]
        for i in range(r.randint(0, 3)):
            p = r.choice(["k", "g", "tau", "a", "b"]) + str(i)
            pvals[p] = r.choice([r.uniform(0.2, 2.0), 1.0, 0.5, 2.0, float(r.randint(1, 4))])
            params.append(p)
        r.shuffle(params)
        ref_param = None
        if r.random() < 0.25:
            ref_param = "t_ref"
            pvals[ref_param] = float(r.choice([1, 2, 3]))
            params.append(ref_param)
        nstates = r.randint(1, 3)
        states = ["v", "w", "z"][:nstates]
        main = states[0]
        lets = []

        def atom(allow_state=True):
            pool = states + lets + ["I", "I", "spike"] if allow_state else []
            if r.random() < 0.35 or not pool:
                return r.choice(params) if r.random() < 0.6 else num(r.choice(
                    [0.0, 1.0, 0.5, 2.0, -1.0, 0.25, r.uniform(-2, 3)]))
            return r.choice(pool)

        def expr(d, allow_state=True):
            """a random expression: arithmetic, every function, comparisons (0/1), ?:, && || !"""
            if d <= 0 or r.random() < 0.25:
                return atom(allow_state)
            c = r.random()
            if c < 0.45:
                op = r.choice(["+", "-", "*", "*", "/"])
                return "(%s %s %s)" % (expr(d - 1, allow_state), op, expr(d - 1, allow_state))
            if c < 0.75:
                f, k = r.choice(FUNCS)
                return "%s(%s)" % (f, ", ".join(expr(d - 1, allow_state) for _ in range(k)))
            if c < 0.82:
                return "-%s" % atom(allow_state)
            if c < 0.9:
                return "(%s %s %s ? %s : %s)" % (atom(allow_state), r.choice(["<", ">=", "==", "!="]),
                                                 atom(allow_state), expr(d - 1, allow_state),
                                                 expr(d - 1, allow_state))
            cmpx = "(%s %s %s)" % (atom(allow_state), r.choice(["<", "<=", ">", ">="]), atom(allow_state))
            if r.random() < 0.5:
                cmpx = "(%s %s %s%s %s)" % (cmpx, r.choice(["&&", "||", "and", "or"]),
                                            r.choice(["", "!", "not "]), atom(allow_state),
                                            r.choice(["> 0", "< 1", "== 0"]))
            return cmpx

        def decay():
            p = r.choice(params)
            return r.choice(["exp(-1.0 / %s)" % p, "(1 - 1 / (%s + 1))" % p, "sigmoid(%s)" % p,
                             "clamp(%s, 0, 1)" % p, num(r.uniform(0.2, 0.95)), "0.9"])

        def drive():
            """the input term of the main state: I, scaled, or with a small random extra"""
            return r.choice(["I", "I", "I * %s" % r.choice(params), "%s * I" % decay(),
                             "I + 0.1 * tanh(%s)" % expr(1), "I - %s * 0.1" % r.choice(states)])

        def update(s):
            if s == main:
                t = r.random()
                if t < 0.55:
                    return "%s = %s * %s + %s" % (s, s, decay(), drive())
                if t < 0.75:
                    return "%s = %s + (%s - %s) / (%s + 1)" % (s, s, drive(), s, r.choice(params))
                if t < 0.9:
                    return "%s = clamp(%s + %s, -8, 8)" % (s, s, drive())
                return "%s = %s + %s" % (s, drive(), expr(2))
            t = r.random()
            if t < 0.4:
                return "%s = %s * %s + %s" % (s, s, decay(), r.choice(["I", expr(1), expr(2)]))
            if t < 0.7:
                return "%s = clamp(%s, -4, 4)" % (s, expr(2))
            return "%s = %s" % (s, expr(r.randint(1, 3)))

        # state initial values: parameters and numbers only
        decls = []
        for s in states:
            init = r.choice(["0", "0", "0.0", num(r.uniform(-0.5, 0.5)), r.choice(params),
                             "%s * 0.5" % r.choice(params)])
            decls.append("state %s = %s" % (s, init))
        body = []
        if r.random() < 0.5:
            # a parameter-only let: folded once in double
            ln = "l%d" % len(lets)
            body.append("let %s = %s" % (ln, r.choice(["1 - 1 / %s" % r.choice(params),
                                                        "%s * %s + 0.1" % (r.choice(params), r.choice(params)),
                                                        "exp(-%s)" % r.choice(params), expr(2, False)])))
            lets.append(ln)
        order = states[1:] + [main] if r.random() < 0.5 else list(states)
        for s in order:
            body.append(update(s))
            if r.random() < 0.25:
                ln = "l%d" % len(lets)
                body.append("let %s = %s" % (ln, expr(2)))
                lets.append(ln)
        # fire
        thr = "th"
        if nstates > 1 and r.random() < 0.3:
            thr = "th + %s * 0.2" % states[-1]
        elif r.random() < 0.15:
            thr = num(r.choice([1.0, 0.5]))
        c = r.random()
        if c < 0.08:
            fire = "fire %s < -%s" % (main, "th")
        else:
            fire = "fire %s %s %s" % (main, r.choice([">=", ">"]), thr)
        if r.random() < 0.12:
            fire += " %s %s < %s" % (r.choice(["&&", "and"]), states[-1], num(r.uniform(1, 5)))
        elif r.random() < 0.08:
            fire += " %s I > %s" % (r.choice(["||", "or"]), num(r.uniform(1, 3)))
        bip = r.random() < 0.2 or bipolar
        reset_before = r.random() < 0.25
        rst = None
        if r.random() < 0.85:
            if r.random() < 0.5:
                rst = "reset %s = %s" % (main, r.choice(["0", "0.0", r.choice(params), "-%s" % r.choice(params)]))
            else:
                rst = "reset %s -= %s" % (main, r.choice(["th", "1", "th * 0.5", r.choice(params)]))
        stmts = list(body)
        if rst and reset_before:
            stmts.append(rst)
        stmts.append(fire)
        if bip:
            stmts.append("fire down %s %s -th" % (main, r.choice(["<=", "<"])))
        if rst and not reset_before:
            stmts.append(rst)
        # after fire: spike-driven updates (adaptation)
        if nstates > 1 and r.random() < 0.6:
            s = states[-1]
            stmts.append("%s = %s * %s + %s" % (s, s, decay(), r.choice(["spike", "spike * %s" % r.choice(params),
                                                                          "abs(spike)"])))
        refr = None
        if r.random() < 0.3:
            refr = r.choice(["1", "2", "3", "1.5", "0", "2", "%s * 2" % main, "abs(%s) + 1" % main, "-1"])
        if ref_param:
            refr = ref_param
        if refr is not None:
            stmts.append("refractory %s" % refr)
        emits_f = r.random() < 0.35 and not bipolar
        if emits_f:
            out = r.choice(["%s" % main, "spike * %s" % r.choice(params), expr(2),
                            "%s + %s" % (main, lets[-1] if lets else "I")])
            pos = r.randint(len(body), len(stmts)) if r.random() < 0.2 else len(stmts)
            stmts.insert(pos, "output %s" % out)
        if r.random() < 0.3:
            stmts.append("surrogate %s" % r.choice(SURROGATES))
        head = "neuron %s(%s) {" % (name, ", ".join("%s = %s" % (p, num(pvals[p])) for p in params))
        text = [head] + ["  " + d for d in decls + stmts] + ["}"]
        self.neuron_defs.append("\n".join(text))

        def pgen(v):
            return lambda rr: rr.choice([v, v, round(v * rr.uniform(0.5, 1.5), 3)])

        self.custom[name] = (states, [(p, pgen(pvals[p])) for p in params], emits_f, bip and not emits_f)

    # -- the model --
    def generate(self):
        r = self.r
        self.T = r.choice([1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 11, 16])
        self.use_weights = r.random() < 0.5
        for i in range(r.choice([0, 1, 1, 2, 3])):
            self.gen_custom_neuron(r.choice(["N", "Cell", "Custom", "My"]) + str(i))
        self.bipolar = None
        if r.random() < 0.3:
            self.bipolar = "Bip"
            self.gen_custom_neuron(self.bipolar, bipolar=True)
        if r.random() < 0.05:
            # a user neuron replacing a prelude one
            self.gen_custom_neuron("IF")
            del PRELUDE["IF"]
        header = ["model m%d {" % self.seed, "  timesteps %d" % self.T]
        if r.random() < 0.6:
            header.append("  seed %d" % r.choice([0, 1, 42, r.randint(0, 2 ** 31)]))
        if self.use_weights:
            header.append('  weights "model.safetensors"')
        # double sums for about a third of the models, float ones (the default) for the rest (a
        # generator of its own, so that the rest of a seed's model is what it was before)
        if random.Random(self.seed * 1000003 + 53).random() < 0.35:
            header.append("  accumulate exact")
        self.lines = []
        self.gen_inputs()
        nsteps = r.randint(3, 8)
        for _ in range(nsteps):
            self.step()
        if not self.neurons:
            src = self.take() or self.pool[0]
            self.neuron_layer(src if src.bound else self.bind(src))
        body = self.lines
        self.lines = []
        self.gen_outputs()
        self.gen_layouts()
        self.gen_activations()
        self.text = "\n\n".join(self.neuron_defs + ["\n".join(header + body + self.lines) + "\n}"]) + "\n"
        return self.text

    def collect_wdecls(self):
        """the weighted layers that made it into the model (values never used are never written)"""
        return [d for d in self.wall if '"%s"' % d[1] in self.text]

    def step(self):
        r = self.r
        c = r.random()
        chw = lambda v: len(v.shape) == 3
        if c < 0.25:
            src = self.take()
            if len(src.shape) > 1 and r.random() < 0.3:
                src = Val("flatten(%s)" % src.expr, (src.numel(),), src.kind, False)
            self.add(self.dense(src), 0.5, "fc")
            src = self.take(lambda v: v.kind == "f" and not v.bound) or self.take(lambda v: v.kind == "f")
            if src is not None and r.random() < 0.8:
                self.neuron_layer(self.bind(src) if r.random() < 0.3 else src)
                self.pool.append(Val(self.neurons[-1][0], src.shape, self.neurons[-1][4], True))
        elif c < 0.45 and r.random() < 0.25 and self.take(lambda v: len(v.shape) == 2, keep=True):
            v = self.conv1d(self.take(lambda v: len(v.shape) == 2))
            self.neuron_layer(v)
            self.pool.append(Val(self.neurons[-1][0], v.shape, self.neurons[-1][4], True))
        elif c < 0.45:
            src = self.take(chw)
            if src is None:
                return self.step_neuron()
            v = self.conv2d(src)
            if r.random() < 0.35:
                v = self.batchnorm(v)
            self.neuron_layer(v)
            self.pool.append(Val(self.neurons[-1][0], v.shape, self.neurons[-1][4], True))
            if r.random() < 0.5:
                src = self.take(chw)
                if src is not None:
                    self.add(self.pool2d(src), 0.6, "p")
        elif c < 0.55:
            src = self.take(chw)
            if src is None:
                return self.step_neuron()
            self.add(self.pool2d(src), 0.6, "p")
        elif c < 0.63:
            src = self.take(lambda v: len(v.shape) >= 1)
            if src is None:
                return
            self.add(self.batchnorm(src), 0.6, "bn")
        elif c < 0.73:
            a = self.take(lambda v: v.bound, keep=True)
            if a is None:
                return
            b = self.partner(a)
            if b is None:
                return
            self.add(self.binop(a, b), 0.6, "m")
        elif c < 0.78:
            src = self.take()
            self.add(self.scale(src), 0.6, "k")
        elif c < 0.83:
            src = self.take(lambda v: v.bound, keep=True)
            steps = r.choice([1, 1, 2, 3, self.T, self.T + 1])
            e = r.choice(["prev(%s)" % src.expr, "delay(%s, steps = %d)" % (src.expr, steps),
                          "prev(%s, %d)" % (src.expr, steps)])
            self.add(Val(e, src.shape, src.kind, False), 0.6, "d")
        elif c < 0.88:
            self.recurrence()
        elif c < 0.93:
            self.step_bipolar()
        elif c < 0.97:
            src = self.take(lambda v: len(v.shape) > 1)
            if src is not None:
                self.add(Val("flatten(%s)" % src.expr, (src.numel(),), src.kind, False), 0.5, "f")
        else:
            # a state probe used as a layer input
            if self.neurons:
                name, nname, states, shape, kind = self.r.choice(self.neurons)
                self.add(Val('state(%s, %s"%s")' % (name, r.choice(["", "var = "]), r.choice(states)),
                             shape, "f", False), 0.5, "q")
            else:
                self.step_neuron()

    def step_bipolar(self):
        """-1/0/1 spikes (i8) into the layers that read spikes: pooling, conv, dense, arithmetic"""
        r = self.r
        src = self.take()
        if src is None or not self.bipolar:
            return self.step_neuron() if src is not None else None
        v = self.neuron_layer(src, nname=self.bipolar)
        self.pool.append(v)
        if len(v.shape) == 3 and r.random() < 0.7:
            self.add(self.pool2d(v) if r.random() < 0.6 else self.conv2d(v), 0.6, "p")
        elif r.random() < 0.5:
            self.add(self.dense(v), 0.5, "fc")

    def step_neuron(self):
        src = self.take()
        if src is not None:
            self.neuron_layer(src)
            self.pool.append(Val(self.neurons[-1][0], src.shape, self.neurons[-1][4], True))

    def gen_outputs(self):
        r = self.ro
        few = not self.expose_all and r.random() < 0.2
        self.few = few
        outs = []
        for name, nname, states, shape, kind in self.neurons:
            if few and r.random() < 0.7:
                continue
            form = r.random()
            e = name if form < 0.3 else "sequence(%s)" % name
            if e == name:
                self.direct_outputs.add(name)
            outs.append(("o_" + name, e, "sequence", "%s (%s layer)" % (name, nname), shape))
            for s in states:
                if few and r.random() < 0.8:
                    continue
                outs.append(("st_%s_%s" % (name, s), 'sequence(state(%s, "%s"))' % (name, s), "sequence",
                             'state(%s, "%s")' % (name, s), shape))
        # readouts of neuron layers and of other values (bound ones: nested ones are single-use)
        cands = [v for v in self.pool if v.bound]
        for i in range(r.randint(1, 4)):
            v = r.choice(cands)
            ro = r.choice(["count", "mean", "rate", "last", "max", "sequence"])
            outs.append(("r%d_%s" % (i, ro), "%s(%s)" % (ro, v.expr), ro, v.expr, v.shape))
        if few and not outs:
            v = r.choice(cands)
            outs.append(("r_last", "last(%s)" % v.expr, "last", v.expr, v.shape))
        # the first output is the one accuracy reads; any order is valid
        head = outs[-1:] if r.random() < 0.5 else []
        outs = head + [o for o in outs if o not in head]
        for name, e, ro, what, shape in outs:
            self.lines.append("  output %s = %s" % (name, e))
            self.manifest.append((name, ro, what, shape))

    def gen_layouts(self):
        """`layout V : bits` for some 0/1 spike values with memory of their own (8k elements per
        sample, not a flatten, not an input or an output): whatever reads them (sequence outputs,
        neuron layers, pooling, elementwise ops) then reads single bits. A generator of its own, so
        the models of every seed stay what they were. -1/0/1 values (4k elements per sample) get
        bit pairs likewise, half of them, from a generator of their own."""
        inputs = {i[0] for i in self.inputs}
        rb = random.Random(self.seed * 1000003 + 59)
        for name, e, shape, kind in ([(x[0], "", x[3], x[4]) for x in self.neurons] +
                                     list(self.bound)):
            n = 1
            for d in shape:
                n *= d
            if (kind == "b" and n % 4 == 0 and not e.startswith("flatten(") and
                    name not in inputs and name not in self.direct_outputs and rb.random() < 0.5):
                self.lines.append("  layout %s : bits" % name)
        r = random.Random(self.seed * 1000003 + 53)
        if r.random() >= 0.3:
            return
        cands = [(n, shape) for n, _, shape, kind, *_ in
                 [(x[0], None, x[3], x[4]) for x in self.neurons] if kind == "s"]
        cands += [(n, shape) for n, e, shape, kind in self.bound
                  if kind == "s" and not e.startswith("flatten(")]
        for name, shape in cands:
            n = 1
            for d in shape:
                n *= d
            if n % 8 or name in inputs or name in self.direct_outputs or r.random() < 0.4:
                continue
            self.lines.append("  layout %s : bits" % name)

    def gen_activations(self):
        """`activations V : f16|bf16` for some bound dense, linear and conv layers: their outputs
        rounded to 16 bits everywhere, stored in 16-bit buffers (or, summed in a GPU scan at -O3,
        rounded in a register), and kept out of fold-batchnorm. A generator of its own, so the
        models of every seed stay what they were."""
        r = random.Random(self.seed * 1000003 + 71)
        if r.random() >= 0.3:
            return
        for name, e, _, _ in self.bound:
            if (is_call(e) and e.split("(")[0] in ("dense", "linear", "conv2d", "conv1d") and
                    r.random() < 0.6):
                self.lines.append("  activations %s : %s" % (name, r.choice(["f16", "bf16"])))

    # -- data --
    def value(self, dtype):
        r = self.rd
        if dtype == "spike":
            return 1.0 if r.random() < 0.3 else 0.0
        c = r.random()
        if c < self.specials:
            # -0, subnormals (no flush to zero anywhere), huge values (inf after f16 rounding), and for
            # some models inf and NaN
            return r.choice([-0.0, -0.0, 1e-40, -3e-39, 1e-45, 7e4, -1e30] +
                            ([float("inf"), float("-inf"), float("nan")] if self.nonfinite else []))
        if c < 0.15:
            return 0.0
        if c < 0.35:
            return r.choice([1.0, 0.5, 0.25, -0.5, 2.0, 1.5, 0.75, 3.0, -1.0])
        return f32(r.uniform(-1.0, 2.5))

    def write_data(self, d, nsamples):
        r = self.rd
        self.specials = r.choice([0.0, 0.0, 0.0, 0.01, 0.03])
        self.nonfinite = r.random() < 0.3
        files = []
        use_npz = len(self.inputs) > 1 and r.random() < 0.3
        arrays = {}
        for name, dtype, per_step, shape in self.inputs:
            full = (nsamples,) + ((self.T,) if per_step else ()) + shape
            n = 1
            for x in full:
                n *= x
            vals = [self.value(dtype) for _ in range(n)]
            if dtype == "spike":
                descr = r.choice(["<f4", "<f4", "|u1", "|b1", "<f8"])
            elif dtype == "f16":
                descr = r.choice(["<f4", "<f2"])
            else:
                descr = r.choice(["<f4"] * 6 + ["<f8"])
            arrays[name] = npy(full, descr, vals)
        if use_npz:
            path = os.path.join(d, "inputs.npz")
            comp = zipfile.ZIP_DEFLATED if r.random() < 0.5 else zipfile.ZIP_STORED
            with zipfile.ZipFile(path, "w", comp) as z:
                for name, blob in arrays.items():
                    z.writestr(name + ".npy", blob)
            files.append("--input=%s" % path)
        else:
            for name, blob in arrays.items():
                path = os.path.join(d, "in_%s.npy" % name)
                with open(path, "wb") as f:
                    f.write(blob)
                files.append("--input=%s" % path if len(arrays) == 1 and r.random() < 0.5
                             else "--input=%s=%s" % (name, path))
        if r.random() < 0.2:
            files.append("--seed=%d" % r.randint(0, 1000))
        return files

    def write_weights(self, path):
        r = self.rd
        tensors = []
        for decl in self.wdecls:
            op, name = decl[0], decl[1]
            if op == "dense":
                _, _, out, fan_in, bias = decl
                a = r.choice([1.0, 1.5, 2.5]) / math.sqrt(fan_in)
                tensors.append((name + ".weight", [out, fan_in], [r.uniform(-a, a * 1.2) for _ in range(out * fan_in)]))
                if bias:
                    tensors.append((name + ".bias", [out], [r.uniform(-0.3, 0.6) for _ in range(out)]))
            elif op == "conv1d":
                _, _, out, cin, k, bias = decl
                a = r.choice([1.0, 2.0]) / math.sqrt(cin * k)
                n = out * cin * k
                tensors.append((name + ".weight", [out, cin, k], [r.uniform(-a, a * 1.2) for _ in range(n)]))
                if bias:
                    tensors.append((name + ".bias", [out], [r.uniform(-0.3, 0.6) for _ in range(out)]))
            elif op == "conv2d":
                _, _, out, cin, kh, kw, bias = decl
                fan_in = cin * kh * kw
                a = r.choice([1.0, 2.0]) / math.sqrt(fan_in)
                n = out * cin * kh * kw
                tensors.append((name + ".weight", [out, cin, kh, kw], [r.uniform(-a, a * 1.2) for _ in range(n)]))
                if bias:
                    tensors.append((name + ".bias", [out], [r.uniform(-0.3, 0.6) for _ in range(out)]))
            else:
                _, _, c = decl
                tensors.append((name + ".weight", [c], [r.uniform(0.5, 2.0) for _ in range(c)]))
                tensors.append((name + ".bias", [c], [r.uniform(-0.5, 0.8) for _ in range(c)]))
                tensors.append((name + ".running_mean", [c], [r.uniform(-0.5, 0.5) for _ in range(c)]))
                tensors.append((name + ".running_var", [c], [r.uniform(0.2, 2.0) for _ in range(c)]))
        dt = r.choice(["F32", "F32", "F32", "F16", "BF16"])
        r.shuffle(tensors)
        write_safetensors(path, tensors, dt)


def is_call(e):
    """NAME(...) where the first parenthesis closes at the end"""
    i = e.find("(")
    if i <= 0 or not e.endswith(")") or not all(c.isalnum() or c == "_" for c in e[:i]):
        return False
    depth = 0
    for j in range(i, len(e)):
        depth += {"(": 1, ")": -1}.get(e[j], 0)
        if depth == 0:
            return j == len(e) - 1
    return False


def npy(shape, descr, vals):
    fmt = {"<f4": "f", "<f8": "d", "<f2": "e", "|u1": "B", "|b1": "?"}[descr]
    if fmt in "B?":
        vals = [int(v) for v in vals]
    elif fmt == "e":
        # beyond the largest half (65504, rounding up from 65520): inf, as numpy's astype(float16) does
        vals = [math.copysign(math.inf, v) if abs(v) >= 65520 else v for v in vals]
    body = struct.pack("<%d%s" % (len(vals), fmt), *vals)
    shape_s = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_s)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + body


def write_safetensors(path, tensors, dt):
    header, data = {}, b""
    for name, shape, vals in tensors:
        if dt == "F32":
            body = struct.pack("<%df" % len(vals), *vals)
        elif dt == "F16":
            body = struct.pack("<%de" % len(vals), *vals)
        else:  # BF16: the high half of the float32 (truncation is fine: any bf16 is a valid weight)
            body = b"".join(struct.pack("<f", v)[2:] for v in vals)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(body)]}
        data += body
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("-o", dest="out")
    ap.add_argument("--data")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--expose-all", action="store_true")
    a = ap.parse_args()
    g = Gen(a.seed, a.expose_all)
    text = g.generate()
    if not a.out:
        sys.stdout.write(text)
        return
    with open(a.out, "w") as f:
        f.write(text)
    d = a.data or os.path.dirname(os.path.abspath(a.out))
    os.makedirs(d, exist_ok=True)
    args = g.write_data(d, a.samples)
    if g.use_weights:
        g.wdecls = g.collect_wdecls()
        g.write_weights(os.path.join(os.path.dirname(os.path.abspath(a.out)), "model.safetensors"))
    with open(os.path.join(d, "args"), "w") as f:
        f.write("\n".join(args) + "\n")
    if g.few:
        with open(os.path.join(d, "few"), "w") as f:
            f.write("not every neuron layer is an output: gen_model.py --expose-all makes them all outputs\n")
    with open(os.path.join(d, "outputs"), "w") as f:
        for name, ro, what, shape in g.manifest:
            f.write("%s\t%s\t%s\t%s\n" % (name, ro, what, ",".join(str(x) for x in shape)))


if __name__ == "__main__":
    main()
