#!/usr/bin/env python3
"""Batch inference on Ray Data against a plain loop, one command:

    python3 bench/cpu/ray_infer.py [--images 10000] [--json bench/cpu/ray_infer.json]

The Fashion-MNIST MLP (examples/fmnist_mlp.snn, its committed weights) built into a model.so, run
over the first N test images: a plain loop (one session, Model.run, 2 threads) and snnc.ray.predict
on a local Ray cluster with 1 and 2 actors (one session of 1 thread each, batches of 256). Every
output is compared with the loop's (bit for bit); images/s counts the whole pass (Ray's from
the dataset's creation to the last row taken, its start-up excluded and reported)."""
import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import snnc  # noqa: E402


def test_images(n):
    d = Path("/usr/share/datasets/fashion-mnist")
    with gzip.open(d / "t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    return (x[:n].astype(np.float32) / 255.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import ray
    import snnc.ray as sray
    x = test_images(a.images)
    lib = Path(tempfile.mkdtemp()) / "mlp.so"
    subprocess.run([snnc.find_snnc(), str(ROOT / "examples/fmnist_mlp.snn"), "--cuda-arch=none",
                    "-o", str(lib)], check=True)
    rows = {}
    with snnc.load(lib, device="cpu", threads=2) as m:
        m.run(x[:256])
        t0 = time.perf_counter()
        want = m.run(x)["rate"]
        rows["loop"] = a.images / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    startup = time.perf_counter() - t0
    for workers in (1, 2):
        t0 = time.perf_counter()
        ds = ray.data.from_items([{"id": i, "image": x[i]} for i in range(a.images)])
        out = sray.predict(ds, lib, concurrency=workers, batch_size=256).take_all()
        dt = time.perf_counter() - t0
        got = np.stack([np.asarray(r["rate"]) for r in sorted(out, key=lambda r: r["id"])])
        assert np.array_equal(got, want), f"{workers} workers differ from the loop"
        rows[f"ray {workers}"] = a.images / dt
    ray.shutdown()
    for k, v in rows.items():
        print(f"{k:8s} {v:10.0f} images/s")
    print(f"ray start-up {startup:.1f} s; outputs equal the loop's bit for bit")
    if a.json:
        Path(a.json).write_text(json.dumps({"images": a.images, "images_per_s": rows,
                                            "ray_startup_s": startup}, indent=1) + "\n")


if __name__ == "__main__":
    main()
