"""safetensors files with numpy alone (the tests do not need the safetensors package): load(path)
-> {name: array} (float32/float16, shapes kept, 0-d too), save({name: array}, path) as float32."""
import json
import struct

import numpy as np

_DT = {"F32": np.float32, "F16": np.float16}


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], _DT[t["dtype"]]).reshape(t["shape"])
    return out


def save(tensors, path):
    header, chunks, off = {}, [], 0
    for name, v in tensors.items():
        b = np.asarray(v, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(v)), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
