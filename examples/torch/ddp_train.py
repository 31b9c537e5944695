"""Data-parallel training of the Fashion-MNIST MLP compiled by snnc, under PyTorch's
DistributedDataParallel (one process per CPU socket, node or core group; gloo between them).

    snnc --train examples/fmnist_mlp.snn -o mlp_train.so
    torchrun --nproc-per-node=2 examples/torch/ddp_train.py mlp_train.so --epochs 1

Each process trains snnc.torch.Module (the compiled forward and backward) on its shard of every
batch; DDP averages the gradients, so every process holds the same weights; rank 0 writes them
(the model's own names, loadable by `snnc examples/fmnist_mlp.snn --weights=...`)."""
import argparse
import gzip
import os
import urllib.request
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import snnc
import snnc.torch as st


def idx(d: Path, base: str, offset: int) -> np.ndarray:
    """an IDX file of the data set, plain or gzipped (what snnc's --data=fashion-mnist reads)"""
    for name, opener in ((base, open), (base + ".gz", gzip.open)):
        if (d / name).exists():
            with opener(d / name, "rb") as f:
                return np.frombuffer(f.read(), np.uint8, offset=offset)
    raise SystemExit(f"{d}: no {base}[.gz] (Fashion-MNIST: --data DIR)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128, help="the global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--data", default=os.environ.get("SNN_DATA_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--steps", type=int, default=0, help="stop after this many (0: every batch)")
    ap.add_argument("--out", default="mlp_ddp.safetensors")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = Path(a.data)
    x = idx(d, "train-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    y = idx(d, "train-labels-idx1-ubyte", 8).astype(np.int64)
    m = snnc.load(a.library, device="cpu", max_batch=a.batch // world)
    net = torch.nn.parallel.DistributedDataParallel(st.Module(m))
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    per = a.batch // world
    for epoch in range(a.epochs):
        order = np.random.default_rng(epoch).permutation(len(y))  # the same on every rank
        steps = len(y) // a.batch
        for s in range(min(steps, a.steps) if a.steps else steps):
            idx_ = order[s * a.batch + rank * per:s * a.batch + (rank + 1) * per]
            out = net(torch.from_numpy(x[idx_]))
            loss = F.mse_loss(out, F.one_hot(torch.from_numpy(y[idx_]), 10).float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0 and s % 50 == 0:
                print(f"epoch {epoch + 1} step {s}: loss {loss.item():.4f}", flush=True)
    if rank == 0:
        from snnc.model import _safetensors
        sd = {k: v.numpy() for k, v in net.module.state_dict().items()}
        Path(a.out).write_bytes(_safetensors(sd))
        print(f"wrote {a.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
