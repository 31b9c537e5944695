#!/usr/bin/env python3
"""One measuring process of the GPU suite (bench/gpu/peers.py starts it; not meant to be run by hand).

    python3 bench/gpu/worker.py SPEC.json

SPEC names a kind (probe, copy, lif, net) and an implementation; the result goes to
SPEC["result"] as JSON (rewritten after every configuration, so a timeout keeps what was done), and
the outputs to compare (packed spikes, output rates) to SPEC["out_dir"]. Each implementation runs in
its own process because SpikingJelly 2.x picks its neuron implementation from environment variables
read at import (SJ_LIF_CUDA_IMPLEMENTATION, SJ_IF_CUDA_IMPLEMENTATION) and SpikingJelly 0.0.0.0.14
(the one with backend='cupy') is another version of the same package; and so that a crash or a hang
of one peer costs only its own rows.

Implementations (the same names in peers.py):
  sj2-triton, sj2-torch, sj2-cuda  SpikingJelly 2.x, neuron implementation forced by the
                                   environment variables above (set by peers.py); sj2-auto: set
                                   to auto, SpikingJelly's own choice
  sj014-cupy                       SpikingJelly 0.0.0.0.14, neurons with backend='cupy' in training
                                   mode: 0.0.0.0.14 runs its CuPy kernels only there (in eval mode
                                   its neurons run a TorchScript loop whatever the backend)
  ann                              the same network in plain PyTorch, ReLU for the neurons, no T loop
  ann-compile                      the same under torch.compile
  snnc                             a model.so through ctypes: a "cuda" session, snn_run_device on
                                   torch tensors' device pointers (no host copies)

Timing: torch.cuda.synchronize() before the start and after the end of what is timed, host clock
(perf_counter), warm-up first, median of repeats. Device figures come from torch.profiler (CUPTI
records every kernel of the process whichever API launched it: torch, Triton, CuPy and snnc's
graphs alike), over calls that are each followed by a synchronize, with nothing else running.
"""
from __future__ import annotations

import ctypes
import gzip
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

MLP_T, CONV_T = 8, 4
CONV_CH = 128
LIF_TAU = 2.0
LIF_INPUT_SCALE = 2.5  # x ~ U[0, 2.5): about a third of the neurons fire at every step


class NotRun(Exception):
    """A peer or configuration that cannot run here; the message says why."""


# ------------------------------------------------------------------------------------------------
# snnc's C ABI through ctypes (runtime/snn.h); no torch here, so the self-test can drive it with
# the CUDA emulator's device memory
# ------------------------------------------------------------------------------------------------

class SnnTensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("per_step", ctypes.c_int),
                ("rank", ctypes.c_int), ("dims", ctypes.c_int64 * 8), ("numel", ctypes.c_int64)]


class SnnStats(ctypes.Structure):
    # graph_launches is ABI 2; `reserved` keeps a longer struct of a later ABI inside this one
    _fields_ = [("runs", ctypes.c_int64), ("samples", ctypes.c_int64),
                ("kernel_launches", ctypes.c_int64), ("seconds", ctypes.c_double),
                ("last_seconds", ctypes.c_double), ("graph_launches", ctypes.c_int64),
                ("reserved", ctypes.c_ubyte * 256)]


