#!/usr/bin/env python3
"""CPU benchmarks: the peers (SpikingJelly, snnTorch) and snnc, same weights, same inputs, same run.

    python3 bench/cpu/peers.py            # full run (a few minutes on 2 cores)
    python3 bench/cpu/peers.py --quick    # smoke run: fewer images and repeats

Workloads (see bench/README.md for what every figure means):
  mlp   examples/fmnist_mlp.snn: 784-256-10, LIF(tau=2) x 2, T=8, direct encoding, the trained f16
        weights of examples/fmnist_mlp.safetensors read as f32. Images/s at batch 256 over the
        10,000 Fashion-MNIST test images; batch-1 latency (median of 200 single-image runs).
  conv  examples/fmnist_conv.snn: SpikingJelly's Fashion-MNIST conv SNN (128 channels, IF neurons,
        T=4). Weights: the example's, trained one epoch by SpikingJelly
        (examples/fmnist_conv.safetensors, f16 read as f32; --conv-weights=default or
        bn-calibrated for the untrained ones of bench/cpu/fmnist_conv_bench*.safetensors).
        Images/s at batch 64 over the first 2,048 test images; batch-1 latency.
  lif   examples/lif_layer.snn: one multi-step LIF layer, N=2^20, T=8, forward: ms per forward and
        effective GB/s (input 4*T*N bytes read + float spikes 4*T*N bytes written).

Peers, used the way their documentation and tutorials use them, on CPU with
torch.set_num_threads(2), torch.no_grad(), eval mode:
  SpikingJelly (activation_based, step_mode='m'; on CPU SpikingJelly 2.x runs its torch
  implementation, there is no backend to choose), and snnTorch (torch.nn layers + snn.Leaky stepped
  in a Python time loop, as in its tutorials).

snnTorch's Leaky is configured to match SpikingJelly's neurons as closely as it allows:
  LIF(tau=2, decay_input, hard reset to 0)  ->  Leaky(beta=0.5, reset_mechanism='zero',
      reset_delay=False) fed with the input current times 1/tau = 0.5 (folded into the Linear
      weights and bias for the MLP, which is exact: scaling by a power of two commutes with
      rounding; pre-scaled outside the timed region for the LIF layer);
  IF (hard reset to 0)                    ->  Leaky(beta=1.0, reset_mechanism='zero',
      reset_delay=False).
  What stays different: snnTorch fires on mem > threshold (SpikingJelly: H >= threshold), and its
  LIF update beta*mem + 0.5*x rounds differently from SpikingJelly's v + (x - v)/tau. The
  prediction/spike agreement with SpikingJelly is measured and reported, not assumed.

Outputs: a table on stdout; bench/cpu/peers.json (machine, versions, date, commands, every figure;
--quick writes bench/cpu/out/peers_quick.json instead so a smoke run never overwrites a full
one); the peers' outputs under bench/cpu/out/ (git-ignored): MLP predictions (uint8 [10000]) and
rates, conv rates ([2048, 10] f32), packed LIF spikes.

The snnc side is `run_snnc()`: it runs `build-rel/driver/snnc --run ... --report=json` for each
backend and compares its outputs with the peers'. Backends: $SNNC_BACKENDS (comma list), else the
reference interpreter (--backend=interp: a correctness oracle, NOT a performance backend, its
rows are labelled so) plus the LLVM CPU backend (--backend=cpu) when the build has it.

No framework code is copied here: the networks are built with the frameworks' public APIs.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import importlib.metadata as md
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path


def _keep_freed_memory() -> bool:
    """Allocator set-up for the peers (benchmarks.md asks for their best CPU set-up; it names
    jemalloc, which is not installed here). glibc serves blocks above its mmap threshold (128 KiB,
    adapting up to 32 MiB; a [8, 2^20] f32 tensor is always above it) with a fresh mmap and
    unmaps them on free, so each new activation tensor is page-faulted in again: in this VM that alone makes a [8, 2^20] elementwise op ~3x slower.
    M_MMAP_MAX=0 + a 1 GiB trim threshold make glibc keep and reuse freed memory, as jemalloc
    would. Must run before torch allocates; --default-malloc skips it."""
    if "--default-malloc" in sys.argv:
        return False
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 1 << 30))  # M_MMAP_MAX, M_TRIM_THRESHOLD
    except OSError:
        return False


MALLOPT = _keep_freed_memory()

import numpy as np  # noqa: E402
import torch  # noqa: E402

warnings.filterwarnings("ignore")
THREADS = 2
torch.set_num_threads(THREADS)

import snntorch as snn  # noqa: E402
import snntorch.utils as snn_utils  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from spikingjelly.activation_based import functional, layer, neuron, surrogate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
DATA = Path(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))

SNNC = ROOT / "build-rel" / "driver" / "snnc"
SNNC_BENCH = ROOT / "build-rel" / "bench" / "snnc_bench"  # times a model.so through the C ABI
# snnc backends run by run_snnc(): $SNNC_BACKENDS, else "interp" (reference oracle) + "cpu" when
# the build has it (see snnc_backends())

MLP_T, CONV_T, LIF_T = 8, 4, 8
LIF_N = 1 << 20
CONV_SEED = 2024          # the seed of examples/fmnist_conv.snn
CONV_CH = 128
CONV_WEIGHTS_TRAINED = ROOT / "examples" / "fmnist_conv.safetensors"
CONV_WEIGHTS = HERE / "fmnist_conv_bench.safetensors"
CONV_WEIGHTS_BNCAL = HERE / "fmnist_conv_bench_bncal.safetensors"
CONV_CAL_IMAGES = 512     # training images whose batch statistics set the BN running stats (bn-calibrated)
LIF_SEED = 8
LIF_INPUT_SCALE = 2.5     # x ~ U[0, 2.5): about a third of the neurons fire at every step


# ------------------------------------------------------------------------------------------------
# data, timing helpers
# ------------------------------------------------------------------------------------------------

def read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def test_set():
    """Fashion-MNIST test images as [N, 1, 28, 28] f32 (uint8 / 255, as torchvision ToTensor and
    snnc --data=fashion-mnist) and labels."""
    imgs = read_idx(DATA / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(DATA / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(imgs.copy()).unsqueeze(1).float().div(255), labels


def argmax_first(a: np.ndarray) -> np.ndarray:
    return np.argmax(a, axis=1).astype(np.uint8)  # numpy: first index on ties, like torch.argmax


def version(pkg: str) -> str:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:  # imported from a path without its dist-info
        return str(getattr(sys.modules.get(pkg) or __import__(pkg), "__version__", "unknown"))


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def throughput(fn, images: torch.Tensor, batch: int, repeats: int, warmup: bool = True) -> dict:
    """Images/s of fn over `images` in batches: the median of `repeats` timed passes (whole pass,
    perf_counter) after a warm-up pass (skipped when the caller has just run the outputs pass at
    the same batch size, which is the warm-up)."""
    def one_pass():
        for i in range(0, len(images), batch):
            fn(images[i:i + batch])
    if warmup:
        one_pass()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"images": len(images), "batch": batch, "repeats": repeats,
            "pass_s": [round(t, 4) for t in times], "median_pass_s": round(med, 4),
            "images_per_s": round(len(images) / med, 1)}


def latency(fn, images: torch.Tensor, runs: int, warmup: int) -> dict:
    """Batch-1 latency: median over `runs` single-image calls (image i of the test set for run i)
    after `warmup` calls."""
    for i in range(warmup):
        fn(images[i % len(images)].unsqueeze(0))
    ts = []
    for i in range(runs):
        x = images[i % len(images)].unsqueeze(0)
        t0 = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return {"runs": runs, "warmup": warmup, "median_ms": round(1e3 * statistics.median(ts), 4),
            "p10_ms": round(1e3 * ts[len(ts) // 10], 4), "p90_ms": round(1e3 * ts[(9 * len(ts)) // 10], 4)}


def outputs(fn, images: torch.Tensor, batch: int) -> np.ndarray:
    return np.concatenate([fn(images[i:i + batch]).numpy() for i in range(0, len(images), batch)])


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return round(float((a[:n] == b[:n]).mean()), 6)


def rate_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of samples whose whole output-rate row is identical."""
    n = min(len(a), len(b))
    return round(float((a[:n] == b[:n]).all(axis=1).mean()), 6)


