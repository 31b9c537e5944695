#!/usr/bin/env python3
"""Pass ablation on the CPU: each workload at -O0, -O2, and -O2 with each pass disabled in turn.

    python3 bench/cpu/ablation.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                  [--repeats 5] [--quick]

Workloads (the CPU suite's, bench/cpu/peers.py): the Fashion-MNIST MLP (10,000 test images, batch
256), the conv SNN (the first 1,024 test images, batch 64, bench/cpu/fmnist_conv_bench.safetensors)
one LIF layer (2^20 neurons, T = 8, one sample of uniform [0, 2) input, seeded) and
bench/cpu/models/conv_bn.snn (conv-batchnorm-LIF blocks without pooling, seeded weights, the
first 1,024 test images, batch 64: the fold-batchnorm pass's workload). For each
configuration snnc builds a model.so (weights embedded, CPU only) and snnc_bench times it on 2
threads: the median of --repeats warm passes over the images (compile, first touch of memory and
thread start excluded), the process's peak resident memory (/proc: VmHWM), the arena of
temporaries and kernel calls per inference (`--explain`), and whether the outputs equal -O2's bit
for bit. Writes bench/cpu/ablation.json and prints a table. The passes and their order come from
`snnc --help-passes`."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def passes(snnc):
    out = subprocess.run([snnc, "--help-passes"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def run(bench, so, args, out_npy, repeats):
    """snnc_bench on one model.so: (median pass seconds, peak RSS in KiB)."""
    cmd = [bench, str(so), "--threads=2", f"--repeats={repeats}", f"--output={out_npy}"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, ru = os.wait4(p.pid, 0)
    out = p.stdout.read()
    err = p.stderr.read()
    if not out.strip():
        sys.exit(f"ablation: {' '.join(cmd)} failed:\n{err}")
    report = json.loads(out.strip().splitlines()[-1])
    return report["median_pass_s"], ru.ru_maxrss  # ru_maxrss: KiB on Linux


def build(snnc, model, args, so):
    subprocess.run([snnc, model, "-o", str(so), "--cuda-arch=none"] + args, check=True)


def explain(snnc, args):
    """(kernel calls per inference, arena bytes) from snnc --explain."""
    out = subprocess.run([snnc, "--explain"] + args, capture_output=True, text=True,
                         check=True).stdout
    calls = arena = None
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "launches":
            calls = int(f[1])
        if f and f[0] == "arena":
            arena = int(f[1])
    return calls, arena


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel" / "bench" / "snnc_bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="two repeats, fewer images")
    a = ap.parse_args()
    snnc = a.snnc
    repeats = 2 if a.quick else a.repeats
    work = Path(tempfile.mkdtemp(prefix="snnc-ablation-"))
    rng = np.random.default_rng(8)
    lif_x = work / "lif.npy"
    np.save(lif_x, (rng.random((1, 8, 1 << 20), dtype=np.float32) * 2).astype(np.float32))
    n_mlp, n_conv = (2048, 256) if a.quick else (10000, 1024)
    conv_w = f"--weights={HERE / 'fmnist_conv_bench.safetensors'}"
    # (model, build flags, snnc_bench flags, batch, repeats)
    workloads = {
        "mlp": (ROOT / "examples/fmnist_mlp.snn", [], ["--fmnist", f"--limit={n_mlp}"], 256,
                repeats),
        "conv": (ROOT / "examples/fmnist_conv.snn", [conv_w], ["--fmnist", f"--limit={n_conv}"],
                 64, repeats),
        "lif": (ROOT / "examples/lif_layer.snn", [], [f"--input={lif_x}"], 1, repeats * 4),
        "conv-bn": (HERE / "models/conv_bn.snn", [], ["--fmnist", f"--limit={n_conv}"], 64,
                    repeats),
    }
    configs = [("-O0", ["-O0"]), ("-O2", [])]
    configs += [(f"-O2 -{p}", [f"--disable-pass={p}"]) for p in passes(snnc)]
    rows = []
    for wname, (model, bflags, rflags, batch, reps) in workloads.items():
        ref = None
        for cname, cargs in configs:
            tag = cname.replace(" ", "_")
            so, out = work / f"{wname}.{tag}.so", work / f"{wname}.{tag}.npy"
            build(snnc, str(model), bflags + cargs, so)
            secs, rss = run(a.bench, so, rflags + [f"--batch={batch}"], out, reps)
            if cname == "-O2":
                ref = out
            calls, arena = explain(snnc, [str(model), f"--batch={batch}"] + cargs)
            rows.append({"workload": wname, "config": cname, "seconds": secs,
                         "peak_rss_kib": rss, "arena_bytes": arena, "launches": calls,
                         "output": out})
            print(f"{wname:5} {cname:22} {secs:9.4f} s  {rss / 1024:8.1f} MiB  "
                  f"arena {arena / 2**20:8.1f} MiB  {calls:4} launches", flush=True)
        for r in rows:
            if r["workload"] == wname:
                out = r.pop("output")
                r["same_as_O2"] = bool(np.array_equal(np.load(out).view(np.uint32),
                                                      np.load(ref).view(np.uint32)))
                if not r["same_as_O2"]:
                    print(f"{wname} {r['config']}: outputs DIFFER from -O2", flush=True)
    o2 = {r["workload"]: r["seconds"] for r in rows if r["config"] == "-O2"}
    for r in rows:
        r["time_vs_O2"] = r["seconds"] / o2[r["workload"]]
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.processor() or
              platform.machine(), "cores": os.cpu_count(), "snnc": snnc,
              "command": " ".join(sys.argv), "rows": rows}
    (HERE / ("out" if a.quick else ".")).mkdir(exist_ok=True)
    path = HERE / "out" / "ablation_quick.json" if a.quick else HERE / "ablation.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