class SnncModel:
    """A model.so: its model and the sessions opened on it."""

    def __init__(self, path: str):
        self.path = path
        self.lib = lib = ctypes.CDLL(os.path.abspath(path), mode=ctypes.RTLD_LOCAL)
        vp, i64 = ctypes.c_void_p, ctypes.c_int64
        sig = {
            "snn_abi_version": (ctypes.c_uint32, []),
            "snn_last_error": (ctypes.c_char_p, []),
            "snn_model_get": (vp, []),
            "snn_model_devices": (ctypes.c_char_p, [vp]),
            "snn_model_timesteps": (ctypes.c_int, [vp]),
            "snn_model_has_weights": (ctypes.c_int, [vp]),
            "snn_model_input": (ctypes.c_int, [vp, ctypes.c_int, ctypes.POINTER(SnnTensorInfo)]),
            "snn_model_output": (ctypes.c_int, [vp, ctypes.c_int, ctypes.POINTER(SnnTensorInfo)]),
            "snn_session_create": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                                  ctypes.POINTER(vp)]),
            "snn_session_destroy": (None, [vp]),
            "snn_session_load_weights_file": (ctypes.c_int, [vp, ctypes.c_char_p]),
            "snn_session_device": (ctypes.c_char_p, [vp]),
            "snn_session_stats": (ctypes.c_int, [vp, ctypes.POINTER(SnnStats)]),
            "snn_session_reset_stats": (ctypes.c_int, [vp]),
            "snn_run": (ctypes.c_int, [vp, i64, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(vp)]),
            "snn_run_device": (ctypes.c_int, [vp, i64, ctypes.c_int, ctypes.POINTER(vp),
                                              ctypes.POINTER(vp)]),
        }
        for name, (res, args) in sig.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                if name == "snn_run_device":  # a library older than ABI 2
                    continue
                raise
            f.restype, f.argtypes = res, args
        self.abi = lib.snn_abi_version()
        self.model = lib.snn_model_get()
        if not self.model:
            raise NotRun(f"{path}: {self.error()}")
        self.devices = lib.snn_model_devices(self.model).decode()
        self.has_weights = bool(lib.snn_model_has_weights(self.model))
        self.input, self.output = SnnTensorInfo(), SnnTensorInfo()
        self.check(lib.snn_model_input(self.model, 0, ctypes.byref(self.input)), "snn_model_input")
        self.check(lib.snn_model_output(self.model, 0, ctypes.byref(self.output)), "snn_model_output")

    def error(self) -> str:
        return (self.lib.snn_last_error() or b"").decode(errors="replace")

    def check(self, status: int, what: str):
        if status != 0:
            msg = self.error()  # the runtime's messages name the function already
            raise RuntimeError(f"{msg if msg.startswith(what.split('(')[0]) else what + ': ' + msg} "
                               f"(status {status})")

    def session(self, device: str, max_batch: int, weights: str | None = None) -> "SnncSession":
        return SnncSession(self, device, max_batch, weights)


class SnncSession:
    def __init__(self, m: SnncModel, device: str, max_batch: int, weights: str | None):
        self.m, self.lib = m, m.lib
        self.handle = ctypes.c_void_p()
        st = self.lib.snn_session_create(m.model, device.encode(), max_batch, 0, ctypes.byref(self.handle))
        if st != 0:
            raise NotRun(f"snn_session_create(\"{device}\"): {m.error()}")
        if weights:
            m.check(self.lib.snn_session_load_weights_file(self.handle, weights.encode()),
                    f"snn_session_load_weights_file({weights})")
        self.device = self.lib.snn_session_device(self.handle).decode()

    def run_device(self, first_sample: int, batch: int, x_ptr: int, y_ptr: int):
        ins = (ctypes.c_void_p * 1)(x_ptr)
        outs = (ctypes.c_void_p * 1)(y_ptr)
        self.m.check(self.lib.snn_run_device(self.handle, first_sample, batch, ins, outs), "snn_run_device")

    def run_host(self, first_sample: int, batch: int, x: np.ndarray, y: np.ndarray):
        assert x.dtype == np.float32 and y.dtype == np.float32 and x.flags.c_contiguous and y.flags.c_contiguous
        ins = (ctypes.c_void_p * 1)(x.ctypes.data)
        outs = (ctypes.c_void_p * 1)(y.ctypes.data)
        self.m.check(self.lib.snn_run(self.handle, first_sample, batch, ins, outs), "snn_run")

    def stats(self) -> dict:
        s = SnnStats()
        self.m.check(self.lib.snn_session_stats(self.handle, ctypes.byref(s)), "snn_session_stats")
        return {"runs": s.runs, "samples": s.samples, "kernel_launches": s.kernel_launches,
                "graph_launches": s.graph_launches if self.m.abi >= 2 else None, "seconds": s.seconds}

    def reset_stats(self):
        self.m.check(self.lib.snn_session_reset_stats(self.handle), "snn_session_reset_stats")

    def close(self):
        if self.handle:
            self.lib.snn_session_destroy(self.handle)
            self.handle = ctypes.c_void_p()


def launches_per_run(before: dict, after: dict) -> dict:
    runs = after["runs"] - before["runs"]
    if runs <= 0:
        return {}
    out = {"snnc_kernel_launches_per_run": (after["kernel_launches"] - before["kernel_launches"]) / runs}
    if after["graph_launches"] is not None:
        out["snnc_graph_launches_per_run"] = (after["graph_launches"] - before["graph_launches"]) / runs
    return out


# ------------------------------------------------------------------------------------------------
# torch helpers: timing, profiling, inputs
# ------------------------------------------------------------------------------------------------

