#!/usr/bin/env python3
"""accumulate f32 against the exact default on the CPU: speed and agreement.

    python3 bench/cpu/precision.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]

For the Fashion-MNIST MLP (10,000 test images, batch 256) and the conv SNN (the first 1,024 test
images, batch 64) with its two weight sets (bench/cpu/fmnist_conv_bench.safetensors: sparse, 6%
input spikes to conv2; ..._bncal: 36%), snnc builds a model.so with --accumulate=exact and with
--accumulate=f32 and snnc_bench times each on 2 threads (median of 5 warm passes); the outputs are
compared (elements equal bit for bit, largest difference, predicted class the same) and so are the
firing rates of every layer (`snnc --run --report=json`). Writes bench/cpu/precision.json."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def sh(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"precision: {' '.join(cmd)} failed:\n{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel" / "bench" / "snnc_bench"))
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="snnc-precision-"))
    conv = ROOT / "examples/fmnist_conv.snn"
    workloads = {
        "mlp": (ROOT / "examples/fmnist_mlp.snn", [], 10000, 256),
        "conv": (conv, [f"--weights={HERE / 'fmnist_conv_bench.safetensors'}"], 1024, 64),
        "conv-bncal": (conv, [f"--weights={HERE / 'fmnist_conv_bench_bncal.safetensors'}"],
                       1024, 64),
    }
    rows = []
    for name, (model, wflags, n, batch) in workloads.items():
        res = {}
        for acc in ("exact", "f32"):
            so, out = work / f"{name}.{acc}.so", work / f"{name}.{acc}.npy"
            sh([a.snnc, str(model), "-o", str(so), "--cuda-arch=none", f"--accumulate={acc}"] + wflags)
            rep = json.loads(sh([a.bench, str(so), "--fmnist", f"--limit={n}", f"--batch={batch}",
                                 "--threads=2", f"--repeats={a.repeats}", f"--output={out}"]
                                ).strip().splitlines()[-1])
            run = json.loads(sh([a.snnc, "--run", "-q", "--report=json", "--threads=2",
                                 str(model), "--data=fashion-mnist", f"--limit={n}",
                                 f"--batch={batch}", f"--accumulate={acc}"] + wflags
                                ).strip().splitlines()[-1])
            res[acc] = (rep["median_pass_s"], np.load(out), run["firing_rates"], run["accuracy"])
        (te, ye, re_, ae), (tf, yf, rf, af) = res["exact"], res["f32"]
        row = {"workload": name, "images": n, "batch": batch,
               "exact_s": te, "f32_s": tf, "speedup": te / tf,
               "outputs_equal": float(np.mean(ye.view(np.uint32) == yf.view(np.uint32))),
               "max_abs_diff": float(np.max(np.abs(ye - yf))),
               "class_agreement": float(np.mean(ye.argmax(1) == yf.argmax(1))),
               "accuracy_exact": ae, "accuracy_f32": af,
               "rates_exact": re_, "rates_f32": rf}
        rows.append(row)
        print(f"{name:11} exact {te:7.4f} s  f32 {tf:7.4f} s  {te / tf:5.2f}x  outputs equal "
              f"{row['outputs_equal']:.4%}  max |diff| {row['max_abs_diff']:.3g}  class agreement "
              f"{row['class_agreement']:.4%}  accuracy {ae} / {af}", flush=True)
        for k in re_:
            print(f"            rate {k}: {re_[k]:.6f} / {rf[k]:.6f}")
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cores": os.cpu_count(),
           "command": " ".join(sys.argv), "rows": rows}
    (HERE / "precision.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {HERE / 'precision.json'}")


if __name__ == "__main__":
    main()
