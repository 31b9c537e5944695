#!/usr/bin/env python3
"""What the Python layer costs, one command, on the Fashion-MNIST MLP (examples/fmnist_mlp.snn):

    python3 bench/cpu/python_overhead.py [--threads 2] [--json FILE]

Inference at batch 1 and 256 (median of many calls), from the C runner (bench's snnc_bench on the
same model.so), through ctypes with the arrays prepared once (snn_run alone: the floor of any
Python call), through snnc.Model.run on a numpy array, and through snnc.Model on a torch tensor.
Training steps of 128 images: snnc.Trainer.step (snnc's loss and optimiser, in C), and
snnc.torch.Module under torch.optim.Adam (PyTorch's loss, autograd hand-off and optimiser), and the
same under DistributedDataParallel with 1 and 2 processes (gloo, each process threads/world
threads, the global batch 128 split). Prints a table; writes the JSON with the host."""
from __future__ import annotations

import argparse
import ctypes as C
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import snnc  # noqa: E402

SNNC = os.environ.get("SNNC", str(ROOT / "build" / "driver" / "snnc"))
BENCH = os.environ.get("SNNC_BENCH", str(ROOT / "build" / "bench" / "snnc_bench"))


def median_us(fn, n):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


DDP = r'''
import os, sys, time, numpy as np, torch, torch.distributed as dist, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import snnc, snnc.torch as st
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(int(sys.argv[4]))
m = snnc.load(sys.argv[2], device="cpu", max_batch=128 // world, threads=int(sys.argv[4]))
net = torch.nn.parallel.DistributedDataParallel(st.Module(m))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
r = np.random.default_rng(rank)
x = torch.from_numpy(r.uniform(0, 1, (128 // world, 1, 28, 28)).astype(np.float32))
y = torch.from_numpy(r.integers(0, 10, 128 // world))
steps = int(sys.argv[3])
for s in range(steps + 3):
    if s == 3:
        dist.barrier(); t0 = time.perf_counter()
    loss = F.mse_loss(net(x), F.one_hot(y, 10).float())
    opt.zero_grad(); loss.backward(); opt.step()
dist.barrier()
if rank == 0:
    print((time.perf_counter() - t0) / steps * 1e3)
dist.destroy_process_group()
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import snnc.torch as st
    torch.set_num_threads(a.threads)
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        so = Path(d) / "mlp.so"
        subprocess.run([SNNC, str(ROOT / "examples" / "fmnist_mlp.snn"), "--cuda-arch=none",
                        "-o", str(so), "-q"], check=True)
        tso = Path(d) / "mlp_train.so"
        subprocess.run([SNNC, "--train", str(ROOT / "examples" / "fmnist_mlp.snn"),
                        "--cuda-arch=none", "-o", str(tso), "-q"], check=True)
        r = np.random.default_rng(0)
        for b, n in ((1, 3000), (256, 60)):
            x = r.uniform(0, 1, (b, 1, 28, 28)).astype(np.float32)
            np.save(Path(d) / "x.npy", x)
            out = subprocess.run([BENCH, str(so), f"--input={Path(d) / 'x.npy'}", f"--batch={b}",
                                  f"--threads={a.threads}", "--repeats=11", "--latency-runs=2000"],
                                 capture_output=True, text=True)
            c_us = None
            if out.returncode == 0:
                rep = json.loads(out.stdout.strip().splitlines()[-1])
                c_us = (rep["latency_b1_ms"] * 1e3 if b == 1
                        else rep["median_pass_s"] * 1e6 * b / rep["images"])
            with snnc.load(so, device="cpu", threads=a.threads, max_batch=256) as m:
                lib, s = m._lib, m._live()
                y = np.empty((b, 10), np.float32)
                ins = (C.c_void_p * 1)(x.ctypes.data)
                outs = (C.c_void_p * 1)(y.ctypes.data)
                raw = median_us(lambda: lib.snn_run(s, 0, b, ins, outs), n)
                py = median_us(lambda: m.run(x), n)
                xt = torch.from_numpy(x)
                pt = median_us(lambda: m(xt), n)
            rows[f"infer_b{b}"] = {"c_runner_us": c_us, "ctypes_snn_run_us": raw,
                                   "model_run_numpy_us": py, "model_torch_tensor_us": pt}
            print(f"inference, batch {b}: C runner {c_us if c_us is None else round(c_us, 1)} us, "
                  f"ctypes snn_run {raw:.1f} us, Model.run(numpy) {py:.1f} us, "
                  f"Model(torch tensor) {pt:.1f} us", flush=True)
        # training steps of 128
        x = r.uniform(0, 1, (128, 1, 28, 28)).astype(np.float32)
        yl = r.integers(0, 10, 128)
        with snnc.load(tso, device="cpu", threads=a.threads, max_batch=128) as m:
            with snnc.Trainer(m, optimizer="adam", lr=1e-3) as t:
                tr_ms = median_us(lambda: t.step(x, yl), 40) / 1e3
            net = st.Module(m)
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            xt, yt = torch.from_numpy(x), torch.from_numpy(yl)

            def torch_step():
                loss = F.mse_loss(net(xt), F.one_hot(yt, 10).float())
                opt.zero_grad()
                loss.backward()
                opt.step()
            tm_ms = median_us(torch_step, 40) / 1e3
        rows["train_step_128"] = {"trainer_step_ms": tr_ms, "torch_module_adam_ms": tm_ms}
        print(f"training step of 128: snnc.Trainer.step {tr_ms:.2f} ms, snnc.torch.Module + "
              f"torch.optim.Adam {tm_ms:.2f} ms", flush=True)
        script = Path(d) / "ddp.py"
        script.write_text(DDP)
        for world in (1, 2):
            per = max(1, a.threads // world)
            p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                f"--nproc-per-node={world}", str(script), str(ROOT / "python"),
                                str(tso), "30", str(per)], capture_output=True, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS=str(per)))
            ms = float(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
            rows[f"ddp_{world}"] = {"ms_per_global_batch_128": ms,
                                    "error": None if ms else p.stderr[-400:]}
            print(f"DDP, {world} process(es) x {per} thread(s): "
                  f"{ms if ms is None else round(ms, 2)} ms per global batch of 128", flush=True)
    cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    res = {"date": datetime.date.today().isoformat(), "host": cpu.group(1) if cpu else "?",
           "threads": a.threads, "torch": torch.__version__, "rows": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
