#!/usr/bin/env python3
"""The strongest CPU peer: each benchmark network written by hand in PyTorch, eager and under
torch.compile, against snnc's model.so in the same run.

    python3 bench/cpu/handwritten.py [--quick] [--only mlp,conv,lif] [--no-compile]
                                     [--no-jax | --jax-only] [--json bench/cpu/handwritten.json]

What "by hand" means (shared/reference/benchmarks.md): no framework, the layers that see the same
input at every step (the direct-encoded image's first layer, with its batchnorm) computed once,
the time loop in tensor ops, every later layer batched over all T steps at once (one GEMM or conv
over T*B rows, as snnc's time-batch pass does), torch.inference_mode, 2 threads. The networks and
neurons are the suite's (bench/cpu/peers.py): the Fashion-MNIST MLP (784-256-10, LIF tau=2 with
SpikingJelly's decay_input update v + (x - v)/tau and hard reset to 0, T=8, its trained weights),
the conv SNN (SpikingJelly's conv_fashion_mnist CSNN, IF, T=4, the example's trained weights) and one LIF
layer (2^20 neurons, T=8). torch.compile: the default inductor backend, compiled by a first call
that is reported and not timed.

The same three networks are also written by hand in JAX (bench/cpu/jax_peer.py: the same maths
and order, the time loop as jax.lax.scan, the whole forward under jax.jit, XLA held to 2 CPUs),
run in a subprocess so torch's and XLA's thread pools never share a process, on the same inputs
and weights, timed the same way; its row is "JAX jit + lax.scan". Without jax installed the row
is skipped with a message; --no-jax skips it, --jax-only runs it alone (no PyTorch by-hand or
snnc rows; its outputs are still compared with SpikingJelly's).

Outputs are compared in the same run with SpikingJelly's (written by peers.py to bench/cpu/out/;
run it first) and with snnc's model.so (built here with build-rel/driver/snnc, timed by
build-rel/bench/snnc_bench like the peers: a warm-up pass, then the median of passes, and batch-1
latency as the median of single-image runs). Prints a table and writes the JSON (machine,
versions, commands, every figure with its repeats)."""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hostlimits  # noqa: E402
import jax_peer  # noqa: E402  (the JAX peer; imports no jax here, it runs in a subprocess)
import peers  # noqa: E402  (the suite's set-up: malloc settings, threads, data, helpers)
from peers import (CONV_T, LIF_T, MLP_T, OUT, ROOT, SNNC, SNNC_BENCH, argmax_first,  # noqa: E402
                   latency, load_avg, median_ms, outputs, throughput)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


# ---- the networks, by hand ----------------------------------------------------------------------

def lif_step(v, x):
    """SpikingJelly LIFNode(tau=2), decay_input, hard reset to 0: its operation order."""
    h = v + (x - v) / 2.0
    s = (h >= 1.0).to(h.dtype)
    return h * (1.0 - s), s


def if_step(v, x):
    """IFNode(v_th=1), hard reset to 0."""
    h = v + x
    s = (h >= 1.0).to(h.dtype)
    return h * (1.0 - s), s


def scan(step, x, T=None):
    """A neuron layer over time from v = 0: x [T, ...] step by step, or, with T given, the same x
    at every step (a static input). Returns the spikes stacked [T, ...]."""
    v = torch.zeros_like(x if T is not None else x[0])
    out = []
    for t in range(T if T is not None else x.shape[0]):
        v, s = step(v, x if T is not None else x[t])
        out.append(s)
    return torch.stack(out)


class MLP:
    def __init__(self):
        w = {k: torch.from_numpy(v.astype(np.float32))
             for k, v in load_file(str(ROOT / "examples" / "fmnist_mlp.safetensors")).items()}
        self.w1, self.b1 = w["fc1.weight"], w["fc1.bias"]
        self.w2, self.b2 = w["fc2.weight"], w["fc2.bias"]

    def __call__(self, img):  # [B, 1, 28, 28] -> rate [B, 10]
        c1 = F.linear(img.flatten(1), self.w1, self.b1)  # the same at every step: once
        # [T, B, 10]: one GEMM over T*B rows
        c2 = F.linear(scan(lif_step, c1, MLP_T), self.w2, self.b2)
        return scan(lif_step, c2).sum(0) / MLP_T


