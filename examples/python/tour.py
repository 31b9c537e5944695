#!/usr/bin/env python3
"""A notebook-style tour of snnc from Python (each section a cell):

    python3 examples/python/tour.py [--quick] [--out DIR] [--data DIR]

1. a SpikingJelly model (the Fashion-MNIST MLP SpikingJelly trained: examples/fmnist_mlp.safetensors
   in SpikingJelly's own module) compiled by snnc and run on torch tensors: the same outputs;
2. an snnTorch model trained here for a few hundred steps with snnTorch's own loop, compiled by
   snnc (through snnTorch's NIR export) and run on torch tensors: the same outputs;
3. the conv example trained from a PyTorch loop: snnc.torch.Module (the compiled forward and
   backward) under torch.optim.Adam;
4. its spikes recorded and plotted (snnc.plot.raster, rates) into DIR.
Fashion-MNIST comes from $SNN_DATA_DIR or /usr/share/datasets/fashion-mnist (the Debian package
dataset-fashion-mnist, which tools/setup.sh installs). Exits non-zero if an output differs."""
import argparse
import gzip
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import snnc
import snnc.plot
import snnc.torch as st

ROOT = Path(__file__).resolve().parents[2]


def idx(d: Path, base: str, offset: int) -> np.ndarray:
    for name, opener in ((base, open), (base + ".gz", gzip.open)):
        if (d / name).exists():
            with opener(d / name, "rb") as f:
                return np.frombuffer(f.read(), np.uint8, offset=offset)
    raise SystemExit(f"{d}: no {base}[.gz] (Fashion-MNIST: --data DIR)")


