"""U Q LABELS PREFIX: the inputs' gradients of the first batch of 4 (PREFIX.O.gc.safetensors, O
the loss's output: c = count(u), m = mean(u), l = last(u), lq = last(q), T = 3) equal
cross-entropy's through each readout, computed here: (softmax(z) - onehot) / 4 times dz/dinput
(3 for a count of a static input, 1 for its mean and last, the last step only for a per-step
input's last). Safetensors read by hand (numpy only)."""
import json
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             np.float32).reshape(v["shape"])
            for k, v in head.items() if k != "__metadata__"}


u, q, y = (np.load(a)[:4].astype(np.float64) for a in sys.argv[1:4])
oh = np.eye(6)[y.astype(int)]


def ce_grad(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True) - oh) / 4


want = {"c": ("u", 3 * ce_grad(3 * u)), "m": ("u", ce_grad(u)), "l": ("u", ce_grad(u))}
for o, (name, g) in want.items():
    got = read(f"{sys.argv[4]}.{o}.gc.safetensors")
    assert np.allclose(got[name + ".grad"], g, rtol=1e-5, atol=1e-7), (o, got[name + ".grad"], g)
    assert not got["q.grad"].any(), o
got = read(f"{sys.argv[4]}.lq.gc.safetensors")["q.grad"]
assert np.allclose(got[:, 2], ce_grad(q[:, 2]), rtol=1e-5, atol=1e-7), got
assert not got[:, :2].any(), got
print("readout gradients ok")