# ------------------------------------------------------------------------------------------------
# 1. Fashion-MNIST MLP
# ------------------------------------------------------------------------------------------------

class SJMLP(torch.nn.Module):
    """SpikingJelly, multi-step: Flatten -> Linear -> LIFNode(tau=2) -> Linear -> LIFNode(tau=2)."""

    def __init__(self, T: int):
        super().__init__()
        self.T = T
        self.flatten = layer.Flatten(step_mode="m")
        self.fc1 = layer.Linear(784, 256, bias=True, step_mode="m")
        self.sn1 = neuron.LIFNode(tau=2.0, step_mode="m")
        self.fc2 = layer.Linear(256, 10, bias=True, step_mode="m")
        self.sn2 = neuron.LIFNode(tau=2.0, step_mode="m")

    def forward(self, img):  # [B, 1, 28, 28] -> firing rate [B, 10]
        x_seq = img.unsqueeze(0).repeat(self.T, 1, 1, 1, 1)  # direct encoding
        return self.sn2(self.fc2(self.sn1(self.fc1(self.flatten(x_seq))))).mean(0)


class SnnTorchMLP(torch.nn.Module):
    """snnTorch tutorial style: nn.Linear + snn.Leaky, stepped in a Python loop over T."""

    def __init__(self, T: int):
        super().__init__()
        self.T = T
        self.fc1 = torch.nn.Linear(784, 256)
        self.lif1 = snn.Leaky(beta=0.5, threshold=1.0, reset_mechanism="zero", reset_delay=False)
        self.fc2 = torch.nn.Linear(256, 10)
        self.lif2 = snn.Leaky(beta=0.5, threshold=1.0, reset_mechanism="zero", reset_delay=False)

    def forward(self, img):  # [B, 1, 28, 28] -> firing rate [B, 10]
        x = img.flatten(1)
        mem1 = self.lif1.init_leaky()
        mem2 = self.lif2.init_leaky()
        spk2_rec = []
        for _ in range(self.T):
            cur1 = self.fc1(x)
            spk1, mem1 = self.lif1(cur1, mem1)
            cur2 = self.fc2(spk1)
            spk2, mem2 = self.lif2(cur2, mem2)
            spk2_rec.append(spk2)
        return torch.stack(spk2_rec).mean(0)


def bench_mlp(cfg, xte, labels) -> dict:
    w = {k: torch.from_numpy(v.astype(np.float32))
         for k, v in load_file(str(ROOT / "examples" / "fmnist_mlp.safetensors")).items()}
    sj = SJMLP(MLP_T).eval()
    st = SnnTorchMLP(MLP_T).eval()
    with torch.no_grad():
        for name in ("fc1", "fc2"):
            getattr(sj, name).weight.copy_(w[f"{name}.weight"])
            getattr(sj, name).bias.copy_(w[f"{name}.bias"])
            # 1/tau of the LIF input folded into the layer (exact: a power of two)
            getattr(st, name).weight.copy_(w[f"{name}.weight"] * 0.5)
            getattr(st, name).bias.copy_(w[f"{name}.bias"] * 0.5)

    def run_sj(x):
        out = sj(x)
        functional.reset_net(sj)
        return out

    def run_st(x):
        return st(x)

    res = {"network": "784-256-10, LIF(tau=2, decay_input, v_th=1, hard reset 0) x2, T=8, "
                      "direct encoding; examples/fmnist_mlp.safetensors (f16 -> f32)"}
    fixture = ROOT / "tests" / "parity" / "fmnist_mlp" / "predictions.npy"
    preds = {}
    for key, fn, desc in (
            ("spikingjelly", run_sj, "layer.Linear + neuron.LIFNode(tau=2.0), step_mode='m', "
                                     "image repeated T times, functional.reset_net after each batch"),
            ("snntorch", run_st, "nn.Linear (weights*0.5) + snn.Leaky(beta=0.5, reset_mechanism='zero', "
                                 "reset_delay=False) in a Python loop over T")):
        with torch.no_grad():
            print(f"  mlp/{key}: outputs over {len(xte)} images ...", flush=True)
            rates = outputs(fn, xte, 256)
            p = argmax_first(rates)
            preds[key] = p
            np.save(OUT / f"mlp_pred_{key}.npy", p)
            np.save(OUT / f"mlp_rate_{key}.npy", rates.astype(np.float32))
            print(f"  mlp/{key}: throughput ...", flush=True)
            tp = throughput(fn, xte[:cfg.mlp_images], 256, cfg.repeats, warmup=False)
            print(f"  mlp/{key}: latency ...", flush=True)
            lat = latency(fn, xte, cfg.lat_runs, cfg.lat_warmup)
        r = {"setup": desc, "throughput_b256": tp, "latency_b1": lat,
             "accuracy": round(float((p == labels[:len(p)]).mean()), 4), "load_avg": load_avg()}
        if fixture.exists():
            r["agreement_with_parity_fixture"] = agreement(p, np.load(fixture))
        res[key] = r
    res["snntorch"]["agreement_with_spikingjelly"] = agreement(preds["snntorch"], preds["spikingjelly"])
    res["snntorch"]["rate_agreement_with_spikingjelly"] = rate_agreement(
        np.load(OUT / "mlp_rate_snntorch.npy"), np.load(OUT / "mlp_rate_spikingjelly.npy"))
    return res


