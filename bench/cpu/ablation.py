#!/usr/bin/env python3
"""Pass ablation on the CPU: each workload at -O0, -O2, and -O2 with each pass disabled in turn.

    python3 bench/cpu/ablation.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                  [--repeats 5] [--quick] [--device cuda [--cuda-arch sm_90]]

Workloads (the CPU suite's, bench/cpu/peers.py): the Fashion-MNIST MLP (10,000 test images, batch
256), the conv SNN (the first 1,024 test images, batch 64, bench/cpu/fmnist_conv_bench.safetensors)
one LIF layer (2^20 neurons, T = 8, one sample of uniform [0, 2) input, seeded) and
bench/cpu/models/conv_bn.snn (conv-batchnorm-LIF blocks without pooling, seeded weights, the
first 1,024 test images, batch 64: the fold-batchnorm pass's workload) and
bench/cpu/models/conv_ternary.snn (the same blocks with ternary -1/0/1 spikes: bipolar spike
packing's workload; same images and batch). --workloads picks some of them. For each
configuration snnc builds a model.so (weights embedded, CPU only) and snnc_bench times it on 2
threads: the median of --repeats warm passes over the images (compile, first touch of memory and
thread start excluded), the process's peak resident memory (/proc: VmHWM), the arena of
temporaries and kernel calls per inference (`--explain`), and whether the outputs equal -O2's bit
for bit. Writes bench/cpu/ablation.json (with --workloads, ablation-NAMES.json) and prints a
table. The passes and their order come from `snnc --help-passes`.

--device cuda: the same on the CUDA backend, plus -O3 (the scan-epilogue pass, GPU only) and the
recurrent workload (bench/cpu/models/recurrent.snn, its seeded weights, 1,024 samples of uniform
[0, 1.5) input, batch 64: its step loop is one launch on the GPU): model.so files with CUDA code
for --cuda-arch (NVRTC needed), snnc_bench --device=cuda (host arrays in and out, copies
included), launches and device arena from `--explain --device=cuda`. Without a CUDA device the
timings are "not run" and the rest (launches, arenas) is still measured. Writes
bench/gpu/ablation.json."""
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