class Conv:
    def __init__(self):
        w = {k: torch.from_numpy(v) for k, v in peers.conv_weights()[0].items()}
        self.w = w

    def _bn(self, x, i):
        w = self.w
        return F.batch_norm(x, w[f"conv_fc.{i}.running_mean"], w[f"conv_fc.{i}.running_var"],
                            w[f"conv_fc.{i}.weight"], w[f"conv_fc.{i}.bias"], False, 0.0, 1e-5)

    def __call__(self, img):  # [B, 1, 28, 28] -> rate [B, 10]
        w, T, B = self.w, CONV_T, img.shape[0]
        x1 = self._bn(F.conv2d(img, w["conv_fc.0.weight"], padding=1), 1)  # once
        p1 = F.max_pool2d(scan(if_step, x1, T).flatten(0, 1), 2)  # [T*B, 128, 14, 14]
        x2 = self._bn(F.conv2d(p1, w["conv_fc.4.weight"], padding=1), 5).view(T, B, -1, 14, 14)
        p2 = F.max_pool2d(scan(if_step, x2).flatten(0, 1), 2).flatten(1)  # [T*B, 6272]
        x3 = F.linear(p2, w["conv_fc.9.weight"]).view(T, B, -1)
        x4 = F.linear(scan(if_step, x3).flatten(0, 1), w["conv_fc.11.weight"]).view(T, B, -1)
        return scan(if_step, x4).sum(0) / T


def lif_layer(x):  # [T, N] -> spikes [T, N]
    return scan(lif_step, x)


# ---- snnc's model.so in the same run ------------------------------------------------------------

def snnc_so(model: Path, build_flags: list[str], bench_flags: list[str], work: Path, name: str,
            commands: list[str]) -> dict | None:
    if not SNNC.exists() or not SNNC_BENCH.exists():
        return None
    so = work / f"{name}.so"
    build = [str(SNNC), str(model), "-o", str(so), "--cuda-arch=none", "-q"] + build_flags
    bench = [str(SNNC_BENCH), str(so), "--threads=2", f"--output={work / name}.npy"] + bench_flags
    commands += [" ".join(build), " ".join(bench)]
    subprocess.run(build, check=True)
    r = json.loads(subprocess.run(bench, check=True, capture_output=True, text=True).stdout)
    r["output"] = np.load(work / f"{name}.npy")
    return r


def agree(a, b) -> float | None:
    if a is None or b is None:
        return None
    n = min(len(a), len(b))
    return round(float((np.asarray(a[:n]) == np.asarray(b[:n])).mean()), 6)