# ------------------------------------------------------------------------------------------------
# 2. Fashion-MNIST conv SNN (SpikingJelly's conv_fashion_mnist tutorial network)
# ------------------------------------------------------------------------------------------------

CONV_NAMES = ["conv_fc.0.weight",
              "conv_fc.1.weight", "conv_fc.1.bias", "conv_fc.1.running_mean", "conv_fc.1.running_var",
              "conv_fc.4.weight",
              "conv_fc.5.weight", "conv_fc.5.bias", "conv_fc.5.running_mean", "conv_fc.5.running_var",
              "conv_fc.9.weight", "conv_fc.11.weight"]


def conv_weights(kind: str = "trained") -> tuple[dict[str, np.ndarray], Path]:
    """kind "trained" (what every benchmark uses unless told otherwise): the conv example's weights,
    examples/fmnist_conv.safetensors, trained one epoch by SpikingJelly
    (tools/fixtures/train_fmnist_conv.py), stored as float16 and read back as float32 (as snnc
    reads them); real firing rates, predictions in tests/parity/fmnist_conv.
    kind "default": PyTorch default initialisation, fixed seed, created in the network's layer
    order (the indices are those of SpikingJelly's conv_fc Sequential): BatchNorm weight 1, bias 0,
    running mean 0, running var 1. Written once, then reused. With it the two dense IF layers
    never fire (the first conv's outputs are too small), so the output rates are all zero.
    kind "bn-calibrated": the same conv/linear weights, BatchNorm running statistics replaced by
    the batch statistics of the first 512 training images (train-mode forward, momentum=None,
    batches of 64), so the first three spiking layers fire (~26%, 19%, 6%); the output layer is
    still almost silent: only trained weights make the predictions meaningful."""
    if kind == "trained":
        if not CONV_WEIGHTS_TRAINED.exists():
            sys.exit(f"{CONV_WEIGHTS_TRAINED}: missing (python3 tools/fixtures/train_fmnist_conv.py)")
        return ({k: v.astype(np.float32) for k, v in load_file(str(CONV_WEIGHTS_TRAINED)).items()},
                CONV_WEIGHTS_TRAINED)
    if kind == "bn-calibrated":
        if not CONV_WEIGHTS_BNCAL.exists():
            w = {k: torch.from_numpy(v) for k, v in conv_weights("default")[0].items()}
            net = SJConv(CONV_T)
            net.load_state_dict(w, strict=False)
            for m in net.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.reset_running_stats()
                    m.momentum = None  # cumulative average over the calibration batches
            imgs = read_idx(DATA / "train-images-idx3-ubyte.gz")[:CONV_CAL_IMAGES]
            x = torch.from_numpy(imgs.copy()).unsqueeze(1).float().div(255)
            net.train()
            with torch.no_grad():
                for i in range(0, len(x), 64):
                    net(x[i:i + 64])
                    functional.reset_net(net)
            sd = net.state_dict()
            save_file({k: sd[k].numpy().astype(np.float32).copy() for k in CONV_NAMES}, str(CONV_WEIGHTS_BNCAL))
            os.chmod(CONV_WEIGHTS_BNCAL, 0o644)
        return load_file(str(CONV_WEIGHTS_BNCAL)), CONV_WEIGHTS_BNCAL
    if not CONV_WEIGHTS.exists():
        torch.manual_seed(CONV_SEED)
        c = CONV_CH
        mods = {0: torch.nn.Conv2d(1, c, 3, padding=1, bias=False), 1: torch.nn.BatchNorm2d(c),
                4: torch.nn.Conv2d(c, c, 3, padding=1, bias=False), 5: torch.nn.BatchNorm2d(c),
                9: torch.nn.Linear(c * 7 * 7, c * 4 * 4, bias=False),
                11: torch.nn.Linear(c * 4 * 4, 10, bias=False)}
        w = {}
        for i, m in mods.items():
            for k, v in m.state_dict().items():
                if k != "num_batches_tracked":
                    w[f"conv_fc.{i}.{k}"] = v.detach().numpy().astype(np.float32).copy()
        assert sorted(w) == sorted(CONV_NAMES), sorted(w)
        save_file(w, str(CONV_WEIGHTS))
        os.chmod(CONV_WEIGHTS, 0o644)
    return load_file(str(CONV_WEIGHTS)), CONV_WEIGHTS


class SJConv(torch.nn.Module):
    """SpikingJelly's Fashion-MNIST CSNN (conv_fashion_mnist example), multi-step."""

    def __init__(self, T: int, c: int = CONV_CH):
        super().__init__()
        self.T = T
        self.conv_fc = torch.nn.Sequential(
            layer.Conv2d(1, c, kernel_size=3, padding=1, bias=False),
            layer.BatchNorm2d(c),
            neuron.IFNode(surrogate_function=surrogate.ATan()),
            layer.MaxPool2d(2, 2),  # 14 x 14
            layer.Conv2d(c, c, kernel_size=3, padding=1, bias=False),
            layer.BatchNorm2d(c),
            neuron.IFNode(surrogate_function=surrogate.ATan()),
            layer.MaxPool2d(2, 2),  # 7 x 7
            layer.Flatten(),
            layer.Linear(c * 7 * 7, c * 4 * 4, bias=False),
            neuron.IFNode(surrogate_function=surrogate.ATan()),
            layer.Linear(c * 4 * 4, 10, bias=False),
            neuron.IFNode(surrogate_function=surrogate.ATan()),
        )
        functional.set_step_mode(self, step_mode="m")

    def forward(self, x):  # [B, 1, 28, 28] -> firing rate [B, 10]
        x_seq = x.unsqueeze(0).repeat(self.T, 1, 1, 1, 1)
        return self.conv_fc(x_seq).mean(0)


