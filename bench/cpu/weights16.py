#!/usr/bin/env python3
"""16-bit weights or activations (--precision=fp16|bf16|mixed) against f32 on the CPU: speed, agreement.

    python3 bench/cpu/weights16.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                   [--narrow=weights|activations|all] [--accumulate=exact,f32]
                                   [--workloads=mlp,conv,conv-bncal] [--tolerance=F]

What is narrowed is --narrow's (snnc's option; default weights here: the layers' weights; activations:
the dense and conv layers' outputs; all: both), the other tensors stay f32.

For the Fashion-MNIST MLP (10,000 test images, batch 256) and the conv SNN (the first 1,024 test
images, batch 64; weights bench/cpu/fmnist_conv_bench.safetensors, 6% input spikes to conv2, and
..._bncal, 36%), with exact and with f32 accumulation, snnc builds a model.so with f32, f16 and
bf16 weights (and mixed: f16 where 64 calibration images show no change) and snnc_bench times each
on 2 threads (median of the warm passes). Outputs are compared with the f32-weight build of the
same accumulation: elements equal bit for bit, predicted class the same, accuracy. The calibration
report (`snnc --emit=ir --precision=... --data=fashion-mnist --calibrate=64`) gives the spike
agreement of every layer on those 64 images and the weight bytes; `snnc --explain --batch=B` the
arena each build needs. Writes bench/cpu/weights16.json (--narrow=weights), activations16.json or
all16.json (with --tolerance: weights16-tol.json, ...)."""
import argparse
import gzip
import json
import os
import re
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
        sys.exit(f"weights16: {' '.join(cmd)} failed:\n{p.stderr}")
    return p


def labels(n):
    """the first n Fashion-MNIST test labels (IDX file), for accuracy"""
    d = Path(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    f = d / "t10k-labels-idx1-ubyte"
    raw = f.read_bytes() if f.exists() else gzip.decompress((d / (f.name + ".gz")).read_bytes())
    return np.frombuffer(raw[8:8 + n], dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel" / "bench" / "snnc_bench"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--narrow", choices=("weights", "activations", "all"), default="weights")
    ap.add_argument("--accumulate", default="exact,f32")
    ap.add_argument("--workloads", default="mlp,conv,conv-bncal")
    ap.add_argument("--tolerance", help="snnc's --tolerance for the mixed builds (default: none, "
                    "nothing may change)")
    a = ap.parse_args()
    tol = [f"--tolerance={a.tolerance}"] if a.tolerance else []
    narrow = [f"--narrow={a.narrow}"]
    work = Path(tempfile.mkdtemp(prefix="snnc-weights16-"))
    conv = ROOT / "examples/fmnist_conv.snn"
    workloads = {
        "mlp": (ROOT / "examples/fmnist_mlp.snn", [], 10000, 256),
        "conv": (conv, [f"--weights={HERE / 'fmnist_conv_bench.safetensors'}"], 1024, 64),
        "conv-bncal": (conv, [f"--weights={HERE / 'fmnist_conv_bench_bncal.safetensors'}"],
                       1024, 64),
    }
    rows = []
    for name, (model, wflags, n, batch) in workloads.items():
        if name not in a.workloads.split(","):
            continue
        y = labels(n)
        calib = {}
        for prec in ("fp16", "bf16", "mixed"):
            p = sh([a.snnc, "--emit=ir", str(model), f"--precision={prec}", "--data=fashion-mnist",
                    "--calibrate=64", "-o", str(work / f"{name}.{prec}.snnir")] + wflags + narrow +
                   (tol if prec == "mixed" else []))
            lines = [ln.strip() for ln in p.stderr.splitlines() if ln.startswith("  ")]
            mb = re.search(r"weights ([0-9.]+) MB -> ([0-9.]+) MB", p.stderr)
            ir = (work / f"{name}.{prec}.snnir").read_text()
            calib[prec] = {"report": lines,
                           "weights_mb": [float(mb[1]), float(mb[2])] if mb else None,
                           "f16_layers": re.findall(r"^  weights (\S+) : f16$", ir, re.M),
                           "f16_outputs": re.findall(r"^  activations (\S+) : f16$", ir, re.M)}
        for acc in a.accumulate.split(","):
            base = None
            for prec in ("fp32", "fp16", "bf16", "mixed"):
                so, out = work / f"{name}.{acc}.{prec}.so", work / f"{name}.{acc}.{prec}.npy"
                extra = ["--data=fashion-mnist", "--calibrate=64", "-q"] + tol if prec == "mixed" else []
                flags = [f"--accumulate={acc}", f"--precision={prec}"] + extra + wflags + narrow
                sh([a.snnc, str(model), "-o", str(so), "--cuda-arch=none"] + flags)
                ex = sh([a.snnc, "--explain", f"--batch={batch}", str(model)] + flags).stdout
                arena = int(re.search(r"^  arena +(\d+) bytes", ex, re.M)[1])
                rep = json.loads(sh([a.bench, str(so), "--fmnist", f"--limit={n}",
                                     f"--batch={batch}", "--threads=2", f"--repeats={a.repeats}",
                                     f"--output={out}"]).stdout.strip().splitlines()[-1])
                t, o = rep["median_pass_s"], np.load(out)
                if base is None:
                    base = (t, o)
                row = {"workload": name, "accumulate": acc, "narrow": a.narrow, "precision": prec,
                       "images": n, "batch": batch, "seconds": t, "arena_bytes": arena,
                       "speedup_vs_f32": base[0] / t,
                       "outputs_equal": float(np.mean(o.view(np.uint32) ==
                                                      base[1].view(np.uint32))),
                       "class_agreement": float(np.mean(o.argmax(1) == base[1].argmax(1))),
                       "accuracy": float(np.mean(o.argmax(1) == y)),
                       "calibration": calib.get(prec)}
                rows.append(row)
                print(f"{name:10} {acc:5} {prec:5} {t:7.4f} s  {base[0] / t:5.2f}x  arena "
                      f"{arena / 2**20:6.1f} MiB  outputs equal "
                      f"{row['outputs_equal']:.4%}  class agreement {row['class_agreement']:.4%}  "
                      f"accuracy {row['accuracy']:.4f}", flush=True)
        for prec, c in calib.items():
            mb = f"{c['weights_mb'][0]:.2f} -> {c['weights_mb'][1]:.2f} MB, " if c["weights_mb"] else ""
            print(f"  calibration {prec}: {mb}f16 weights {c['f16_layers']}, f16 outputs "
                  f"{c['f16_outputs']}")
            for ln in c["report"]:
                print(f"    {ln}")
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cores": os.cpu_count(), "tolerance": a.tolerance,
           "command": " ".join(sys.argv), "rows": rows}
    dest = HERE / ({"weights": "weights16", "activations": "activations16", "all": "all16"}[a.narrow]
                   + ("-tol" if a.tolerance else "") + ".json")
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
