#!/usr/bin/env python3
"""A LIF layer's forward and backward (surrogate BPTT) on the CPU against SpikingJelly's torch
backend, one command, same machine, same threads:

    python3 bench/cpu/lif_train.py [--n 1048576] [--steps 8,32] [--threads 2] [--reps 5]
                                   [--json bench/cpu/lif_train.json]

The layer: SpikingJelly's LIFNode (tau 2, decay_input, v_reset 0, v_th 1, the Sigmoid(alpha=4)
surrogate) over N neurons and T steps of float32 input. snnc trains the model
`s = LIF(batchnorm(x)); output rate = mean(s)` (a one-channel batchnorm gives the layer a weight,
so its gradient runs through the LIF backward; its own kernels are timed apart) with
SNN_TRAIN_PROFILE=1, which compiles every kernel of the training step alone and times it: the
figure is the LIF forward kernel plus its backward kernel, per step of the training loop (one
sample, best of --reps steps). SpikingJelly: LIFNode(step_mode='m') (2.0 has no backend argument: torch on a CPU) on x [T, N]
with requires_grad, forward and backward(dL/ds) timed together (best of --reps). Also printed:
the bytes each moves at least, as a share of the copy bandwidth (bench/cpu/machine_peak).

--device cuda: the same on a GPU (bench/gpu/train.sh runs it there): snnc's LIF forward and
backward kernels of `snnc --train --device=cuda` timed by Nsight Compute (ncu, the card's own
clocks; median over the steps), SpikingJelly 2.0's LIFNode with its Triton kernels
(SJ_LIF_CUDA_IMPLEMENTATION=triton; its package from $SNN_SJ2_SITE if set) timed with CUDA
events (median of --reps after a warm-up), the copy yardstick a 1 GiB device-to-device copy."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNNC = Path(os.environ.get("SNNC", ROOT / "build" / "driver" / "snnc"))
PEAK = ROOT / "build" / "bench" / "machine_peak"


def lif_files(d, n, T, samples):
    """in folder d: the model (lif.snn), `samples` samples of input (x.npy) and their labels"""
    import numpy as np
    side = 1024
    assert n % side == 0
    (d / "lif.snn").write_text(
        f"model lif {{\n  timesteps {T}\n  input x : f32[T, 1, {n // side}, {side}]\n"
        f"  s = LIF(batchnorm(x), tau = 2.0)\n  output rate = mean(flatten(s))\n}}\n")
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.uniform(0, 3, (samples, T, 1, n // side, side)).astype(np.float32))
    np.save(d / "y.npy", np.zeros(samples, np.float32))


def snnc_lif(n, T, threads, reps):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        lif_files(d, n, T, reps + 1)
        env = dict(os.environ, SNN_TRAIN_PROFILE="1")
        r = subprocess.run([str(SNNC), "--train", str(d / "lif.snn"), f"--input={d / 'x.npy'}",
                            f"--labels={d / 'y.npy'}", "--batch=1", "--no-shuffle",
                            f"--threads={threads}", "-o", str(d / "w.safetensors"), "-q"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"error": r.stderr.strip()[-400:]}
        times = {}
        for line in r.stderr.splitlines():
            m = re.match(r"\s*([0-9.]+)\s+[0-9.]+%\s+(\S+)", line)
            if m:
                times[m.group(2)] = float(m.group(1))
        fwd, bwd = times.get("LIF_s", 0.0), times.get("grad_LIF_s", 0.0)
        steps = reps + 1
        return {"forward_ms": 1e3 * fwd / steps, "backward_ms": 1e3 * bwd / steps,
                "total_ms": 1e3 * (fwd + bwd) / steps, "kernels": times,
                "note": "mean over the training steps (the profile sums them)"}


def snnc_lif_cuda(n, T, reps):
    """the LIF kernels of snnc --train --device=cuda, timed by ncu"""
    import csv
    import shutil
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        lif_files(d, n, T, reps)
        r = subprocess.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
                            "--csv", "-k", "regex:LIF", str(SNNC), "--train", "--device=cuda",
                            str(d / "lif.snn"), f"--input={d / 'x.npy'}", f"--labels={d / 'y.npy'}",
                            "--batch=1", "--no-shuffle", "-o", str(d / "w.safetensors"), "-q"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip()[-400:]}
        rows = [x for x in csv.reader(r.stdout.splitlines()) if len(x) > 10]
        if not rows:
            return {"error": "ncu printed no kernel: " + r.stdout[-300:]}
        k, v = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
        fwd, bwd = [], []
        for x in rows[1:]:
            ms = float(x[v].replace(",", "")) / 1e6  # ns
            (bwd if "grad" in x[k] else fwd).append(ms)
        fwd.sort(), bwd.sort()
        f, b = fwd[len(fwd) // 2], bwd[len(bwd) // 2]
        return {"forward_ms": f, "backward_ms": b, "total_ms": f + b,
                "note": "ncu kernel durations, median over the steps"}


def sj_lif_cuda(n, T, reps):
    """SpikingJelly 2.0's LIFNode, Triton kernels, forward and backward timed with CUDA events"""
    os.environ["SJ_LIF_CUDA_IMPLEMENTATION"] = "triton"
    if os.environ.get("SNN_SJ2_SITE"):
        sys.path.insert(0, os.environ["SNN_SJ2_SITE"])
    import torch
    from spikingjelly.activation_based import neuron, surrogate
    lif = neuron.LIFNode(tau=2.0, surrogate_function=surrogate.Sigmoid(alpha=4.0),
                         step_mode="m").cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand(T, n, generator=g, device="cuda") * 3).requires_grad_(True)
    gy = torch.randn(T, n, generator=g, device="cuda")
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    fs, ts = [], []
    for i in range(reps + 3):
        lif.reset()
        x.grad = None
        ev[0].record()
        s = lif(x)
        ev[1].record()
        s.backward(gy)
        ev[2].record()
        torch.cuda.synchronize()
        if i >= 3:
            fs.append(ev[0].elapsed_time(ev[1]))
            ts.append(ev[0].elapsed_time(ev[2]))
    fs.sort(), ts.sort()
    f, t = fs[len(fs) // 2], ts[len(ts) // 2]
    src = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    cs = []
    for i in range(8):
        ev[0].record()
        dst.copy_(src)
        ev[1].record()
        torch.cuda.synchronize()
        cs.append(ev[0].elapsed_time(ev[1]))
    cs.sort()
    return {"forward_ms": f, "backward_ms": t - f, "total_ms": t,
            "copy_gbs": 2 * src.numel() * 4 / cs[len(cs) // 2] / 1e6,
            "device": torch.cuda.get_device_name()}


def sj_lif(n, T, threads, reps):
    import torch
    from spikingjelly.activation_based import neuron, surrogate
    torch.set_num_threads(threads)
    lif = neuron.LIFNode(tau=2.0, surrogate_function=surrogate.Sigmoid(alpha=4.0),
                         step_mode="m")  # SpikingJelly 2.0: its torch code on a CPU
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(T, n, generator=g) * 3).requires_grad_(True)
    gy = torch.randn(T, n, generator=g)
    best_f, best_t = float("inf"), float("inf")
    for _ in range(reps + 1):
        lif.reset()
        x.grad = None
        t0 = time.perf_counter()
        s = lif(x)
        t1 = time.perf_counter()
        s.backward(gy)
        t2 = time.perf_counter()
        best_f, best_t = min(best_f, t1 - t0), min(best_t, t2 - t0)
    return {"forward_ms": 1e3 * best_f, "backward_ms": 1e3 * (best_t - best_f),
            "total_ms": 1e3 * best_t}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--steps", default="8,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = ap.parse_args()
    res = {"n": a.n, "threads": a.threads, "device": a.device, "rows": {}}
    if PEAK.exists() and a.device == "cpu":
        p = subprocess.run([str(PEAK)], capture_output=True, text=True)
        if p.returncode == 0:
            res["host"] = json.loads(p.stdout.strip().splitlines()[-1])
    bw = res.get("host", {}).get("copy_gbs", {}).get(str(a.threads))
    for T in map(int, a.steps.split(",")):
        # at least: the forward reads x and writes spikes (1 byte); the backward reads x, dL/ds,
        # writes dL/dx, and keeps and reads one state per step (f32)
        floor_bytes = a.n * T * (4 + 1 + 4 + 4 + 4 + 4 + 4)
        if a.device == "cuda":
            try:
                sj = sj_lif_cuda(a.n, T, a.reps)
            except Exception as e:  # a peer that fails costs its row only
                sj = {"error": f"{type(e).__name__}: {e}"[:400]}
            row = {"snnc": snnc_lif_cuda(a.n, T, a.reps), "spikingjelly": sj,
                   "bytes": floor_bytes}
            bw = row["spikingjelly"].get("copy_gbs")
        else:
            row = {"snnc": snnc_lif(a.n, T, a.threads, a.reps),
                   "spikingjelly": sj_lif(a.n, T, a.threads, a.reps), "bytes": floor_bytes}
        res["rows"][str(T)] = row
        s, j = row["snnc"], row["spikingjelly"]
        line = f"T={T:3d} N={a.n}: "
        if "error" in s or "error" in j:
            line += f"error: {s.get('error', '')} {j.get('error', '')}"
        else:
            line += (f"snnc {s['forward_ms']:.1f} + {s['backward_ms']:.1f} = {s['total_ms']:.1f} ms, "
                     f"SpikingJelly {j['forward_ms']:.1f} + {j['backward_ms']:.1f} = "
                     f"{j['total_ms']:.1f} ms ({j['total_ms'] / s['total_ms']:.2f}x)")
            if bw:
                line += (f"; {floor_bytes / 1e6:.0f} MB at {bw:.0f} GB/s is "
                         f"{floor_bytes / bw / 1e6:.1f} ms: snnc at "
                         f"{100 * floor_bytes / bw / 1e6 / s['total_ms']:.0f}% of it")
        print(line, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