def st_if():
    return snn.Leaky(beta=1.0, threshold=1.0, reset_mechanism="zero", reset_delay=False, init_hidden=True)


class SnnTorchConv(torch.nn.Module):
    """snnTorch tutorial 7 style: the same layers in nn.Sequential with Leaky(init_hidden=True)
    neurons (beta=1: integrate-and-fire), the whole net called once per time step."""

    def __init__(self, T: int, c: int = CONV_CH):
        super().__init__()
        self.T = T
        last = snn.Leaky(beta=1.0, threshold=1.0, reset_mechanism="zero", reset_delay=False,
                         init_hidden=True, output=True)
        self.conv_fc = torch.nn.Sequential(
            torch.nn.Conv2d(1, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c), st_if(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c), st_if(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(c * 7 * 7, c * 4 * 4, bias=False), st_if(),
            torch.nn.Linear(c * 4 * 4, 10, bias=False), last,
        )

    def forward(self, x):
        snn_utils.reset(self.conv_fc)
        spk_rec = []
        for _ in range(self.T):
            spk, _mem = self.conv_fc(x)
            spk_rec.append(spk)
        return torch.stack(spk_rec).mean(0)


def layer_rates(seq: torch.nn.Sequential, x_in, T: int) -> list[float]:
    """Mean firing rate of every IFNode of SpikingJelly's multi-step conv_fc (untimed diagnostic)."""
    rates = []
    h = x_in.unsqueeze(0).repeat(T, 1, 1, 1, 1)
    for m in seq:
        h = m(h)
        if isinstance(m, neuron.IFNode):
            rates.append(float(h.mean()))
    return rates


def bench_conv(cfg, xte, labels) -> dict:
    wnp, wpath = conv_weights(cfg.conv_weights)
    w = {k: torch.from_numpy(v) for k, v in wnp.items()}
    sj = SJConv(CONV_T).eval()
    st = SnnTorchConv(CONV_T).eval()
    for net in (sj, st):
        missing, unexpected = net.load_state_dict(w, strict=False)
        assert not unexpected, unexpected
        assert all(k.endswith(("num_batches_tracked", ".beta", ".threshold", ".graded_spikes_factor",
                               ".reset_mechanism_val", ".mem")) for k in missing), missing
    x = xte[:cfg.conv_images]

    def run_sj(xb):
        out = sj(xb)
        functional.reset_net(sj)
        return out

    res = {"network": "SpikingJelly conv_fashion_mnist CSNN, 128 channels, IF(v_th=1, hard reset 0), "
                      "T=4, direct encoding; BatchNorm in eval mode",
           "weights": (f"trained: one epoch of SpikingJelly training (tools/fixtures/train_fmnist_conv.py), "
                       f"{wpath.relative_to(ROOT)} (f16 read as f32)" if cfg.conv_weights == "trained" else
                       f"{cfg.conv_weights}: PyTorch default init, torch.manual_seed({CONV_SEED}), layers "
                       f"created in order" + (f"; BatchNorm running stats from {CONV_CAL_IMAGES} training images"
                                              if cfg.conv_weights == "bn-calibrated" else "") +
                       f"; {wpath.relative_to(ROOT)} (f32)"), "weights_file": str(wpath),
           "weights_sha256": hashlib.sha256(wpath.read_bytes()).hexdigest()}
    rates_by = {}
    with torch.no_grad():
        res["layer_firing_rates_spikingjelly"] = [
            round(r, 6) for r in layer_rates(sj.conv_fc, x[:64], CONV_T)]
        functional.reset_net(sj)
    for key, fn, desc in (
            ("spikingjelly", run_sj, "layer.Conv2d/BatchNorm2d/MaxPool2d/Linear + neuron.IFNode, "
                                     "step_mode='m' (conv_fashion_mnist example), functional.reset_net"),
            ("snntorch", st, "nn.Conv2d/BatchNorm2d/MaxPool2d/Linear + snn.Leaky(beta=1.0, "
                             "reset_mechanism='zero', reset_delay=False, init_hidden=True), "
                             "Python loop over T, utils.reset per batch")):
        with torch.no_grad():
            print(f"  conv/{key}: outputs over {len(x)} images ...", flush=True)
            rates = outputs(fn, x, 64)
            rates_by[key] = rates
            np.save(OUT / f"conv_rate_{key}.npy", rates.astype(np.float32))
            print(f"  conv/{key}: throughput ...", flush=True)
            tp = throughput(fn, x[:cfg.conv_tp_images], 64, cfg.repeats, warmup=False)
            print(f"  conv/{key}: latency ...", flush=True)
            lat = latency(fn, xte, cfg.conv_lat_runs, cfg.lat_warmup)
        p = argmax_first(rates)
        res[key] = {"setup": desc, "throughput_b64": tp, "latency_b1": lat,
                    "accuracy_untrained": round(float((p == labels[:len(p)]).mean()), 4),
                    "mean_output_rate": round(float(rates.mean()), 6), "load_avg": load_avg()}
    res["snntorch"]["rate_agreement_with_spikingjelly"] = rate_agreement(rates_by["snntorch"],
                                                                          rates_by["spikingjelly"])
    return res


# ------------------------------------------------------------------------------------------------
# 3. One LIF layer, N = 2^20, T = 8, forward
# ------------------------------------------------------------------------------------------------

def lif_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(LIF_SEED)
    return torch.rand(LIF_T, LIF_N, generator=g) * LIF_INPUT_SCALE  # [T, N] f32


def median_ms(fn, repeats: int, warmup: int = 2) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts), [round(1e3 * t, 3) for t in ts]


