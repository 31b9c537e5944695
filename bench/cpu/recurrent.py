#!/usr/bin/env python3
"""A recurrent SNN on the CPU: snnc's model.so against SpikingJelly and snnTorch, same weights,
same inputs, same threads, outputs compared.

    python3 bench/cpu/recurrent.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                   [--threads 2] [--repeats 7] [--rounds 3]

The network is bench/cpu/models/recurrent.snn: x [T=16, 40] -> h = LIF(dense(x, 128) +
dense(h at t-1, 128, no bias), tau 4, hard reset to 0, threshold 1) -> LI(dense(h, 10), tau 8),
output the largest membrane over T. Weights: torch's default Linear init (seed 0), the input
matrix scaled by 5 (the hidden layer fires at 11% of neuron-steps); inputs: 1,024 samples of torch.rand * 1.5 (seed 1). The peers run what a user
of each framework writes for a recurrence: the input layer over all T at once, then a Python loop
over T of the recurrent Linear and the neuron in single-step mode (SpikingJelly
neuron.LIFNode(tau=4, decay_input=True, v_reset=0), snnTorch snn.Leaky(beta=0.75,
reset_mechanism='zero') on the current scaled by 1/tau), then the readout layer over all T and the
leaky integrator as torch operations. Timed: passes over the 1,024 samples at batch 64 (median),
and batch-1 latency (median of 200 runs); torch.set_num_threads(threads), torch.no_grad().
snnc: snnc_bench on a model.so built with the weights, with `threads` threads. Rounds alternate
the three (the machine's speed drifts). Outputs: the largest difference from snnc's logits and the
share of samples whose predicted class (argmax) is the same. Writes bench/cpu/recurrent.json."""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODEL = HERE / "models" / "recurrent.snn"
T, NIN, NH, NOUT, N = 16, 40, 128, 10, 1024


def sh(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"recurrent: {' '.join(map(str, cmd))} failed:\n{p.stderr}")
    return p.stdout


def weights():
    torch.manual_seed(0)
    fc_in, fc_rec, fc_out = (torch.nn.Linear(NIN, NH), torch.nn.Linear(NH, NH, bias=False),
                             torch.nn.Linear(NH, NOUT))
    with torch.no_grad():
        fc_in.weight.mul_(5.0)  # so that the hidden layer fires (11% of neuron-steps)
    return fc_in.eval(), fc_rec.eval(), fc_out.eval()


def readout(fc_out, spikes):  # spikes [T, B, NH] -> max over T of LI(tau 8) membrane [B, NOUT]
    y = fc_out(spikes)
    v = torch.zeros_like(y[0])
    best = None
    for t in range(T):
        v = v + (y[t] - v) / 8.0
        best = v.clone() if best is None else torch.maximum(best, v)
    return best


def sj_net(fc_in, fc_rec, fc_out):
    from spikingjelly.activation_based import neuron
    lif = neuron.LIFNode(tau=4.0, decay_input=True, v_threshold=1.0, v_reset=0.0,
                         step_mode="s").eval()

    def run(x):  # x [B, T, NIN]
        a = fc_in(x.transpose(0, 1))  # [T, B, NH]
        h = torch.zeros(x.shape[0], NH)
        rec = []
        for t in range(T):
            h = lif(a[t] + fc_rec(h))
            rec.append(h)
        lif.reset()
        return readout(fc_out, torch.stack(rec))
    return run


def st_net(fc_in, fc_rec, fc_out):
    import snntorch as snn
    leaky = snn.Leaky(beta=0.75, threshold=1.0, reset_mechanism="zero", reset_delay=False).eval()

    def run(x):
        a = fc_in(x.transpose(0, 1))
        h = torch.zeros(x.shape[0], NH)
        mem = leaky.init_leaky()
        rec = []
        for t in range(T):
            h, mem = leaky(0.25 * (a[t] + fc_rec(h)), mem)
            rec.append(h)
        return readout(fc_out, torch.stack(rec))
    return run


