"""Every tensor of a safetensors file (f32) has a non-zero element: FILE (batchnorm's running
statistics, which no gradient reaches, are left out); --zero=NAME: that tensor is all zeros
instead (an input's gradient through a Poisson encoder: sampling passes none). Reads the format itself
(an 8-byte little-endian header length, a JSON header, the data), so it needs numpy only."""
import json
import struct
import sys

import numpy as np

zero = {a[len("--zero="):] for a in sys.argv[2:] if a.startswith("--zero=")}
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
sums = {}
for name, t in header.items():
    if name == "__metadata__" or ".running_" in name:
        continue
    assert t["dtype"] == "F32", t
    a, b = t["data_offsets"]
    sums[name] = float(np.abs(np.frombuffer(data[a:b], np.float32)).sum())
print(sums)
assert zero <= sums.keys(), (zero, sums)
assert sums and all((v == 0) == (k in zero) for k, v in sums.items()), sums