def bench_lif(cfg) -> dict:
    x = lif_input()
    nbytes = 2 * 4 * LIF_T * LIF_N  # f32 input read + f32 spikes written
    # machine yardstick: a plain 2-thread copy of the same 32 MiB (read + write)
    dst = torch.empty_like(x)
    copy_ms, _ = median_ms(lambda: dst.copy_(x), max(cfg.lif_repeats, 5))
    res = {"N": LIF_N, "T": LIF_T, "input": f"torch.rand(T, N, seed {LIF_SEED}) * {LIF_INPUT_SCALE}",
           "bytes_moved": nbytes,
           "copy_yardstick": {"what": "torch dst.copy_(src) of the [T, N] f32 input, 2 threads",
                              "ms": round(copy_ms, 3), "GB_per_s": round(nbytes / copy_ms / 1e6, 2)}}

    sj = neuron.LIFNode(tau=2.0, step_mode="m").eval()

    def run_sj():
        out = sj(x)
        sj.reset()
        return out

    st = snn.Leaky(beta=0.5, threshold=1.0, reset_mechanism="zero", reset_delay=False).eval()
    xh = x * 0.5  # 1/tau input scaling, outside the timed region

    def run_st():
        mem = st.init_leaky()
        rec = []
        for t in range(LIF_T):
            spk, mem = st(xh[t], mem)
            rec.append(spk)
        return torch.stack(rec)

    spikes = {}
    with torch.no_grad():
        for key, fn, desc in (
                ("spikingjelly", run_sj, "neuron.LIFNode(tau=2.0, step_mode='m') on [T, N], then reset()"),
                ("snntorch", run_st, "snn.Leaky(beta=0.5, reset_mechanism='zero', reset_delay=False) "
                                     "in a Python loop over T on 0.5*x, torch.stack of the spikes")):
            print(f"  lif/{key} ...", flush=True)
            s = fn()
            spikes[key] = s.numpy().astype(bool)
            np.save(OUT / f"lif_spikes_packed_{key}.npy", np.packbits(spikes[key], axis=-1))
            ms, all_ms = median_ms(fn, cfg.lif_repeats)
            res[key] = {"setup": desc, "median_ms": round(ms, 3), "runs_ms": all_ms,
                        "GB_per_s": round(nbytes / ms / 1e6, 2),
                        "pct_of_copy": round(100 * copy_ms / ms, 1),
                        "spike_rate": round(float(spikes[key].mean()), 6), "load_avg": load_avg()}
    res["snntorch"]["spike_agreement_with_spikingjelly"] = round(
        float((spikes["snntorch"] == spikes["spikingjelly"]).mean()), 8)
    return res, x, spikes


# ------------------------------------------------------------------------------------------------
# snnc (today the reference interpreter; later --backend=cpu)
# ------------------------------------------------------------------------------------------------

def snnc_help() -> str:
    try:
        return subprocess.run([str(SNNC), "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def snnc_backends() -> list[str]:
    """The backends to run: $SNNC_BACKENDS (comma list) if set, else the reference interpreter
    plus the CPU backend when this snnc build has it (`snnc --help` lists --backend=cpu)."""
    if os.environ.get("SNNC_BACKENDS"):
        return [b.strip() for b in os.environ["SNNC_BACKENDS"].split(",") if b.strip()]
    has_cpu = "--backend=cpu" in snnc_help()
    return ["interp"] + (["cpu"] if has_cpu else []) + (["so"] if has_cpu and SNNC_BENCH.exists() else [])


def snnc_threads(backend: str, want: int) -> int | None:
    """Threads given to a compiled backend: the peers' count when snnc has --threads, None when
    it has no such option (then it runs on one thread)."""
    return want if backend != "interp" and "--threads=" in snnc_help() else None


def snnc_cmd(backend: str, model: Path, extra: list[str], threads: int | None = None) -> list[str]:
    opt = ["--precision=f32"] if backend == "interp" else []  # compiled backends are f32
    if threads is not None:
        opt.append(f"--threads={threads}")
    return [str(SNNC), "--run", str(model), f"--backend={backend}", *opt, "--report=json", "-q", *extra]


def snnc_exec(cmd: list[str], env: dict | None = None) -> tuple[dict, float]:
    """Run one snnc command; retried when the binary is being relinked by a concurrent build."""
    for attempt in range(4):
        try:
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True,
                               env=None if env is None else {**os.environ, **env})
            wall = time.perf_counter() - t0
            break
        except OSError as e:  # EACCES / ETXTBSY while the linker rewrites the file
            if attempt == 3:
                raise
            print(f"  snnc: {e}; retrying in 20 s", flush=True)
            time.sleep(20)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1]), wall