def fmnist(d: Path, split: str):
    x = idx(d, f"{split}-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    return torch.from_numpy(x), torch.from_numpy(idx(d, f"{split}-labels-idx1-ubyte", 8).astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer images and steps (the CI test)")
    ap.add_argument("--out", default="tour-out")
    ap.add_argument("--data", default=os.environ.get("SNN_DATA_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    d = Path(a.data)
    d = d / "fashion-mnist" if (d / "fashion-mnist").is_dir() else d
    xte, yte = fmnist(d, "t10k")
    xtr, ytr = fmnist(d, "train")
    n_test = 256 if a.quick else 2000
    xte, yte = xte[:n_test], yte[:n_test]
    torch.manual_seed(0)
    same = True

    # -- 1. a trained SpikingJelly model, compiled --------------------------------------------
    from collections import OrderedDict

    from spikingjelly.activation_based import functional, layer, neuron
    T = 8
    sj = torch.nn.Sequential(OrderedDict([
        ("flat", layer.Flatten()), ("fc1", layer.Linear(784, 256)), ("s1", neuron.LIFNode(tau=2.0)),
        ("fc2", layer.Linear(256, 10)), ("s2", neuron.LIFNode(tau=2.0))]))
    functional.set_step_mode(sj, "m")
    import json
    import struct
    raw = (ROOT / "examples" / "fmnist_mlp.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    state = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        dt = {"F16": np.float16, "F32": np.float32}[v["dtype"]]
        state[k] = torch.from_numpy(np.frombuffer(raw[8 + n + s:8 + n + e], dt).astype(np.float32)
                                    .reshape(v["shape"]))
    sj.load_state_dict(state)
    sj.eval()
    with torch.no_grad():
        functional.reset_net(sj)
        want = sj(xte.unsqueeze(0).repeat(T, 1, 1, 1, 1)).mean(0)
    with snnc.compile(sj, timesteps=T, example_input=torch.zeros(1, 28, 28)) as m:
        got = torch.as_tensor(m.run(xte)["out"])  # torch tensors in (CPU ones through numpy)
    ok = torch.equal(got, want)
    same &= ok
    print(f"1. SpikingJelly MLP (trained): snnc's outputs {'equal' if ok else 'DIFFER from'} "
          f"SpikingJelly's on {n_test} test images; accuracy "
          f"{(got.argmax(1) == yte).float().mean():.4f}")

    # -- 2. an snnTorch model trained here, compiled ------------------------------------------
    import snntorch as snn
    from snntorch import utils
    Ts = 10
    # (images flattened outside: snnTorch's NIR export types a Flatten's output with a batch axis)
    xtr_f, xte_f = xtr.reshape(-1, 784), xte.reshape(-1, 784)
    net = torch.nn.Sequential(torch.nn.Linear(784, 128),
                              snn.Leaky(beta=0.9, init_hidden=True), torch.nn.Linear(128, 10),
                              snn.Leaky(beta=0.9, init_hidden=True, output=True))
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    steps = 60 if a.quick else 400
    for i in range(steps):
        b = torch.randint(0, len(xtr), (64,))
        utils.reset(net)
        count = sum(net(xtr_f[b])[0] for _ in range(Ts))
        loss = F.cross_entropy(count, ytr[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        utils.reset(net)
        want = torch.stack([net(xte_f)[0] for _ in range(Ts)], 1)  # [N, T, 10] spikes
    with snnc.compile(net, timesteps=Ts, example_input=torch.zeros(784)) as m:
        seq = xte_f.unsqueeze(1).repeat(1, Ts, 1)  # the image at every step, as it was fed
        got = torch.as_tensor(next(iter(m.run(seq).values()))).reshape(want.shape)
    ok = torch.equal(got, want)
    same &= ok
    print(f"2. snnTorch MLP ({steps} steps of its own loop, loss {loss.item():.3f}): snnc's spikes "
          f"{'equal' if ok else 'DIFFER from'} snnTorch's; accuracy "
          f"{(got.sum(1).argmax(1) == yte).float().mean():.4f}")

    # -- 3. the conv example trained from a PyTorch loop --------------------------------------
    with snnc.compile(ROOT / "examples" / "fmnist_conv.snn", train=True, cuda_arch="none",
                      device="cpu", max_batch=32) as m:
        conv = st.Module(m)
        # from PyTorch's initialisation (the example's file holds trained weights): conv and
        # dense weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)), batchnorm's left at 1 and 0
        with torch.no_grad():
            for name, p in conv.named_parameters():
                if p.dim() > 1:
                    bound = 1 / np.sqrt(p[0].numel())
                    p.uniform_(-bound, bound)
                elif "weight" in name:
                    p.fill_(1.0)
                else:
                    p.zero_()
        opt = torch.optim.Adam(conv.parameters(), lr=1e-3)
        losses, correct = [], []
        nsteps = 60 if a.quick else 200
        for i in range(nsteps):
            b = torch.arange(i * 32, (i + 1) * 32)
            out_ = conv(xtr[b])
            loss = F.mse_loss(out_, F.one_hot(ytr[b], 10).float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            correct.append((out_.argmax(1) == ytr[b]).float().mean().item())
        k = nsteps // 5
        print(f"3. the conv example from a PyTorch loop (snnc.torch.Module, Adam, {nsteps} steps "
              f"of 32): loss {np.mean(losses[:k]):.4f} -> {np.mean(losses[-k:]):.4f}, batch "
              f"accuracy {np.mean(correct[:k]):.3f} -> {np.mean(correct[-k:]):.3f}")

    # -- 4. spikes recorded and plotted -------------------------------------------------------
    import matplotlib
    matplotlib.use("Agg")
    with snnc.compile(ROOT / "examples" / "fmnist_mlp.snn", record=["s1", "s1.v"],
                      cuda_arch="none") as m:
        rec = m.run(xte[:16].numpy(), record=True)
        ax = snnc.plot.raster(rec["s1"], sample=0, title="s1 (LIF): spikes of test image 0")
        ax.figure.savefig(out / "raster_s1.png", dpi=80)
        ax = snnc.plot.rates(rec["s1"], title="s1: firing rates over 16 test images")
        ax.figure.savefig(out / "rates_s1.png", dpi=80)
    print(f"4. plots: {out / 'raster_s1.png'}, {out / 'rates_s1.png'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
