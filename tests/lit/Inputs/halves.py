#!/usr/bin/env python3
"""Every finite IEEE binary16 value (or bfloat16 with --bf16) as the f32 weight of a dense layer.

halves.py OUT.safetensors EXPECTED.npy [--bf16]
Writes OUT.safetensors holding 'd.weight' of shape [N, 1] (f32, each value exactly a 16-bit one)
and EXPECTED.npy, shape [1, N]: what dense(x, N, bias = false) gives for x = [1.0]."""
import json
import struct
import sys

import numpy as np

out, expected = sys.argv[1:3]
bits = np.arange(1 << 16, dtype=np.uint32)
if "--bf16" in sys.argv[3:]:
    w = (bits << 16).view(np.float32)
else:
    w = bits.astype(np.uint16).view(np.float16).astype(np.float32)
w = w[np.isfinite(w)].reshape(-1, 1)
data = w.tobytes()
header = json.dumps({"d.weight": {"dtype": "F32", "shape": list(w.shape),
                                  "data_offsets": [0, len(data)]}}).encode()
header += b" " * (-len(header) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + data)
np.save(expected, w.reshape(1, -1))