def time_torch(fn, x, batch, repeats, lat_runs):
    with torch.no_grad():
        fn(x[:batch])
        passes = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for b0 in range(0, N, batch):
                fn(x[b0:b0 + batch])
            passes.append(time.perf_counter() - t0)
        lat = []
        for i in range(-5, lat_runs):
            xi = x[abs(i) % N:abs(i) % N + 1]
            t0 = time.perf_counter()
            fn(xi)
            if i >= 0:
                lat.append(time.perf_counter() - t0)
        out = torch.cat([fn(x[b0:b0 + batch]) for b0 in range(0, N, batch)]).numpy()
    return statistics.median(passes), statistics.median(lat), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel" / "bench" / "snnc_bench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    work = Path(tempfile.mkdtemp(prefix="snnc-recurrent-"))
    fc_in, fc_rec, fc_out = weights()
    from safetensors.torch import save_file
    wfile = work / "recurrent.safetensors"
    save_file({"h.dense.weight": fc_in.weight.detach().contiguous(),
               "h.dense.bias": fc_in.bias.detach().contiguous(),
               "h.dense.1.weight": fc_rec.weight.detach().contiguous(),
               "out.dense.weight": fc_out.weight.detach().contiguous(),
               "out.dense.bias": fc_out.bias.detach().contiguous()}, str(wfile))
    g = torch.Generator().manual_seed(1)
    x = torch.rand(N, T, NIN, generator=g) * 1.5
    xfile = work / "x.npy"
    np.save(xfile, x.numpy())
    so = work / "recurrent.so"
    t0 = time.perf_counter()
    sh([a.snnc, MODEL, "-o", so, "--cuda-arch=none", f"--weights={wfile}"])
    build_s = time.perf_counter() - t0
    run = json.loads(sh([a.snnc, "--run", "-q", "--report=json", MODEL, f"--weights={wfile}",
                         f"--input={xfile}"]).strip().splitlines()[-1])
    peers = {"spikingjelly": sj_net(fc_in, fc_rec, fc_out), "snntorch": st_net(fc_in, fc_rec, fc_out)}
    runs = {k: [] for k in ["snnc"] + list(peers)}
    outs = {}
    for r in range(a.rounds):
        out = work / "snnc.npy"
        rep = json.loads(sh([a.bench, so, f"--input={xfile}", f"--batch={a.batch}",
                             f"--threads={a.threads}", f"--repeats={a.repeats}",
                             "--latency-runs=200", f"--output={out}"]).strip().splitlines()[-1])
        runs["snnc"].append((rep["median_pass_s"], rep["latency_b1_ms"] / 1e3))
        outs["snnc"] = np.load(out)
        for k, fn in peers.items():
            print(f"  round {r + 1}/{a.rounds}: {k} ...", flush=True)
            p, l, o = time_torch(fn, x, a.batch, a.repeats, 200)
            runs[k].append((p, l))
            outs[k] = o
    ref = outs["snnc"]
    res = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
           "threads": a.threads, "batch": a.batch, "samples": N, "T": T,
           "torch": torch.__version__, "model": str(MODEL.relative_to(ROOT)),
           "snnc_build_s": round(build_s, 3), "hidden_firing_rate": run["firing_rates"]["h"],
           "rows": {}}
    for k, rs in runs.items():
        pass_s = statistics.median(p for p, _ in rs)
        lat_s = statistics.median(l for _, l in rs)
        o = outs[k]
        res["rows"][k] = {
            "pass_ms": round(1e3 * pass_s, 3), "samples_per_s": round(N / pass_s, 1),
            "latency_b1_ms": round(1e3 * lat_s, 4),
            "rounds": [[round(1e3 * p, 3), round(1e3 * l, 4)] for p, l in rs],
            "max_abs_diff_vs_snnc": float(np.max(np.abs(o - ref))),
            "argmax_agreement_vs_snnc": float(np.mean(o.argmax(1) == ref.argmax(1)))}
    base = res["rows"]["snnc"]
    for k in peers:
        row = res["rows"][k]
        row["snnc_speedup"] = round(row["pass_ms"] / base["pass_ms"], 2)
        row["snnc_latency_speedup"] = round(row["latency_b1_ms"] / base["latency_b1_ms"], 2)
    (HERE / "recurrent.json").write_text(json.dumps(res, indent=1) + "\n")
    for k, row in res["rows"].items():
        print(f"{k:13s} {row['pass_ms']:9.3f} ms/pass {row['samples_per_s']:10.1f} samples/s  "
              f"b1 {row['latency_b1_ms']:8.4f} ms  max|diff| {row['max_abs_diff_vs_snnc']:.3g}  "
              f"argmax {row['argmax_agreement_vs_snnc']:.4f}")


if __name__ == "__main__":
    main()