def import_torch():
    try:
        import torch
    except ImportError as e:
        raise NotRun(f"torch is not importable: {e}")
    if not torch.cuda.is_available():
        raise NotRun("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def set_torch_defaults(torch, spec):
    torch.backends.cudnn.benchmark = True  # the peers' best set-up for fixed shapes
    tf32 = bool(spec.get("tf32"))  # off by default: snnc computes plain float32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_grad_enabled(False)


def wall_ms(torch, call, repeats: int, warmup: int) -> list[float]:
    """Host time of each call between two synchronizes, after `warmup` calls. call(i) gets the
    repeat's index (to rotate inputs)."""
    for i in range(warmup):
        call(i)
    torch.cuda.synchronize()
    ts = []
    for i in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call(i)
        torch.cuda.synchronize()
        ts.append(1e3 * (time.perf_counter() - t0))
    return ts


def summary(ts: list[float]) -> dict:
    s = sorted(ts)
    return {"median_ms": round(statistics.median(s), 5), "p10_ms": round(s[len(s) // 10], 5),
            "p90_ms": round(s[(9 * len(s)) // 10], 5), "runs": len(s)}


def device_profile(torch, call, calls: int) -> dict:
    """What the GPU did for each of `calls` calls (each followed by a synchronize, inside a
    record_function range): kernels per call (memcpy and memset counted apart), the sum of kernel
    durations per call, and the span per call: first start to last end of the device activities
    that began inside that call's range (the profiler puts GPU and CPU times on one clock), gaps
    between them included."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            with record_function(f"bench_call_{i}"):
                call(i)
                torch.cuda.synchronize()

    def what(e):  # kernel, memcpy, memset, or None (CPU events, range annotations on the GPU)
        if getattr(e, "device_type", None) != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
            return None
        kind = f"{getattr(e, 'activity_type', None) or ''} {e.name}".lower()
        if "annotation" in kind or e.name.startswith("bench_call_"):
            return None
        return "memcpy" if "memcpy" in kind else "memset" if "memset" in kind else "kernel"

    all_events = list(prof.events())
    evs = sorted(((what(e), e) for e in all_events if what(e)), key=lambda we: we[1].time_range.start)
    if not evs:
        return {"profile_error": "the profiler recorded no GPU activity"}
    kernels = [e for w, e in evs if w == "kernel"]
    names: dict[str, int] = {}
    for e in kernels:
        names[e.name] = names.get(e.name, 0) + 1
    res = {"profiled_calls": calls,
           "kernels_per_call": round(len(kernels) / calls, 3),
           "memcpy_per_call": round(sum(w == "memcpy" for w, _ in evs) / calls, 3),
           "memset_per_call": round(sum(w == "memset" for w, _ in evs) / calls, 3),
           "kernel_ms_per_call": round(sum(e.time_range.elapsed_us() for e in kernels) / calls / 1e3, 5),
           "kernel_names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:12])}
    ranges = sorted((e.time_range.start, e.time_range.end) for e in all_events
                    if e.name.startswith("bench_call_") and getattr(e, "device_type", None) == DeviceType.CPU)
    per_call: list[list] = [[] for _ in ranges]
    for _, e in evs:
        i = next((j for j, (a, b) in enumerate(ranges) if a <= e.time_range.start <= b + 20), None)  # us
        if i is None:
            per_call = []
            break
        per_call[i].append(e)
    if len(ranges) == calls and per_call and all(per_call):
        spans = [(max(e.time_range.end for e in c) - min(e.time_range.start for e in c)) / 1e3 for c in per_call]
        res["span_ms"] = round(statistics.median(spans), 5)
        res["span_ms_all"] = [round(x, 5) for x in spans]
    else:
        res["span_note"] = "device activities not matched to calls: no span"
    return res


def lif_input(torch, n: int, t: int, dtype):
    """[T, N] input currents, U[0, 2.5) from a CUDA generator seeded by (N, T): every process of a
    run (the same torch build and GPU) draws the same values. f16 inputs are the f32 draw rounded."""
    g = torch.Generator(device="cuda").manual_seed(1000003 * t + n)
    x = torch.rand(t, n, generator=g, device="cuda", dtype=torch.float32) * LIF_INPUT_SCALE
    return x.to(dtype)


def pack_spikes(torch, s):
    """np.packbits of (s != 0) over the flattened [T, N] spikes, computed on the GPU."""
    b = (s != 0).reshape(-1, 8).to(torch.uint8)
    w = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=s.device)
    return (b * w).sum(dim=1, dtype=torch.uint8).cpu().numpy()


# ------------------------------------------------------------------------------------------------
# the peers
# ------------------------------------------------------------------------------------------------

def sj_version(sj) -> str:
    try:
        import importlib.metadata as md
        return md.version("spikingjelly")
    except Exception:
        return str(getattr(sj, "__version__", "unknown"))


class SJ2:
    """SpikingJelly 2.x. Its neurons pick their CUDA implementation (cuda = the native extension,
    triton, torch) from SJ_*_CUDA_IMPLEMENTATION, read at import; peers.py sets them."""

    def __init__(self, torch, impl: str):
        self.torch = torch
        self.impl = impl
        try:
            import spikingjelly
            from spikingjelly.activation_based import functional, layer, neuron, surrogate
        except ImportError as e:
            raise NotRun(f"spikingjelly is not importable: {e}")
        self.version = sj_version(spikingjelly)
        if not self.version.startswith("2."):
            raise NotRun(f"spikingjelly {self.version} is not 2.x")
        self.functional, self.layer, self.neuron, self.surrogate = functional, layer, neuron, surrogate
        self.selection_log: list[str] = []
        try:  # SpikingJelly logs which implementation it selected (its logger is off by default)
            from spikingjelly.logger import logger
            logger.enable("spikingjelly")
            logger.add(lambda m: self.selection_log.append(str(m).strip()[:300]), level="INFO",
                       filter=lambda r: "implementation" in r["message"] or "unavailable" in r["message"])
        except Exception:
            pass
        want = impl.split("-", 1)[1]
        for var in ("SJ_LIF_CUDA_IMPLEMENTATION", "SJ_IF_CUDA_IMPLEMENTATION"):
            if os.environ.get(var) != want:
                raise NotRun(f"{var} is {os.environ.get(var)!r}, not {want!r} (peers.py sets it)")

    def info(self) -> dict:
        return {"spikingjelly": self.version, "selection_log": self.selection_log[-6:]}

    def lif(self):
        node = self.neuron.LIFNode(tau=LIF_TAU, step_mode="m").cuda().eval()

        def run(x):
            s = node(x)
            node.reset()
            return s
        return run

    def mlp(self, w):
        return sj_mlp(self, w)

    def conv(self, w):
        return sj_conv(self, w)


class SJ014:
    """SpikingJelly 0.0.0.0.14, the release with backend='cupy' (fused multi-step neuron kernels
    compiled by CuPy's NVRTC)."""

    def __init__(self, torch, impl: str):
        self.torch = torch
        # 0.0.0.0.14's auto_cuda/base.py compares dtypes with np.int, which numpy >= 1.24 removed
        # (spikingjelly issues #583 and #595; fixed after the release by comparing with int): put the
        # alias back, which is what that comparison meant
        if "int" not in np.__dict__:
            np.int = int
        try:
            import cupy  # noqa: F401
        except ImportError as e:
            raise NotRun(f"cupy is not importable: {e}")
        try:
            import spikingjelly
            from spikingjelly.activation_based import functional, layer, neuron, surrogate
        except ImportError as e:
            raise NotRun(f"spikingjelly is not importable: {e}")
        self.version = sj_version(spikingjelly)
        if not self.version.startswith("0.0.0.0."):
            raise NotRun(f"spikingjelly {self.version} has no backend='cupy' (0.0.0.0.x has)")
        self.functional, self.layer, self.neuron, self.surrogate = functional, layer, neuron, surrogate
        self.cupy_version = cupy.__version__

    def info(self) -> dict:
        return {"spikingjelly": self.version, "cupy": self.cupy_version,
                "note": "neurons in training mode (0.0.0.0.14 runs its CuPy kernels only there), "
                        "with gradients off; the rest of the network in eval mode"}

    def lif(self):
        node = self.neuron.LIFNode(tau=LIF_TAU, step_mode="m", backend="cupy").cuda()
        node.train()

        def run(x):
            s = node(x)
            node.reset()
            return s
        return run

    def mlp(self, w):
        return sj_mlp(self, w)

    def conv(self, w):
        return sj_conv(self, w)


def neurons_to_cupy_mode(peer, net):
    """Eval mode for the network (BatchNorm running statistics), training mode for 0.0.0.0.14's
    neurons so that they run their CuPy kernels."""
    net.eval()
    if isinstance(peer, SJ014):
        for m in net.modules():
            if isinstance(m, peer.neuron.BaseNode):
                m.train()
    return net


def sj_neuron(peer, kind: str):
    kw = {"backend": "cupy"} if isinstance(peer, SJ014) else {}
    if kind == "lif":
        return peer.neuron.LIFNode(tau=LIF_TAU, step_mode="m", **kw)
    return peer.neuron.IFNode(surrogate_function=peer.surrogate.ATan(), step_mode="m", **kw)


def sj_mlp(peer, w):
    """784-256-10, LIF(tau=2) x 2, T=8, direct encoding (as bench/cpu/peers.py's SJMLP)."""
    torch, L = peer.torch, peer.layer

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = L.Flatten(step_mode="m")
            self.fc1 = L.Linear(784, 256, bias=True, step_mode="m")
            self.sn1 = sj_neuron(peer, "lif")
            self.fc2 = L.Linear(256, 10, bias=True, step_mode="m")
            self.sn2 = sj_neuron(peer, "lif")

        def forward(self, img):
            x_seq = img.unsqueeze(0).repeat(MLP_T, 1, 1, 1, 1)
            return self.sn2(self.fc2(self.sn1(self.fc1(self.flatten(x_seq))))).mean(0)

    net = Net()
    net.load_state_dict(w, strict=False)
    net = neurons_to_cupy_mode(peer, net.cuda())

    def run(x):
        out = net(x)
        peer.functional.reset_net(net)
        return out
    return run


def sj_conv(peer, w):
    """SpikingJelly's Fashion-MNIST CSNN (conv_fashion_mnist example), 128 channels, IF, T=4 (as
    bench/cpu/peers.py's SJConv)."""
    torch, L, c = peer.torch, peer.layer, CONV_CH

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_fc = torch.nn.Sequential(
                L.Conv2d(1, c, kernel_size=3, padding=1, bias=False), L.BatchNorm2d(c),
                sj_neuron(peer, "if"), L.MaxPool2d(2, 2),
                L.Conv2d(c, c, kernel_size=3, padding=1, bias=False), L.BatchNorm2d(c),
                sj_neuron(peer, "if"), L.MaxPool2d(2, 2),
                L.Flatten(), L.Linear(c * 7 * 7, c * 4 * 4, bias=False), sj_neuron(peer, "if"),
                L.Linear(c * 4 * 4, 10, bias=False), sj_neuron(peer, "if"))
            peer.functional.set_step_mode(self, step_mode="m")

        def forward(self, x):
            return self.conv_fc(x.unsqueeze(0).repeat(CONV_T, 1, 1, 1, 1)).mean(0)

    net = Net()
    missing, unexpected = net.load_state_dict(w, strict=False)
    assert not unexpected, unexpected
    net = neurons_to_cupy_mode(peer, net.cuda())

    def run(x):
        out = net(x)
        peer.functional.reset_net(net)
        return out
    return run


class ANN:
    """The same networks in plain PyTorch: ReLU where the SNN has neurons, no time loop."""

    def __init__(self, torch, impl: str):
        self.torch = torch

    def info(self) -> dict:
        return {"note": "torch.nn layers, ReLU instead of neurons, one pass (no T), eval mode"}

    def lif(self):
        raise NotRun("no LIF layer in an ANN")

    def mlp(self, w):
        nn = self.torch.nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.relu, self.fc2 = nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)

            def forward(self, x):
                return self.fc2(self.relu(self.fc1(x.flatten(1))))

        net = Net()
        net.load_state_dict(w)
        return net.cuda().eval()

    def conv(self, w):
        nn, c = self.torch.nn, CONV_CH

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv_fc = nn.Sequential(  # indices as in SpikingJelly's conv_fc
                    nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                    nn.MaxPool2d(2), nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c * 7 * 7, c * 4 * 4, bias=False),
                    nn.ReLU(), nn.Linear(c * 4 * 4, 10, bias=False))

            def forward(self, x):
                return self.conv_fc(x)

        net = Net()
        missing, unexpected = net.load_state_dict(w, strict=False)
        assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
        return net.cuda().eval()


class Snnc:
    """snnc's model.so on a cuda session, run on device pointers (snn_run_device)."""

    def __init__(self, torch, impl: str, spec: dict):
        self.torch = torch
        self.spec = spec
        self.device = spec.get("snnc_device", "cuda")

    def info(self) -> dict:
        return {"device": self.device, "artifacts": self.spec.get("snnc_source")}

    def open(self, so: str, max_batch: int, weights: str | None = None) -> SnncSession:
        if not so or not Path(so).exists():
            raise NotRun(f"no model.so ({so})")
        m = SnncModel(so)
        if "cuda" not in m.devices.split(","):
            raise NotRun(f"{so} carries no CUDA code (devices: {m.devices})")
        if not hasattr(m.lib, "snn_run_device") or m.abi < 2:
            raise NotRun(f"{so} is ABI {m.abi}: no snn_run_device")
        return m.session(self.device, max_batch, weights)

    def lif_session(self, n: int, t: int):
        so = self.spec.get("lif_so", {}).get(f"{n}x{t}")
        if not so:
            raise NotRun(self.spec.get("lif_so_missing", {}).get(f"{n}x{t}", "no model.so for this (N, T)"))
        s = self.open(so, 1)
        info = s.m.input
        if info.numel != n * t:
            raise NotRun(f"{so}: input has {info.numel} floats per sample, expected T*N = {t * n}")
        return s


class ANNCompiled(ANN):
    """The same ANN under torch.compile (inductor, default mode; one compilation per batch shape,
    done in the warm-up, outside the timing)."""

    def info(self) -> dict:
        return {"note": "the ANN under torch.compile (inductor, default mode, dynamic=False)"}

    def mlp(self, w):
        return self.torch.compile(super().mlp(w), dynamic=False)

    def conv(self, w):
        return self.torch.compile(super().conv(w), dynamic=False)


PEERS = {"sj2-triton": SJ2, "sj2-torch": SJ2, "sj2-cuda": SJ2, "sj2-auto": SJ2, "sj014-cupy": SJ014,
         "ann": ANN, "ann-compile": ANNCompiled}


def make_peer(torch, spec):
    impl = spec["impl"]
    if impl == "snnc":
        return Snnc(torch, impl, spec)
    return PEERS[impl](torch, impl)


# ------------------------------------------------------------------------------------------------
# kinds of work
# ------------------------------------------------------------------------------------------------

def nvidia_smi(query: str) -> str | None:
    import subprocess
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def do_probe(spec) -> dict:
    """The device and the software, or why there is nothing to measure."""
    import importlib.metadata as md
    res = {"python": sys.version.split()[0], "executable": sys.executable}
    for pkg in ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "cupy", "triton", "safetensors",
                "spikingjelly", "nvidia-ml-py"):
        try:
            res[f"version_{pkg}"] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    try:
        import torch
    except ImportError as e:
        return {**res, "cuda": False, "why": f"torch is not importable: {e}"}
    res["torch_cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        return {**res, "cuda": False, "why": "torch.cuda.is_available() is False"}
    p = torch.cuda.get_device_properties(0)
    res.update({"cuda": True, "device_count": torch.cuda.device_count(), "name": p.name,
                "capability": f"{p.major}.{p.minor}", "sm": f"sm_{p.major}{p.minor}",
                "multiprocessors": p.multi_processor_count,
                "memory_gib": round(p.total_memory / 2**30, 1),
                "l2_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
                "cudnn": torch.backends.cudnn.version(),
                "driver": nvidia_smi("driver_version"),
                "clocks_now": nvidia_smi("clocks.sm,clocks.mem,temperature.gpu,power.draw,pstate")})
    try:
        import cupy
        res["cuda_driver_api_version"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:
        pass
    return res


def do_copy(spec) -> dict:
    """The bandwidth yardstick: a device-to-device copy of `bytes` (far larger than L2) through
    torch, timed with CUDA events; bytes moved = read + write."""
    torch = import_torch()
    nbytes = int(spec["bytes"])
    src = torch.rand(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ts = []
    for _ in range(spec.get("repeats", 20)):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ms = statistics.median(ts)
    return {"bytes": nbytes, "what": "torch dst.copy_(src), f32, CUDA events, median",
            "median_ms": round(ms, 5), "runs_ms": [round(t, 5) for t in ts],
            "GB_per_s": round(2 * nbytes / ms / 1e6, 1)}


def write_result(spec, res):
    tmp = Path(spec["result"] + ".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    tmp.replace(spec["result"])


def do_lif(spec) -> dict:
    """One multi-step LIF layer, forward, every configuration of spec["configs"]."""
    torch = import_torch()
    set_torch_defaults(torch, spec)
    peer = make_peer(torch, spec)
    out_dir = Path(spec["out_dir"])
    l2 = int(spec.get("l2_bytes") or 50 << 20)
    res = {"peer": peer.info(), "configs": []}
    for cfg in spec["configs"]:
        n, t, dt = cfg["N"], cfg["T"], cfg["dtype"]
        r = {"N": n, "T": t, "dtype": dt}
        res["configs"].append(r)
        print(f"  {spec['impl']} lif N={n} T={t} {dt} ...", flush=True)
        try:
            r.update(lif_config(torch, peer, spec, n, t, dt, l2, out_dir))
        except NotRun as e:
            r["not_run"] = str(e)
        except Exception as e:  # the message is the result; the log has the traceback
            r["not_run"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:400] if str(e).strip() else ''}"
            traceback.print_exc()
        try:  # after a device fault this raises too: the configurations left will say so
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:
            r.setdefault("after", f"{type(e).__name__}: {str(e)[:200]}")
        write_result(spec, {**res, "partial": True})
    return res


def lif_config(torch, peer, spec, n, t, dt, l2, out_dir) -> dict:
    if isinstance(peer, Snnc):
        if dt != "f32":
            raise NotRun("snnc's C ABI takes and returns float32 only (snn.h: SNN_F32)")
        sess = peer.lif_session(n, t)
        try:
            return lif_measure(torch, peer, spec, n, t, dt, l2, out_dir, sess)
        finally:
            sess.close()
    return lif_measure(torch, peer, spec, n, t, dt, l2, out_dir, None)


def lif_measure(torch, peer, spec, n, t, dt, l2, out_dir, sess) -> dict:
    dtype = {"f32": torch.float32, "f16": torch.float16}[dt]
    x0 = lif_input(torch, n, t, dtype)
    in_bytes = x0.numel() * x0.element_size()
    # rotate among K copies of the input so that no call finds its input in L2
    k = min(16, max(1, math.ceil(3 * l2 / in_bytes)))
    xs = [x0] + [x0.clone() for _ in range(k - 1)]
    r = {"input_checksum": float(x0.double().sum().item()), "input_copies": k}
    if sess is not None:
        ys = [torch.full((t, n), float("nan"), device="cuda") for _ in range(k)]  # poisoned
        # snnc runs on its own non-blocking stream: torch's work on these buffers must be done
        torch.cuda.synchronize()

        def run(i):
            sess.run_device(0, 1, xs[i % k].data_ptr(), ys[i % k].data_ptr())
            return ys[i % k]
        r["session_device"] = sess.device
    else:
        fn = peer.lif()

        def run(i):
            return fn(xs[i % k])
    s = run(0)
    torch.cuda.synchronize()
    if tuple(s.shape) != (t, n):
        raise RuntimeError(f"spikes of shape {tuple(s.shape)}, expected {(t, n)}")
    r["spike_dtype"] = str(s.dtype).replace("torch.", "")
    r["not_binary"] = int(((s != 0) & (s != 1)).sum().item())  # NaN (unwritten) counts here
    r["spike_rate"] = round(float(s.float().mean().item()), 6)
    spikes_path = out_dir / f"lif_n{n}_t{t}_{dt}_{spec['impl']}.npy"
    np.save(spikes_path, pack_spikes(torch, s))
    r["spikes_file"] = str(spikes_path)
    del s
    if sess is not None:
        before = sess.stats()
    wall = wall_ms(torch, run, spec["repeats"], spec["warmup"])
    r["wall"] = summary(wall)
    r["wall"]["all_ms"] = [round(x, 5) for x in wall]
    try:
        r["device"] = device_profile(torch, run, spec["profile_calls"])
    except Exception as e:
        r["device"] = {"profile_error": f"{type(e).__name__}: {e}"}
    if sess is not None:
        r.update(launches_per_run(before, sess.stats()))
    return r


def read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = int.from_bytes(raw[0:4], "big") & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_weights(torch, path: str) -> dict:
    from safetensors.numpy import load_file
    return {k: torch.from_numpy(v.astype(np.float32)) for k, v in load_file(path).items()}


def do_net(spec) -> dict:
    """A Fashion-MNIST network (spec["net"]: mlp or conv): outputs over the images, throughput at
    each batch size, batch-1 latency, kernels per forward."""
    torch = import_torch()
    set_torch_defaults(torch, spec)
    peer = make_peer(torch, spec)
    data = Path(spec["data_dir"])
    n_img = spec["images"]
    imgs = read_idx(data / "t10k-images-idx3-ubyte.gz")[:n_img]
    x_all = torch.from_numpy(imgs.copy()).unsqueeze(1).float().div(255).cuda()  # [N, 1, 28, 28]
    net, batches = spec["net"], spec["batches"]
    res = {"peer": peer.info(), "images": int(x_all.shape[0])}
    if isinstance(peer, Snnc):
        so = spec.get(f"{net}_so")
        weights = spec.get(f"{net}_weights_for_snnc")
        sess = peer.open(so, max(batches), weights)
        sess1 = peer.open(so, 1, weights)
        out = torch.full((max(batches), 10), float("nan"), device="cuda")
        torch.cuda.synchronize()  # snnc's stream does not wait for torch's (non-blocking)
        res["session_device"] = sess.device

        def run_on(s):
            def run(x):  # first_sample 0: it keys only the Poisson encoder, which these nets lack
                b = int(x.shape[0])
                s.run_device(0, b, x.data_ptr(), out.data_ptr())
                return out[:b]
            return run
        fwd, fwd1 = run_on(sess), run_on(sess1)
    else:
        w = load_weights(torch, spec["weights"])
        fwd = peer.mlp(w) if net == "mlp" else peer.conv(w)
        fwd1 = fwd

    def one_pass(b, keep=False):
        outs = []
        for i in range(0, n_img, b):
            y = fwd(x_all[i:i + b])
            if keep:
                outs.append(y.float().cpu().numpy().copy())
        return outs

    # outputs over every image at the first batch size (also that size's warm-up pass)
    print(f"  {spec['impl']} {net}: outputs ...", flush=True)
    rates = np.concatenate(one_pass(batches[0], keep=True))
    res["not_finite"] = int((~np.isfinite(rates)).sum())
    path = Path(spec["out_dir"]) / f"{net}_out_{spec['impl']}.npy"
    np.save(path, rates.astype(np.float32))
    res["outputs_file"] = str(path)
    res["mean_output"] = round(float(np.nanmean(rates)), 6)
    res["throughput"] = {}
    for bi, b in enumerate(batches):
        print(f"  {spec['impl']} {net}: throughput b{b} ...", flush=True)
        if bi > 0:
            one_pass(b)  # warm-up pass at this size
        ts = []
        for _ in range(spec["repeats"]):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            one_pass(b)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        res["throughput"][str(b)] = {"batch": b, "pass_s": [round(x, 5) for x in ts],
                                     "median_pass_s": round(med, 5),
                                     "images_per_s": round(n_img / med, 1)}
    print(f"  {spec['impl']} {net}: latency ...", flush=True)
    lat = wall_ms(torch, lambda i: fwd1(x_all[i % n_img:i % n_img + 1]), spec["latency_runs"],
                  spec["latency_warmup"])
    res["latency_b1"] = summary(lat)
    res["kernels"] = {}
    for b, f in ((1, fwd1), (batches[0], fwd)):
        print(f"  {spec['impl']} {net}: profile b{b} ...", flush=True)
        entry = {}
        if isinstance(peer, Snnc):
            s_ = sess1 if b == 1 else sess
            before = s_.stats()
        try:
            def call(i, f=f, b=b):
                first = (i * b) % max(1, n_img - b + 1)
                return f(x_all[first:first + b])
            entry.update(device_profile(torch, call, spec["profile_calls"]))
        except Exception as e:
            entry["profile_error"] = f"{type(e).__name__}: {e}"
        if isinstance(peer, Snnc):
            entry.update(launches_per_run(before, s_.stats()))
        res["kernels"][str(b)] = entry
    if isinstance(peer, Snnc):
        sess.close()
        sess1.close()
    return res


KINDS = {"probe": do_probe, "copy": do_copy, "lif": do_lif, "net": do_net}


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    res = {"kind": spec["kind"], "impl": spec.get("impl"), "pid": os.getpid()}
    t0 = time.time()
    try:
        res.update(KINDS[spec["kind"]](spec))
    except NotRun as e:
        res["not_run"] = str(e)
    except Exception as e:
        res["not_run"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()[-3000:]
        traceback.print_exc()
    res["elapsed_s"] = round(time.time() - t0, 2)
    res.pop("partial", None)
    write_result(spec, res)


if __name__ == "__main__":
    main()