def run_snnc_so(cfg, peers: dict, labels, lif_x, lif_spikes) -> dict:
    """The deployment path: each model built into a model.so (snnc MODEL -o), timed through its C
    ABI by build-rel/bench/snnc_bench exactly as the peers are timed: one session, a warm-up pass,
    the median of repeated passes, and the median of single-image runs for batch-1 latency (the
    peers' method), same thread count."""
    import tempfile
    res = {"backend": "so", "threads": cfg.threads, "label": "snnc model.so (C ABI)",
           "commands": [], "errors": []}
    tmp = Path(tempfile.mkdtemp(prefix="snnc-bench-"))

    def go(cmd):
        res["commands"].append(shlex.join(cmd).replace(str(ROOT) + "/", "").replace(str(tmp), "TMP"))
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)}: {r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}

    def build(name, extra=()):
        so = tmp / f"{name}.so"
        go([str(SNNC), str(ROOT / "examples" / f"{name}.snn"), *extra, "-o", str(so)])
        return so

    def bench(so, data, batch, limit, out, lat_runs, repeats):
        return go([str(SNNC_BENCH), str(so), *data, f"--batch={batch}", f"--limit={limit}",
                   f"--repeats={repeats}", f"--threads={cfg.threads}",
                   f"--latency-runs={lat_runs}", f"--output={out}"])

    def mlp():
        out = OUT / "mlp_rate_snnc_so.npy"
        r = bench(build("fmnist_mlp"), ["--fmnist"], 256, 10000, out, cfg.lat_runs, cfg.repeats)
        rate = np.load(out)
        p = argmax_first(rate)
        return {"images": r["images"], "images_per_s_b256": r["images_per_s"],
                "pass_seconds": r["pass_seconds"], "mean_latency_b1_ms": r["latency_b1_ms"],
                "latency_statistic": "median", "latency_images": r["latency_runs"],
                "accuracy": round(float((p == labels[:len(p)]).mean()), 4),
                "agreement_with_spikingjelly": agreement(p, np.load(OUT / "mlp_pred_spikingjelly.npy")),
                "agreement_with_snntorch": agreement(p, np.load(OUT / "mlp_pred_snntorch.npy")),
                "rate_agreement_with_spikingjelly": rate_agreement(
                    rate, np.load(OUT / "mlp_rate_spikingjelly.npy"))}

    def conv():
        out = OUT / "conv_rate_snnc_so.npy"
        so = build("fmnist_conv", [f"--weights={peers['conv']['weights_file']}"])
        r = bench(so, ["--fmnist"], 64, cfg.conv_tp_images, out, cfg.conv_lat_runs, cfg.repeats)
        rate = np.load(out)
        return {"images": r["images"], "images_per_s_b64": r["images_per_s"],
                "pass_seconds": r["pass_seconds"], "mean_latency_b1_ms": r["latency_b1_ms"],
                "latency_statistic": "median",
                "rate_agreement_with_spikingjelly": rate_agreement(
                    rate, np.load(OUT / "conv_rate_spikingjelly.npy")[:len(rate)]),
                "rate_agreement_with_snntorch": rate_agreement(
                    rate, np.load(OUT / "conv_rate_snntorch.npy")[:len(rate)])}

    def lif():
        xin = OUT / "lif_input.npy"
        np.save(xin, lif_x.numpy()[None])
        out = tmp / "lif_spikes.npy"
        r = bench(build("lif_layer"), [f"--input={xin}"], 1, 1, out, 0, cfg.lif_repeats)
        s_ = np.load(out)[0].astype(bool)
        ms = 1e3 * r["median_pass_s"]
        return {"median_ms": round(ms, 3), "pass_seconds": r["pass_seconds"],
                "GB_per_s": round(peers["lif"]["bytes_moved"] / ms / 1e6, 3),
                "pct_of_copy": round(100 * peers["lif"]["copy_yardstick"]["ms"] / ms, 1),
                "spike_agreement_with_spikingjelly": round(float((s_ == lif_spikes["spikingjelly"]).mean()), 8),
                "spike_agreement_with_snntorch": round(float((s_ == lif_spikes["snntorch"]).mean()), 8)}

    for name, fn in (("mlp", mlp), ("conv", conv), ("lif", lif)):
        if name in peers:
            print(f"  snnc model.so {name} ...", flush=True)
            try:
                res[name] = fn()
            except Exception as e:
                res["errors"].append(f"{name}: {e}")
                print(f"  snnc model.so {name}: FAILED: {e}", flush=True)
    if not res["errors"]:
        del res["errors"]
    return res