def run(bench, so, args, out_npy, repeats, device):
    """snnc_bench on one model.so: (median pass seconds, peak RSS in KiB), or (None, why) where a
    CUDA session cannot be had (no device)."""
    cmd = [bench, str(so), "--threads=2", f"--repeats={repeats}", f"--output={out_npy}",
           f"--device={device}"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, ru = os.wait4(p.pid, 0)
    out = p.stdout.read()
    err = p.stderr.read()
    if not out.strip():
        if device != "cpu" and any(w in err for w in ("CUDA is unavailable", "no CUDA",
                                                          "NO_DEVICE")):
            return None, err.strip().splitlines()[-1] if err.strip() else "no CUDA device"
        sys.exit(f"ablation: {' '.join(cmd)} failed:\n{err}")
    report = json.loads(out.strip().splitlines()[-1])
    return report["median_pass_s"], ru.ru_maxrss  # ru_maxrss: KiB on Linux


def build(snnc, model, args, so, cuda_arch):
    subprocess.run([snnc, model, "-o", str(so), f"--cuda-arch={cuda_arch}"] + args, check=True)


def explain(snnc, args):
    """(kernel calls or launches per inference, arena bytes) from snnc --explain: the CPU's
    "launches N kernel calls", the GPU's "launches 1 graph launch per inference: N kernels"."""
    out = subprocess.run([snnc, "--explain"] + args, capture_output=True, text=True,
                         check=True).stdout
    calls = arena = None
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "launches":
            calls = int(f[6]) if f[2:4] == ["graph", "launch"] else int(f[1])
        if f and f[0] == "arena":
            arena = int(f[1])
    return calls, arena


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel" / "bench" / "snnc_bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="two repeats, fewer images")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--cuda-arch", default="sm_90", help="--device cuda: what model.so carries")
    ap.add_argument("--workloads", default="",
                    help="comma-separated names (mlp, conv, lif, conv-bn, conv-tern, recurrent); "
                         "default all")
    a = ap.parse_args()
    snnc = a.snnc
    is_gpu = a.device == "cuda"
    cuda_arch = a.cuda_arch if is_gpu else "none"
    dev_flags = ["--device=cuda"] if is_gpu else []
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
        "conv-tern": (HERE / "models/conv_ternary.snn", [], ["--fmnist", f"--limit={n_conv}"],
                      64, repeats),
    }
    configs = [("-O0", ["-O0"]), ("-O2", [])]
    configs += [(f"-O2 -{p}", [f"--disable-pass={p}"]) for p in passes(snnc)]
    if is_gpu:
        rec_x = work / "recurrent.npy"
        np.save(rec_x, (rng.random((1024, 16, 40), dtype=np.float32) * 1.5).astype(np.float32))
        workloads["recurrent"] = (HERE / "models/recurrent.snn", [], [f"--input={rec_x}"], 64,
                                  repeats)
        configs.append(("-O3", ["-O3"]))
    if a.workloads:
        names = a.workloads.split(",")
        unknown = [n for n in names if n not in workloads]
        if unknown:
            sys.exit(f"ablation: unknown workload(s) {', '.join(unknown)}; "
                     f"known: {', '.join(workloads)}")
        workloads = {n: workloads[n] for n in names}
    rows = []
    for wname, (model, bflags, rflags, batch, reps) in workloads.items():
        ref = None
        for cname, cargs in configs:
            tag = cname.replace(" ", "_")
            so, out = work / f"{wname}.{tag}.so", work / f"{wname}.{tag}.npy"
            build(snnc, str(model), bflags + cargs, so, cuda_arch)
            secs, rss = run(a.bench, so, rflags + [f"--batch={batch}"], out, reps, a.device)
            if cname == "-O2":
                ref = out
            calls, arena = explain(snnc, [str(model), f"--batch={batch}"] + dev_flags + cargs)
            row = {"workload": wname, "config": cname, "seconds": secs, "arena_bytes": arena,
                   "launches": calls, "output": out}
            if secs is None:
                row["not_run"] = rss
            else:
                row["peak_rss_kib"] = rss
            rows.append(row)
            timing = (f"{secs:9.4f} s  {rss / 1024:8.1f} MiB" if secs is not None
                      else "  not run (no CUDA device)")
            print(f"{wname:9} {cname:22} {timing}  arena {arena / 2**20:8.1f} MiB  "
                  f"{calls:4} launches", flush=True)
        for r in rows:
            if r["workload"] == wname:
                out = r.pop("output")
                if r["seconds"] is None or ref is None or not Path(ref).exists():
                    r["same_as_O2"] = None
                    continue
                r["same_as_O2"] = bool(np.array_equal(np.load(out).view(np.uint32),
                                                      np.load(ref).view(np.uint32)))
                if not r["same_as_O2"]:
                    print(f"{wname} {r['config']}: outputs DIFFER from -O2", flush=True)
    o2 = {r["workload"]: r["seconds"] for r in rows if r["config"] == "-O2"}
    for r in rows:
        r["time_vs_O2"] = (r["seconds"] / o2[r["workload"]]
                           if r["seconds"] is not None and o2[r["workload"]] else None)
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.processor() or
              platform.machine(), "cores": os.cpu_count(), "snnc": snnc, "device": a.device,
              "command": " ".join(sys.argv), "rows": rows}
    dest = ROOT / "bench" / "gpu" if is_gpu else HERE
    (dest / "out").mkdir(exist_ok=True)
    name = "ablation_quick.json" if a.quick else "ablation.json"
    if a.workloads:  # a part of the table: beside the whole one, not over it
        name = name.replace(".json", "-" + a.workloads.replace(",", "-") + ".json")
    path = dest / "out" / name if a.quick else dest / name
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