def saved(name: str):
    p = OUT / name
    return np.load(p) if p.exists() else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer images and repeats")
    ap.add_argument("--only", default="mlp,conv,lif")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--no-jax", action="store_true", help="skip the JAX peer")
    ap.add_argument("--jax-only", action="store_true",
                    help="only the JAX peer (no PyTorch by-hand rows, no snnc)")
    ap.add_argument("--json", type=Path, default=HERE / "handwritten.json")
    a = ap.parse_args()
    if a.no_jax and a.jax_only:
        ap.error("--no-jax and --jax-only exclude each other")
    torch.set_num_threads(peers.THREADS)
    jax_missing = None if a.no_jax else jax_peer.missing()
    if jax_missing:
        print(f"JAX row skipped: {jax_missing}", flush=True)
    use_jax = not a.no_jax and not jax_missing
    only = set(a.only.split(","))
    repeats = 2 if a.quick else 5
    xte, labels = peers.test_set()
    work = Path(tempfile.mkdtemp(prefix="snnc-handwritten-"))
    commands: list[str] = [" ".join([sys.executable] + sys.argv)]
    res = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": peers.machine(), "threads": peers.THREADS,
           "versions": {"torch": torch.__version__, "numpy": np.__version__},
           "load_avg_start": load_avg(), "commands": commands,
           "jax": ("skipped: --no-jax" if a.no_jax else f"skipped: {jax_missing}" if jax_missing
                   else "bench/cpu/jax_peer.py in a subprocess, threads limited as its docstring says"),
           "host_limits": hostlimits.measure(peers.THREADS, quick=a.quick)}
    rows = []

    def variants(fn):
        if a.jax_only:
            return
        yield "eager", fn, 0.0
        if not a.no_compile:
            yield "compiled", torch.compile(fn), None

    def jax_row(key, args, extra) -> dict | None:
        """the JAX peer on `key` in a subprocess (bench/cpu/jax_peer.py); None when not run"""
        if not use_jax:
            return None
        r = jax_peer.run(key, args + [f"--threads={peers.THREADS}"], work, commands)
        if "error" in r:
            print(f"JAX row failed ({key}): {r['error']}", flush=True)
            res[key]["jax"] = r
            return None
        res["versions"].update(r.pop("versions"))
        res[key]["jax"] = r
        out = r.pop("output")
        extra(r, out)
        return r

    with torch.inference_mode():
        def image_net(key, title, net, model, weights, n, batch, lat_runs, lat_warmup, so_flags):
            """the hand-written net eager and compiled, then snnc's model.so with exact and f32
            sums, on the first n test images at `batch`; batch-1 latency; outputs against
            SpikingJelly's (peers.py) and predictions against the labels"""
            x = xte[:n]
            sj = saved(f"{key}_rate_spikingjelly.npy")
            out = res[key] = {}
            eager_rates = None
            for kind, fn, _ in variants(net):
                t0 = time.perf_counter()
                rates = outputs(fn, x, batch)  # the first call compiles
                first_s = time.perf_counter() - t0
                if kind == "eager":
                    eager_rates = rates
                tp = throughput(fn, x, batch, repeats, warmup=False)
                lat = latency(fn, xte, lat_runs, lat_warmup)
                out[kind] = {f"throughput_b{batch}": tp, "latency_b1": lat,
                             "first_pass_s": round(first_s, 2),
                             "accuracy": round(float((argmax_first(rates) == labels[:n]).mean()), 4),
                             "rates_equal_spikingjelly": agree(rates, sj[:n] if sj is not None else None)}
                rows.append((title, f"by hand, {kind}", tp["images_per_s"], lat["median_ms"],
                             out[kind]["rates_equal_spikingjelly"]))
            for acc in (() if a.jax_only else ("exact", "f32")):
                so = snnc_so(model, so_flags + [f"--accumulate={acc}"],
                             [f"--batch={batch}", f"--limit={n}", f"--repeats={repeats}",
                              f"--latency-runs={lat_runs}"] + fmnist_flags(key), work,
                             f"{key}-{acc}", commands)
                if not so:
                    continue
                r = {k: v for k, v in so.items() if k != "output"}
                r["accuracy"] = round(float((argmax_first(so["output"]) == labels[:n]).mean()), 4)
                r["rates_equal_spikingjelly"] = agree(so["output"], sj[:n] if sj is not None else None)
                out[f"snnc_so_{acc}"] = r
                rows.append((title, f"snnc model.so, {acc} sums", so["images_per_s"],
                             so.get("latency_b1_ms"), r["rates_equal_spikingjelly"]))

            def jax_figures(r, rates):
                r["accuracy"] = round(float((argmax_first(rates) == labels[:n]).mean()), 4)
                r["rates_equal_spikingjelly"] = agree(rates, sj[:n] if sj is not None else None)
                r["rates_equal_by_hand_eager"] = agree(rates, eager_rates)
                rows.append((title, jax_peer.TITLE, r[f"throughput_b{batch}"]["images_per_s"],
                             r["latency_b1"]["median_ms"], r["rates_equal_spikingjelly"]))

            if use_jax:
                np.save(work / f"{key}-images.npy", x.numpy())
                jax_row(key, [f"--input={work / f'{key}-images.npy'}", f"--weights={weights}",
                              f"--batch={batch}", f"--repeats={repeats}", f"--latency-runs={lat_runs}",
                              f"--latency-warmup={lat_warmup}"], jax_figures)

        def fmnist_flags(key):
            return ["--fmnist"]

        if "mlp" in only:
            image_net("mlp", "MLP T=8", MLP(), ROOT / "examples/fmnist_mlp.snn",
                      ROOT / "examples" / "fmnist_mlp.safetensors", 2048 if a.quick else 10000,
                      256, 50 if a.quick else 200, 10, [])
        if "conv" in only:
            image_net("conv", "conv T=4", Conv(), ROOT / "examples/fmnist_conv.snn",
                      peers.conv_weights()[1], 256 if a.quick else 2048, 64, 16 if a.quick else 200, 10,
                      [])  # weights embedded: the example's own file, as a user builds it
            # (200 batch-1 runs after 10 warm-ups, as the MLP: with 32 after 3, snnc's median
            # moved 0.68-0.87 ms between runs of the same build)
        if "lif" in only:
            x = peers.lif_input()
            copy_gbs = res["host_limits"]["copy_gbs_n"]
            nbytes = 2 * 4 * LIF_T * peers.LIF_N
            sj = saved("lif_spikes_packed_spikingjelly.npy")
            out = res["lif"] = {}
            eager_packed = None
            for kind, fn, _ in variants(lif_layer):
                t0 = time.perf_counter()
                s = fn(x)
                first_s = time.perf_counter() - t0
                ms, runs = median_ms(lambda: fn(x), 4 if a.quick else 11)
                packed = np.packbits(s.numpy().astype(bool), axis=-1)
                if kind == "eager":
                    eager_packed = packed
                out[kind] = {"median_ms": round(ms, 3), "runs_ms": runs, "first_call_s": round(first_s, 2),
                             "GB_per_s": round(nbytes / ms / 1e6, 2),
                             "pct_of_copy_bandwidth": hostlimits.pct(nbytes / ms / 1e6, copy_gbs),
                             "spikes_equal_spikingjelly": agree(packed, sj)}
                rows.append(("LIF 2^20 T=8", f"by hand, {kind}", f"{nbytes / ms / 1e6:.2f} GB/s",
                             round(ms, 3), out[kind]["spikes_equal_spikingjelly"]))
            lif_x = work / "lif-input.npy"  # not lif.npy: snnc_so writes its output there
            np.save(lif_x, x.numpy()[None])
            so = None if a.jax_only else snnc_so(
                ROOT / "examples/lif_layer.snn", [],
                [f"--input={lif_x}", "--batch=1", f"--repeats={4 if a.quick else 11}"], work, "lif", commands)
            if so:
                ms = 1e3 * so["median_pass_s"] if "median_pass_s" in so else None
                out["snnc_so"] = {k: v for k, v in so.items() if k != "output"}
                if ms:
                    out["snnc_so"]["GB_per_s"] = round(nbytes / ms / 1e6, 2)
                    out["snnc_so"]["pct_of_copy_bandwidth"] = hostlimits.pct(nbytes / ms / 1e6, copy_gbs)
                    packed = np.packbits(so["output"][0].astype(bool), axis=-1)  # [T, N/8]
                    out["snnc_so"]["spikes_equal_spikingjelly"] = agree(packed, sj)
                    rows.append(("LIF 2^20 T=8", "snnc model.so", f"{nbytes / ms / 1e6:.2f} GB/s",
                                 round(ms, 3), out["snnc_so"]["spikes_equal_spikingjelly"]))

            def lif_jax_figures(r, packed):
                ms = r["median_ms"]
                r.update(GB_per_s=round(nbytes / ms / 1e6, 2),
                         pct_of_copy_bandwidth=hostlimits.pct(nbytes / ms / 1e6, copy_gbs),
                         spikes_equal_spikingjelly=agree(packed, sj),
                         spikes_equal_by_hand_eager=agree(packed, eager_packed))
                rows.append(("LIF 2^20 T=8", jax_peer.TITLE, f"{nbytes / ms / 1e6:.2f} GB/s",
                             round(ms, 3), r["spikes_equal_spikingjelly"]))

            jax_row("lif", [f"--input={lif_x}", f"--repeats={4 if a.quick else 11}"], lif_jax_figures)
    res["load_avg_end"] = load_avg()
    a.json.write_text(json.dumps(res, indent=1) + "\n")
    print(f"{'workload':13s} | {'implementation':22s} | {'throughput':>16s} | {'b1 / pass ms':>12s} | same as SJ")
    for w, impl, tp, ms, ag in rows:
        tps = tp if isinstance(tp, str) else f"{tp:,.1f} img/s"
        print(f"{w:13s} | {impl:22s} | {tps:>16s} | {ms if ms is not None else '-':>12} | {ag}")
    h = res["host_limits"]
    print(f"host: FMA peak f32 {h['peak_f32_gflops']} / f64 {h['peak_f64_gflops']} GFLOP/s, "
          f"copy {h['copy_gbs_n']} GB/s at {peers.THREADS} threads ({', '.join(h['features'])})")
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