def run_snnc(cfg, backend: str, peers: dict, labels, lif_x, lif_spikes) -> dict:
    """=== THE snnc SIDE ===
    Runs build-rel/driver/snnc --run MODEL --backend=BACKEND --report=json on the same weights
    and inputs as the peers and compares its outputs with theirs.
    backend "interp" is the reference interpreter: a correctness oracle, NOT a performance
    backend; its numbers are recorded (and labelled so) to check the outputs, not as snnc's
    performance. backend "cpu" is the LLVM CPU backend: its rows are the comparison with the
    peers; it gets the peers' thread count (--threads=N) when the build has that option.
    Images/s come from snnc's own report (seconds of the run loop: start-up, weight loading and
    compilation excluded; one pass, no warm-up pass, median of the repeated processes); the
    process wall time is recorded too. Batch-1 latency is the mean per-image time of a
    --batch=1 run (snnc reports totals, not per-image times)."""
    threads = snnc_threads(backend, cfg.threads)
    res = {"backend": backend, "threads": threads if threads is not None else 1,
           "label": ("reference interpreter (correctness oracle, not a performance backend)"
                     if backend == "interp" else f"snnc --backend={backend}"),
           "binary": str(SNNC.relative_to(ROOT)), "commands": [], "errors": []}
    if not SNNC.exists():
        res["skipped"] = f"{SNNC} not built (cmake --build build-rel)"
        return res
    interp = backend == "interp"
    repeats = 1 if interp else cfg.snnc_repeats  # the interpreter's figures are not performance
    tag = "snnc" if interp else f"snnc_{backend}"

    def cmd_(model, extra):
        return snnc_cmd(backend, model, extra, threads)

    def go(cmd):
        res["commands"].append(shlex.join(cmd).replace(str(ROOT) + "/", ""))
        return snnc_exec(cmd)

    def median_run(cmd, n):  # the run with the median report seconds, and all of them
        runs = sorted((go(cmd) for _ in range(n)), key=lambda r: r[0]["seconds"])
        return runs[len(runs) // 2], [r[0]["seconds"] for r in runs]

    def section(name, fn):
        try:
            res[name] = fn()
        except Exception as e:  # keep the peers' figures and the other sections
            res["errors"].append(f"{name}: {e}")
            print(f"  snnc {backend} {name}: FAILED: {e}", flush=True)

    mlp_model, conv_model = ROOT / "examples/fmnist_mlp.snn", ROOT / "examples/fmnist_conv.snn"

    def mlp():
        out = OUT / f"mlp_rate_{tag}.npy"
        n = cfg.snnc_mlp_images
        (rep, wall), secs = median_run(cmd_(mlp_model, [
            "--data=fashion-mnist", "--batch=256", f"--limit={n}", f"--output={out}"]), repeats)
        rate = np.load(out)
        p = argmax_first(rate)
        np.save(OUT / f"mlp_pred_{tag}.npy", p)
        (rep1, _), _ = median_run(cmd_(mlp_model, [
            "--data=fashion-mnist", "--batch=1", f"--limit={cfg.lat_runs}"]), 1)
        return {"images": n, "images_per_s_b256": rep["images_per_second"],
                "run_seconds": secs, "process_wall_s": round(wall, 3),
                "mean_latency_b1_ms": round(1e3 * rep1["seconds"] / rep1["images"], 4),
                "latency_images": rep1["images"],
                "accuracy": round(float((p == labels[:n]).mean()), 4),
                "agreement_with_spikingjelly": agreement(p, np.load(OUT / "mlp_pred_spikingjelly.npy")),
                "agreement_with_snntorch": agreement(p, np.load(OUT / "mlp_pred_snntorch.npy")),
                "rate_agreement_with_spikingjelly": rate_agreement(
                    rate, np.load(OUT / "mlp_rate_spikingjelly.npy")),
                "firing_rates": rep.get("firing_rates")}

    def conv():
        wpath = Path(peers["conv"]["weights_file"])
        out = OUT / f"conv_rate_{tag}.npy"
        n = cfg.snnc_conv_images if interp else cfg.conv_tp_images
        (rep, wall), secs = median_run(cmd_(conv_model, [
            "--data=fashion-mnist", "--batch=64", f"--limit={n}", f"--weights={wpath}",
            f"--output={out}"]), repeats)
        r = np.load(out)
        (rep1, _), _ = median_run(cmd_(conv_model, [
            "--data=fashion-mnist", "--batch=1", f"--limit={cfg.snnc_conv_lat if interp else cfg.conv_lat_runs}",
            f"--weights={wpath}"]), 1)
        return {"images": n, "images_per_s_b64": rep["images_per_second"], "run_seconds": secs,
                "process_wall_s": round(wall, 3),
                "mean_latency_b1_ms": round(1e3 * rep1["seconds"] / rep1["images"], 4),
                "latency_images": rep1["images"],
                "rate_agreement_with_spikingjelly": rate_agreement(r, np.load(OUT / "conv_rate_spikingjelly.npy")),
                "rate_agreement_with_snntorch": rate_agreement(r, np.load(OUT / "conv_rate_snntorch.npy")),
                "firing_rates": rep.get("firing_rates")}

    def lif():
        xin = OUT / "lif_input.npy"
        np.save(xin, lif_x.numpy()[None])
        out = OUT / f"lif_spikes_{tag}.npy"
        (rep, wall), secs = median_run(cmd_(ROOT / "examples/lif_layer.snn", [
            f"--input={xin}", f"--output={out}"]), repeats if interp else cfg.lif_repeats)
        s = np.load(out)[0].astype(bool)  # [1, T, N] -> [T, N]
        out.unlink(missing_ok=True)  # 32 MiB; the input stays for re-runs by hand
        ms = 1e3 * rep["seconds"]
        return {"median_ms": round(ms, 3), "run_seconds": secs, "process_wall_s": round(wall, 3),
                "GB_per_s": round(peers["lif"]["bytes_moved"] / ms / 1e6, 3),
                "pct_of_copy": round(100 * peers["lif"]["copy_yardstick"]["ms"] / ms, 1),
                "spike_agreement_with_spikingjelly": round(float((s == lif_spikes["spikingjelly"]).mean()), 8),
                "spike_agreement_with_snntorch": round(float((s == lif_spikes["snntorch"]).mean()), 8)}

    def compile_time():
        """compile_seconds of each example, cold (an empty SNN_CACHE_DIR: lowering, LLVM O3 and
        code generation) and cached (the same directory again: lowering and loading the object),
        median of 3 each; and the time to build a model.so (snnc -o, process wall time)."""
        import tempfile
        out = {}
        # the examples of the workloads that ran (the conv SNN's weights come from its run)
        for name, key in (("fmnist_mlp", "mlp"), ("fmnist_conv", "conv"), ("lif_layer", "lif")):
            if key not in peers:
                continue
            model = ROOT / "examples" / f"{name}.snn"
            cold, warm = [], []
            for _ in range(3):
                with tempfile.TemporaryDirectory() as d:
                    cmd = [str(SNNC), "--run", str(model), "--report=json", "-q",
                           "--data=fashion-mnist" if name != "lif_layer" else f"--input={OUT / 'lif_input.npy'}",
                           "--limit=1"]
                    if name == "fmnist_conv":
                        cmd.append(f"--weights={peers['conv']['weights_file']}")
                    res["commands"].append("SNN_CACHE_DIR=TMP " + shlex.join(cmd).replace(str(ROOT) + "/", ""))
                    r1, _ = snnc_exec(cmd, {"SNN_CACHE_DIR": d})
                    r2, _ = snnc_exec(cmd, {"SNN_CACHE_DIR": d})
                    assert r1.get("cache") == "miss" and r2.get("cache") == "hit", (r1, r2)
                    cold.append(r1["compile_seconds"])
                    warm.append(r2["compile_seconds"])
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                subprocess.run([str(SNNC), str(model), "-o", f"{d}/m.so"], check=True)
                so_s = time.perf_counter() - t0
            out[name] = {"cold_s": round(statistics.median(cold), 4),
                         "cached_s": round(statistics.median(warm), 4),
                         "model_so_build_s": round(so_s, 3)}
        return out

    for name, fn in (("mlp", mlp), ("conv", conv), ("lif", lif)):
        if name in peers:
            print(f"  snnc {backend} {name} ...", flush=True)
            section(name, fn)
    if backend == "cpu" and "lif" in peers:
        print(f"  snnc {backend} compile times ...", flush=True)
        section("compile", compile_time)
    if not res["errors"]:
        del res["errors"]
    return res


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------

def project_info() -> dict:
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"git_commit": out(["git", "rev-parse", "HEAD"]),
            "git_dirty": bool(out(["git", "status", "--porcelain", "--untracked-files=no"])),
            "snnc_version": out([str(SNNC), "--version"]) if SNNC.exists() else None}


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count(), "cores_allowed": len(os.sched_getaffinity(0)),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "python": platform.python_version(),
            "torch_blas": "MKL" if torch.backends.mkl.is_available() else "not MKL",
            "glibc_malloc_keeps_freed_memory": MALLOPT,
            "mkldnn": torch.backends.mkldnn.is_available()}


