#!/usr/bin/env python3
"""Train a model.so built with `snnc --train` on Fashion-MNIST from Python (the snnc package:
ctypes over runtime/snn.h's snn_trainer_* functions, numpy only), then test it: the same steps as
examples/c-api/train.c and `snnc --train --no-shuffle`, so the same weights.

    snnc --train examples/fmnist_mlp.snn -o fmnist_mlp_train.so
    python3 examples/c-api/train.py ./fmnist_mlp_train.so [DATA_DIR] [--limit N] [--epochs E]
            [--batch B] [--lr X] [--test-limit N] [-o trained.safetensors]
"""
import argparse
import gzip
import os
import sys
import time
from pathlib import Path

import numpy as np

try:
    import snnc
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import snnc


def load(d, split):
    """(images as bytes [N, 784], labels [N]) of a Fashion-MNIST split"""
    img = np.frombuffer(gzip.open(f"{d}/{split}-images-idx3-ubyte.gz").read(), np.uint8, offset=16)
    lab = np.frombuffer(gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
    return img.reshape(-1, 784), lab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("data", nargs="?",
                    default=os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--test-limit", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("-o", dest="out", default=None)
    a = ap.parse_args()
    x, y = load(a.data, "train")
    xt, yt = load(a.data, "t10k")
    x, y, xt, yt = x[:a.limit], y[:a.limit], xt[:a.test_limit], yt[:a.test_limit]
    m = snnc.load(a.library, device="cpu", max_batch=a.batch)
    t = snnc.Trainer(m, optimizer="adam", lr=a.lr)
    n = len(y)
    print(f"training {m.name} on {n} images: {a.epochs} epochs, batch {a.batch}, adam lr {a.lr:g}")
    for e in range(a.epochs):
        t0, loss_sum, right = time.perf_counter(), 0.0, 0
        for b0 in range(0, n, a.batch):
            xb = (x[b0:b0 + a.batch].astype(np.float32) / np.float32(255)).reshape(-1, 1, 28, 28)
            loss, ok = t.step(xb, y[b0:b0 + a.batch], first_sample=e * n + b0)
            loss_sum += loss * len(xb)
            right += ok
        dt = time.perf_counter() - t0
        print(f"epoch {e + 1}: loss {loss_sum / n:.6f} train accuracy {right / n:.4f} "
              f"{n / dt:.0f} images/s")
    t.sync()  # the model's inference session now runs the trained weights
    rate = m((xt.astype(np.float32) / np.float32(255)).reshape(-1, 1, 28, 28))
    print(f"test accuracy {float((rate.argmax(1) == yt).mean()):.4f} on {len(yt)} images")
    if a.out:
        t.save(a.out)


if __name__ == "__main__":
    main()
