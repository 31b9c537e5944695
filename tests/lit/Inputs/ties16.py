#!/usr/bin/env python3
"""f32 values where rounding to a 16-bit type decides, as the f32 weights of a dense layer.

ties16.py OUT.safetensors EXPECTED.npy [--bf16]
For every finite IEEE binary16 value (bfloat16 with --bf16) a below the largest: a itself, the
point halfway to the next value up in magnitude (a tie: rounds to the even one) and the floats just
below and above it. Writes OUT.safetensors holding 'd.weight' of shape [N, 1] and EXPECTED.npy,
shape [1, N]: what dense(x, N, bias = false) stored as f16 (bf16) gives for x = [1.0], each value
rounded to nearest, ties to even (numpy's float16 conversion; bfloat16 by integer rounding)."""
import json
import struct
import sys

import numpy as np

out, expected = sys.argv[1:3]
is_bf16 = "--bf16" in sys.argv[3:]
bits = np.arange(1 << 16, dtype=np.uint32)
bits = bits[(bits & 0x7fff) < (0x7f7f if is_bf16 else 0x7bff)]  # finite, with a finite next
if is_bf16:
    a, b = (bits << 16).view(np.float32), ((bits + 1) << 16).view(np.float32)
else:
    a = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    b = (bits + 1).astype(np.uint16).view(np.float16).astype(np.float32)
mid = ((a.astype(np.float64) + b.astype(np.float64)) / 2).astype(np.float32)  # exact
m = mid.view(np.uint32)
w = np.stack([a, (m - 1).view(np.float32), mid, (m + 1).view(np.float32)], axis=1).reshape(-1)
if is_bf16:
    u = w.view(np.uint32)
    want = (((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
else:
    want = w.astype(np.float16).astype(np.float32)
data = w.reshape(-1, 1).tobytes()
header = json.dumps({"d.weight": {"dtype": "F32", "shape": [len(w), 1],
                                  "data_offsets": [0, len(data)]}}).encode()
header += b" " * (-len(header) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + data)
np.save(expected, want.reshape(1, -1))
