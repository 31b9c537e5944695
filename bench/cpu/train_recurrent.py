#!/usr/bin/env python3
"""Training a recurrent SNN on the CPU: snnc's compiled training step against the same network
written by hand in PyTorch (eager and under torch.compile), one command, same machine, threads,
initial weights and batches:

    python3 bench/cpu/train_recurrent.py [--samples 4096] [--threads 2] [--json FILE]

The network is examples/recurrent.snn: x [T=16, 40] -> h = LIF(dense(x, 128) + dense(h at t-1,
128, no bias), tau 4, hard reset to 0, the sigmoid(alpha=4) surrogate) -> LI(dense(h, 10), tau 8),
the largest membrane over T as the logits; cross-entropy, Adam lr 1e-3, batch 64, no shuffle.
Data: Bernoulli(0.3) spikes, random labels (throughput, not accuracy). The peer: the input layer
over all T*B rows at once, a Python loop over T of the recurrent Linear and the LIF step (the spike
an autograd.Function with SpikingJelly's sigmoid surrogate), the readout Linear over all rows and
the leaky integrator in tensor ops; what a user who knows PyTorch writes for a recurrence.
torch.compile compiles the whole step (the first batch, not timed). Both start from PyTorch's
default initialisation (seed 0), given to snnc as a weights file, so the first epoch's loss is
compared too (it must agree to float32 rounding). Reported: images/s over the epoch after the
first batch, the epoch's mean loss, peak RSS; each in a subprocess of its own."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNNC = Path(os.environ.get("SNNC", ROOT / "build" / "driver" / "snnc"))
T, NIN, HID, NOUT, BATCH, LR = 16, 40, 128, 10, 64, 1e-3


def data(n):
    import numpy as np
    r = np.random.default_rng(1)
    x = (r.uniform(0, 1, (n, T, NIN)) < 0.3).astype(np.float32)
    y = r.integers(0, NOUT, n).astype(np.float32)
    return x, y


def net():
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    return nn.ModuleDict({"fin": nn.Linear(NIN, HID), "frec": nn.Linear(HID, HID, bias=False),
                          "fout": nn.Linear(HID, NOUT)})


def child(name, n, threads):
    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    x, y = data(n)
    m = net()

    class Spike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, u):
            ctx.save_for_backward(u)
            return (u >= 0).to(u.dtype)

        @staticmethod
        def backward(ctx, g):
            (u,) = ctx.saved_tensors
            s = torch.sigmoid(u * 4.0)
            return g * (1.0 - s) * s * 4.0

    def step(xb, yb):
        xs = xb.transpose(0, 1)                      # [T, B, 40]
        a = m["fin"](xs)                             # all rows at once
        v = torch.zeros(xb.shape[0], HID)
        s = torch.zeros(xb.shape[0], HID)
        spikes = []
        for t in range(T):
            h = v + (a[t] + m["frec"](s) - v) / 4.0
            s = Spike.apply(h - 1.0)
            v = s * 0.0 + (1.0 - s) * h
            spikes.append(s)
        o = m["fout"](torch.stack(spikes))           # [T, B, 10]
        u = torch.zeros(xb.shape[0], NOUT)
        mem = []
        for t in range(T):
            u = u + (o[t] - u) / 8.0
            mem.append(u)
        logits = torch.stack(mem).max(0).values
        return F.cross_entropy(logits, yb)

    opt = torch.optim.Adam(m.parameters(), lr=LR)

    def train_step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = step(xb, yb)
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(train_step) if name == "hand-compile" else train_step
    xt, yt = torch.tensor(x), torch.tensor(y).long()
    losses, t0 = [], None
    for i in range(0, n - n % BATCH, BATCH):
        losses.append(float(fn(xt[i:i + BATCH], yt[i:i + BATCH])))
        if t0 is None:
            t0 = time.perf_counter()
    sec = time.perf_counter() - t0
    print(json.dumps({"images_per_s": (len(losses) - 1) * BATCH / sec,
                      "loss": sum(losses) / len(losses),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def write_inputs(n, tmp):
    """the data and PyTorch's initial weights as files (in a child: the parent stays without
    torch, whose memory a child's peak RSS would otherwise count)"""
    import numpy as np
    from safetensors.torch import save_file
    x, y = data(n - n % BATCH)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", y)
    m = net()
    save_file({"h.dense.weight": m["fin"].weight.detach(), "h.dense.bias": m["fin"].bias.detach(),
               "h.dense.1.weight": m["frec"].weight.detach(),
               "out.dense.weight": m["fout"].weight.detach(),
               "out.dense.bias": m["fout"].bias.detach()}, str(tmp / "init.safetensors"))


def snnc_row(n, threads, tmp):
    subprocess.run([sys.executable, __file__, "--child", "inputs", "--samples", str(n),
                    "--dir", str(tmp)], check=True)
    cmd = [str(SNNC), "--train", "--backend=cpu", str(ROOT / "examples" / "recurrent.snn"),
           f"--weights={tmp / 'init.safetensors'}", f"--input={tmp / 'x.npy'}",
           f"--labels={tmp / 'y.npy'}", "--loss=ce", "--optimizer=adam", f"--lr={LR}",
           f"--batch={BATCH}", "--epochs=1", "--no-shuffle", "--test-limit=0",
           f"--threads={threads}", "--report=json", "-q", "-o", str(tmp / "out.safetensors")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-400:]}
    ep = json.loads(p.stdout.strip().splitlines()[-1])["epochs"][-1]
    return {"images_per_s": ep["images_per_s"], "loss": ep["loss"],
            "peak_rss_mb": ep["peak_rss_mb"], "command": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="snnc,hand,hand-compile")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    if a.child == "inputs":
        write_inputs(a.samples, Path(a.dir))
        return
    if a.child:
        child(a.child, a.samples, a.threads)
        return
    import importlib.metadata as md
    cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    res = {"date": datetime.date.today().isoformat(), "host": cpu.group(1) if cpu else "?",
           "threads": a.threads, "samples": a.samples, "batch": BATCH, "T": T,
           "versions": {"python": platform.python_version(), "torch": md.version("torch")},
           "rows": {}}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as d:
        for name in a.only.split(","):
            if name == "snnc":
                r = snnc_row(a.samples, a.threads, Path(d))
            else:
                p = subprocess.run([sys.executable, __file__, "--child", name, "--samples",
                                    str(a.samples), "--threads", str(a.threads)],
                                   capture_output=True, text=True, env=env)
                r = (json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0
                     else {"error": p.stderr.strip()[-400:]})
            res["rows"][name] = r
            print(f"{name:14s} " + (r["error"] if "error" in r else
                  f"{r['images_per_s']:10.0f} images/s  loss {r['loss']:.6f}  "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB"), flush=True)
    rows = res["rows"]
    if "images_per_s" in rows.get("snnc", {}):
        for k, r in rows.items():
            if k != "snnc" and "images_per_s" in r:
                print(f"snnc / {k}: {rows['snnc']['images_per_s'] / r['images_per_s']:.2f}x "
                      f"images/s, loss {rows['snnc']['loss']:.6f} vs {r['loss']:.6f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