def table(res: dict) -> str:
    rows = [("workload", "framework", "throughput", "batch-1 latency", "agreement")]
    snnc = res.get("snnc", {})

    def label(b):
        n = snnc[b].get("threads", 1)
        if b == "interp":
            return "snnc interp (reference oracle)"
        return f"snnc {'model.so' if b == 'so' else b} ({n} thread{'s' * (n > 1)})"

    if "mlp" in res:
        m = res["mlp"]
        for k in ("spikingjelly", "snntorch"):
            a = m[k].get("agreement_with_spikingjelly")
            rows.append(("MLP T=8", k, f"{m[k]['throughput_b256']['images_per_s']:,.0f} img/s (b256)",
                         f"{m[k]['latency_b1']['median_ms']:.3f} ms (p10 {m[k]['latency_b1']['p10_ms']:.3f})",
                         f"acc {m[k]['accuracy']:.4f}" + (f", pred = SJ {100 * a:.2f}%" if a is not None else "")))
        for b, sn in snnc.items():
            if "mlp" in sn:
                s = sn["mlp"]
                rows.append(("MLP T=8", label(b), f"{s['images_per_s_b256']:,.0f} img/s (b256)",
                             f"{s['mean_latency_b1_ms']:.3f} ms ({s.get('latency_statistic', 'mean')})",
                             f"acc {s['accuracy']:.4f}, pred = SJ {100 * s['agreement_with_spikingjelly']:.2f}%, "
                             f"= snnTorch {100 * s['agreement_with_snntorch']:.2f}%"))
    if "conv" in res:
        c = res["conv"]
        for k in ("spikingjelly", "snntorch"):
            a = c[k].get("rate_agreement_with_spikingjelly")
            rows.append(("conv T=4", k, f"{c[k]['throughput_b64']['images_per_s']:,.1f} img/s (b64)",
                         f"{c[k]['latency_b1']['median_ms']:.2f} ms (p10 {c[k]['latency_b1']['p10_ms']:.2f})",
                         f"out rate {c[k]['mean_output_rate']:.4f}" + (f", rates = SJ {100 * a:.2f}%" if a is not None else "")))
        for b, sn in snnc.items():
            if "conv" in sn:
                s = sn["conv"]
                rows.append(("conv T=4", label(b), f"{s['images_per_s_b64']:,.1f} img/s (b64)",
                             f"{s['mean_latency_b1_ms']:.2f} ms ({s.get('latency_statistic', 'mean')})",
                             f"rates = SJ {100 * s['rate_agreement_with_spikingjelly']:.2f}% of {s['images']}"))
    if "lif" in res:
        l_ = res["lif"]
        rows.append(("LIF 2^20 T=8", "copy yardstick", f"{l_['copy_yardstick']['GB_per_s']:.2f} GB/s",
                     f"{l_['copy_yardstick']['ms']:.3f} ms", ""))
        for k in ("spikingjelly", "snntorch"):
            a = l_[k].get("spike_agreement_with_spikingjelly")
            rows.append(("LIF 2^20 T=8", k, f"{l_[k]['GB_per_s']:.2f} GB/s ({l_[k]['pct_of_copy']:.0f}% of copy)",
                         f"{l_[k]['median_ms']:.2f} ms", f"rate {l_[k]['spike_rate']:.4f}"
                         + (f", spikes = SJ {100 * a:.4f}%" if a is not None else "")))
        for b, sn in snnc.items():
            if "lif" in sn:
                s = sn["lif"]
                rows.append(("LIF 2^20 T=8", label(b),
                             f"{s['GB_per_s']:.2f} GB/s ({s['pct_of_copy']:.0f}% of copy)",
                             f"{s['median_ms']:.2f} ms",
                             f"spikes = SJ {100 * s['spike_agreement_with_spikingjelly']:.4f}%"))
    for b, sn in snnc.items():
        for e in sn.get("errors", []):
            rows.append(("ERROR", label(b), e[:60], "", ""))
        if "skipped" in sn:
            rows.append(("skipped", label(b), sn["skipped"][:60], "", ""))
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer images and repeats")
    ap.add_argument("--only", default="mlp,conv,lif", help="comma list of workloads (mlp, conv, lif)")
    ap.add_argument("--no-snnc", action="store_true", help="peers only")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="torch threads for every peer (default 2, the benchmark's setting)")
    ap.add_argument("--conv-weights", choices=("trained", "default", "bn-calibrated"), default="trained",
                    help="conv SNN weights (see conv_weights())")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc malloc at its defaults (see _keep_freed_memory)")
    ap.add_argument("--json", type=Path, help="where to write the results "
                    "(default bench/cpu/peers.json, --quick: bench/cpu/out/peers_quick.json)")
    args = ap.parse_args()
    q = args.quick
    torch.set_num_threads(args.threads)
    cfg = argparse.Namespace(
        threads=args.threads, conv_weights=args.conv_weights,
        repeats=3 if q else 5,               # timed passes (median)
        mlp_images=2048 if q else 10000,      # MLP throughput pass (outputs always over all 10,000)
        lat_runs=50 if q else 200, lat_warmup=10 if q else 20,
        conv_images=2048,                     # conv outputs
        conv_tp_images=256 if q else 2048,    # conv throughput pass
        conv_lat_runs=50 if q else 200,
        lif_repeats=5 if q else 11,
        snnc_repeats=1 if q else 3,
        snnc_mlp_images=10000,
        snnc_conv_images=128 if q else 1024,  # the interpreter runs ~20 conv images/s
        snnc_conv_lat=8 if q else 32,
    )
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [w.strip() for w in args.only.split(",") if w.strip()]
    started = datetime.datetime.now(datetime.timezone.utc)
    res = {"date_utc": started.isoformat(timespec="seconds"), "mode": "quick" if q else "full",
           "machine": machine(),
           "versions": {p: version(p) for p in ("torch", "spikingjelly", "snntorch", "numpy", "safetensors")},
           "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *[a if not a.startswith(str(ROOT)) else
                                                                     a[len(str(ROOT)) + 1:] for a in sys.argv]]),
           "config": vars(cfg), "project": project_info(), "load_avg_start": load_avg(),
           "notes": ["torch.set_num_threads(2) for every peer; torch.no_grad(); eval mode",
                     "timings are medians of repeated whole passes after a warm-up pass",
                     "snnc's figures come from its own --report=json"]}
    xte, labels = test_set()
    lif_x = lif_spikes = None
    t0 = time.time()
    if "mlp" in todo:
        print("MLP ...", flush=True)
        res["mlp"] = bench_mlp(cfg, xte, labels)
    if "conv" in todo:
        print("conv ...", flush=True)
        res["conv"] = bench_conv(cfg, xte, labels)
    if "lif" in todo:
        print("LIF layer ...", flush=True)
        res["lif"], lif_x, lif_spikes = bench_lif(cfg)
    if not args.no_snnc:
        res["snnc"] = {}
        for backend in snnc_backends():
            print(f"snnc --backend={backend} ...", flush=True)
            res["snnc"][backend] = (run_snnc_so(cfg, res, labels, lif_x, lif_spikes) if backend == "so"
                                    else run_snnc(cfg, backend, res, labels, lif_x, lif_spikes))
    res["load_avg_end"] = load_avg()
    res["elapsed_s"] = round(time.time() - t0, 1)
    print()
    print(table(res))
    print(f"\nload average start {res['load_avg_start']} end {res['load_avg_end']} on "
          f"{res['machine']['cores']} cores ({res['machine']['cpu_model']}); {res['elapsed_s']} s")
    path = args.json or (OUT / "peers_quick.json" if q else HERE / "peers.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
