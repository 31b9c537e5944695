#!/usr/bin/env python3
"""Batch-1 latency of the conv SNN, snnc against the JAX peer, in alternating rounds.

    python3 bench/cpu/latency_rounds.py [--rounds 5] [--runs 200] [--json OUT.json]

handwritten.py measures each implementation once, one after the other. On a shared 2-vCPU host
whose speed drifts by 5-20% over minutes, that order decides part of a ratio. Here the two
measurements alternate, round after round, each as handwritten.py takes it: snnc's model.so (f32
sums, the default, weights embedded) through bench/snnc_bench (`--latency-runs` single-image runs
after 5 warm-ups, median), and the JAX peer (bench/cpu/jax_peer.py: jit + lax.scan, median of
`--latency-runs` single-image calls after 10 warm-ups), both on the first 64 test images, 2
threads. Reported: every round's pair, each side's median over rounds, and the median of the
per-round ratios (JAX / snnc), which a slow or fast stretch of the host moves least. The JAX
peer is the closest at batch 1 (torch.compile by hand: about 5 ms, handwritten.py); the issue's
goal is a ratio of at least 5.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import jax_peer  # noqa: E402  (no jax import in this process)

BUILD = Path(os.environ.get("SNNC_BUILD", ROOT / "build-rel"))
SNNC, SNNC_BENCH = BUILD / "driver" / "snnc", BUILD / "bench" / "snnc_bench"
MODEL = ROOT / "examples" / "fmnist_conv.snn"
WEIGHTS = ROOT / "examples" / "fmnist_conv.safetensors"
DATA = Path(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
IMAGES = 64


def test_images(n: int) -> np.ndarray:
    with gzip.open(DATA / "t10k-images-idx3-ubyte.gz", "rb") as f:
        raw = f.read()
    imgs = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n]
    return imgs.astype(np.float32) / 255  # as torchvision ToTensor and snnc --data=fashion-mnist


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=200, help="single-image runs per measurement")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    for p in (SNNC, SNNC_BENCH):
        if not p.exists():
            sys.exit(f"latency_rounds.py: {p} is missing: build {BUILD} first (README)")
    work = Path(tempfile.mkdtemp(prefix="snnc_latency_"))
    so = work / "conv.so"
    build = [str(SNNC), str(MODEL), "-o", str(so), "--cuda-arch=none", "-q"]
    subprocess.run(build, check=True)
    imgs = work / "images.npy"
    np.save(imgs, test_images(IMAGES))
    bench = [str(SNNC_BENCH), str(so), "--threads=2", "--fmnist", "--batch=1", f"--limit={IMAGES}",
             "--repeats=1", f"--latency-runs={a.runs}"]
    jax_args = [f"--input={imgs}", f"--weights={WEIGHTS}", f"--batch={IMAGES}", "--repeats=1",
                f"--latency-runs={a.runs}", "--latency-warmup=10", "--threads=2"]
    rounds = []
    for k in range(a.rounds):
        r = json.loads(subprocess.run(bench, check=True, capture_output=True, text=True).stdout)
        s_ms = r["latency_b1_ms"]
        j = jax_peer.run("conv", jax_args, work)
        if "error" in j:
            sys.exit(f"latency_rounds.py: the JAX peer failed: {j['error']}")
        j_ms = j["latency_b1"]["median_ms"]
        rounds.append({"snnc_ms": s_ms, "jax_ms": j_ms, "ratio": round(j_ms / s_ms, 3),
                       "load_avg": os.getloadavg()[0]})
        print(f"round {k + 1}/{a.rounds}: snnc {s_ms:.4f} ms, JAX {j_ms:.4f} ms, "
              f"ratio {j_ms / s_ms:.2f}", flush=True)
    med = {
        "snnc_ms": statistics.median(r["snnc_ms"] for r in rounds),
        "jax_ms": statistics.median(r["jax_ms"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
    }
    print(f"medians over {a.rounds} rounds: snnc {med['snnc_ms']:.4f} ms, JAX {med['jax_ms']:.4f} ms;"
          f" median per-round ratio {med['ratio']:.2f} (goal 5)")
    if a.json:
        out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
               "cpu": platform.processor() or platform.machine(), "threads": 2,
               "runs_per_measurement": a.runs, "images": IMAGES, "model": str(MODEL.relative_to(ROOT)),
               "commands": [" ".join(build), " ".join(bench),
                            " ".join([sys.executable, "bench/cpu/jax_peer.py", "--net", "conv"] + jax_args)],
                "rounds": rounds, "medians": med, "versions": j.get("versions", {})}
        a.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
