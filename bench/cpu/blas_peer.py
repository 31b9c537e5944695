#!/usr/bin/env python3
"""snnc's dense layer over real inputs against the BLAS libraries, on the MLP's fc1 shape.

    python3 bench/cpu/blas_peer.py [--threads 2] [--json bench/cpu/blas_peer.json]

The MLP example's fc1 at batch 256 is a [256 x 784] x [784 x 256] float product (the static
layer, once per batch). It times cblas_sgemm of Debian's OpenBLAS (libopenblas0-pthread: its own
core detection, and forced to its AVX-512 kernels with OPENBLAS_CORETYPE=SkylakeX) and BLIS
(libblis4-pthread), torch.mm (MKL/oneDNN), each the median of 300 calls on the same inputs, and
snnc's fc1 kernel from `snnc --run --profile` on 8,192 Fashion-MNIST images. A library that is
missing is reported as such (apt-get install libopenblas0-pthread libblis4-pthread). Each
library's product is checked against numpy's to float tolerance: their sums run in their own
blocked order, which is why snnc does not call them (its float sums add each output's terms in
one order, the interpreter's, on every backend and thread count; docs/benchmarks.md).
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SNNC = ROOT / "build-rel" / "driver" / "snnc"
B, K, N = 256, 784, 256
LIBS = {"openblas": "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
        "blis": "/usr/lib/x86_64-linux-gnu/libblis.so.4"}


def child(name, threads):
    """one library in this process (its threads fixed by the environment the parent set)"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((B, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((B, N), np.float32)
    if name == "torch":
        import torch
        torch.set_num_threads(threads)
        ta, tw = torch.from_numpy(a), torch.from_numpy(w)

        def call():
            with torch.inference_mode():
                c[:] = (ta @ tw).numpy()
    else:
        lib = ctypes.CDLL(LIBS[name.split("-")[0]])
        f = lib.cblas_sgemm
        p = ctypes.c_void_p
        f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, p, ctypes.c_int, p, ctypes.c_int,
                                           ctypes.c_float, p, ctypes.c_int]

        def call():  # row-major, no transposes
            f(101, 111, 111, B, N, K, 1.0, a.ctypes.data, K, w.ctypes.data, N, 0.0, c.ctypes.data, N)
    call()
    ts = []
    for _ in range(300):
        t = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t)
    if not np.allclose(c, a @ w, rtol=1e-4, atol=1e-3):
        return {"error": "product differs from numpy's"}
    md = sorted(ts)[len(ts) // 2]
    return {"median_ms": round(md * 1e3, 4), "gflops": round(2 * B * K * N / md * 1e-9, 1)}


def snnc_fc1(threads):
    if not SNNC.exists():
        return {"error": f"{SNNC} not built (cmake --build build-rel)"}
    cmd = [str(SNNC), "--run", str(ROOT / "examples/fmnist_mlp.snn"), "--data=fashion-mnist",
           "--limit=8192", "--batch=256", f"--threads={threads}", "--profile"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    for line in (p.stdout + p.stderr).splitlines():
        m = re.match(r"\s+([0-9.]+)\s+[0-9.]+%\s+([0-9.]+)\s+[0-9.]+\s+dense_fc1$", line)
        if m:
            secs = float(m.group(1)) / (8192 // B)
            return {"median_ms": round(secs * 1e3, 4), "gflops": float(m.group(2)),
                    "command": " ".join(cmd)}
    return {"error": (p.stderr or p.stdout)[-400:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.threads)))
        return
    t = str(a.threads)
    runs = {"openblas": {}, "openblas-avx512": {"OPENBLAS_CORETYPE": "SkylakeX"}, "blis": {},
            "torch": {}}
    res = {"shape": [B, K, N], "threads": a.threads}
    for name, extra in runs.items():
        lib = LIBS.get(name.split("-")[0])
        if lib and not os.path.exists(lib):
            res[name] = {"skipped": f"{lib} missing (apt-get install libopenblas0-pthread "
                                    "libblis4-pthread)"}
            continue
        env = dict(os.environ, OPENBLAS_NUM_THREADS=t, BLIS_NUM_THREADS=t, OMP_NUM_THREADS=t,
                   **extra)
        p = subprocess.run([sys.executable, __file__, "--child", name, "--threads", t], env=env,
                           capture_output=True, text=True)
        res[name] = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
            {"error": p.stderr[-400:]}
    res["snnc_fc1"] = snnc_fc1(a.threads)
    for k, v in res.items():
        if isinstance(v, dict):
            print(f"{k:16s} {v.get('gflops', '-'):>8} GFLOP/s  {v.get('median_ms', '')} ms"
                  f"  {v.get('error', v.get('skipped', ''))}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
