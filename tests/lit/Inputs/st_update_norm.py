"""W0 W1 G LIMIT: one SGD step of lr 1 from W0 to W1 under --clip-grad-norm=LIMIT with raw
gradients G (--grads): the update W0 - W1 is G scaled by LIMIT / (|G| + 1e-6), so its global norm
is LIMIT (to the float rounding of W0 - update); the inputs' gradients in G are not clipped. Prints the norms; fails otherwise. Safetensors read by hand (numpy only)."""
import json
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], np.float32).astype(np.float64)
    return out


w0, w1, g = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3])
g = {k: v for k, v in g.items() if k in w0}  # the weights' (--grads adds the inputs')
limit = float(sys.argv[4])
gnorm = np.sqrt(sum(float((v ** 2).sum()) for v in g.values()))
upd = {k: w0[k] - w1[k] for k in w0}
unorm = np.sqrt(sum(float((v ** 2).sum()) for v in upd.values()))
assert gnorm > limit, (gnorm, limit)
coef = limit / (gnorm + 1e-6)
for k in g:
    assert np.allclose(upd[k], g[k] * coef, rtol=1e-3, atol=3e-8), k
assert abs(unorm - limit) <= 1e-3 * limit, (unorm, limit)
print(f"clipped: update norm {unorm:.6f} of gradient norm {gnorm:.6f}")
