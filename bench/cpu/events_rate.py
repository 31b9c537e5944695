#!/usr/bin/env python3
"""Dense vs event-driven accumulation against the input firing rate, on the CPU: where is the
crossover?

    python3 bench/cpu/events_rate.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                     [--rates 0.05,0.2,0.4,0.6,0.8,0.95] [--rounds 3] [--threads 2]
                                     [--workloads dense,dense-bits,conv,conv-bits,f3,c2]

The events pass marks every spike-fed dense and conv layer event-driven (a list of the inputs that
spiked per row, only their weight rows added); `--disable-pass=events` runs the same layers as
dense kernels (register tiles over every input, zero products skipped). The pass's rule is static
because event-driven won at every rate the benchmark networks reach; this sweeps the rate up to
95% to find where, if anywhere, dense wins. Two workloads, each one spike-fed layer whose
input rate is set exactly (inputs declared `spike`, Bernoulli at the rate, numpy seeded):
  dense: T = 25, 784 -> dense 256 -> LIF (2,048 samples, batch 256)
  conv:  T = 4, [64, 14, 14] -> conv 64 3x3 pad 1 -> LIF (512 samples, batch 64)
and dense-bits and conv-bits, the same layers reading a neuron's spikes instead of an input: x (0/1
floats) -> IF -> the layer -> LIF, the IF firing exactly where x is 1 (v += 1 reaches its
threshold 1, then resets), so the layer's input rate is x's; pack-spikes stores those spikes as
bits, which the event lists scan 64 at a time, where an input's floats are compared one by one.
and f3 and c2, the conv example's two big spike-fed layers with their real input rates (from
tests/parity/fmnist_conv/rates.json, the trained network's) added to the sweep:
  f3: T = 4, 6272 -> dense 2048 (the flattened pooled spikes of c2 -> f3)
  c2: T = 4, [128, 14, 14] -> conv 128 3x3 pad 1 (the pooled spikes of c1 -> c2)
each with exact sums (--accumulate=exact: double) and with float ones (--accumulate=f32, the
default since 2026-11-26: float tiles, twice the lanes). Each row also gives the layer's figures against the host's FMA peak (measured in the same
run by machine_peak, for the sums' precision): the dense build's GFLOP/s of the dense work, and the
event build's GFLOP/s of the work of the spikes that occurred (2 FLOPs per spike and output). The LIF scan after the layer is the same in both builds. A third build per rate,
`--events=auto` calibrated on the rate's inputs (64 samples), shows what the choice picks. Every
configuration is a model.so timed by snnc_bench (median of 3 passes); the events and dense builds
(and auto) run in alternation, --rounds times, and the table gives the median of the rounds. Outputs of the
two builds are compared bit for bit (they sum the same terms in another order, in double; in
float the orders differ, so equality is reported, not required). Writes
bench/cpu/events_rate.json."""
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostlimits  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

MODELS = {
    "dense": ("""model dense_rate {
  timesteps 25
  seed 7
  input x : spike[T, 784]
  s = LIF(dense(x, 256), tau = 2.0)
  output c = mean(s)
}
""", (25, 784), 2048, 256),
    "dense-bits": ("""model dense_bits_rate {
  timesteps 25
  seed 7
  input x : f32[T, 784]
  q = IF(x)
  s = LIF(dense(q, 256), tau = 2.0)
  output c = mean(s)
}
""", (25, 784), 2048, 256),
    "conv": ("""model conv_rate {
  timesteps 4
  seed 7
  input x : spike[T, 64, 14, 14]
  s = LIF(conv2d(x, 64, kernel = 3, pad = 1), tau = 2.0)
  output c = mean(s)
}
""", (4, 64, 14, 14), 512, 64),
    "conv-bits": ("""model conv_bits_rate {
  timesteps 4
  seed 7
  input x : f32[T, 64, 14, 14]
  q = IF(x)
  s = LIF(conv2d(q, 64, kernel = 3, pad = 1), tau = 2.0)
  output c = mean(s)
}
""", (4, 64, 14, 14), 512, 64),
    # the conv example's two big spike-fed layers (examples/fmnist_conv.snn), their inputs' real
    # rates (tests/parity/fmnist_conv/rates.json: the pooled spikes p2 feeding f3, p1 feeding c2)
    # always among the rates swept
    "f3": ("""model f3_rate {
  timesteps 4
  seed 7
  input x : f32[T, 6272]
  q = IF(x)
  s = IF(dense(q, 2048, bias = false))
  output c = mean(s)
}
""", (4, 6272), 512, 64),
    "c2": ("""model c2_rate {
  timesteps 4
  seed 7
  input x : f32[T, 128, 14, 14]
  q = IF(x)
  s = IF(conv2d(q, 128, kernel = 3, pad = 1, bias = false))
  output c = mean(s)
}
""", (4, 128, 14, 14), 256, 64),
}
REAL_RATE = {"f3": "p2", "c2": "p1"}  # the value of rates.json whose rate the layer's input has
LAYER = {"dense": ("dense", 256), "dense-bits": ("dense", 256), "conv": ("conv", 64),
         "conv-bits": ("conv", 64), "f3": ("dense", 2048), "c2": ("conv", 128)}


def layer_flops(name: str, x: np.ndarray) -> tuple[float, float]:
    """(dense FLOPs, FLOPs of the spikes that occurred) of the workload's spike-fed layer over the
    inputs x [n, T, ...]: 2 per multiply-add; a 3x3 pad-1 conv's border taps are not counted"""
    kind, out = LAYER[name]
    if kind == "dense":
        return 2.0 * x[0].size * out * len(x), 2.0 * float(x.sum()) * out
    h, w = x.shape[-2:]
    taps = np.outer([min(i + 1, h - 1) - max(i - 1, 0) + 1 for i in range(h)],
                    [min(j + 1, w - 1) - max(j - 1, 0) + 1 for j in range(w)])  # outputs per input pixel
    per_pixel = float(taps.sum()) * x.shape[-3] * x.shape[-4]  # channels * T
    return 2.0 * per_pixel * out * len(x), 2.0 * float((x * taps).sum()) * out


def real_rate(name: str) -> float | None:
    path = ROOT / "tests" / "parity" / "fmnist_conv" / "rates.json"
    if name not in REAL_RATE or not path.exists():
        return None
    return float(json.loads(path.read_text())["first_2048"][REAL_RATE[name]])


def bench_once(bench, so, x, batch, threads, out):
    p = subprocess.run([bench, str(so), f"--input={x}", f"--batch={batch}", f"--threads={threads}",
                        "--repeats=3", f"--output={out}"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"snnc_bench {so}: {p.stderr.strip()}")
    return json.loads(p.stdout)["median_pass_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snnc", default=str(ROOT / "build-rel/driver/snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel/bench/snnc_bench"))
    ap.add_argument("--rates", default="0.05,0.2,0.4,0.6,0.8,0.95")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(MODELS),
                    help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--json", default=None,
                    help="default bench/cpu/events_rate.json (with --workloads: "
                         "events_rate-NAMES.json)")
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    names = a.workloads.split(",")
    for name in names:
        if name not in MODELS:
            sys.exit(f"--workloads: no workload '{name}' (workloads: {', '.join(MODELS)})")
    if a.json is None:
        a.json = str(HERE / ("events_rate.json" if names == list(MODELS) else
                             f"events_rate-{'-'.join(names)}.json"))
    limits = hostlimits.measure(a.threads)
    print(f"host: FMA peak f32 {limits['peak_f32_gflops']} / f64 {limits['peak_f64_gflops']} "
          f"GFLOP/s, copy {limits['copy_gbs_n']} GB/s at {a.threads} threads", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="snnc-events-rate-") as tmp:
        tmp = Path(tmp)
        for name in names:
            text, shape, n, batch = MODELS[name]
            src = tmp / f"{name}.snn"
            src.write_text(text)
            for acc in ("exact", "f32"):
                extra = [f"--accumulate={acc}"]
                sos = {}
                for mode, flags in (("events", []), ("dense", ["--disable-pass=events"])):
                    so = tmp / f"{name}-{acc}-{mode}.so"
                    subprocess.run([a.snnc, str(src), "-o", str(so)] + extra + flags, check=True)
                    sos[mode] = so
                real = real_rate(name)
                for rate in sorted(set(rates + ([round(real, 4)] if real else []))):
                    rng = np.random.default_rng(int(rate * 1000))
                    x = tmp / f"{name}-x.npy"
                    xs = (rng.random((n,) + shape) < rate).astype(np.float32)
                    np.save(x, xs)
                    dense_flops, event_flops = layer_flops(name, xs)
                    del xs
                    so = tmp / f"{name}-{acc}-auto.so"
                    p = subprocess.run([a.snnc, str(src), "-o", str(so), "--events=auto",
                                        f"--input={x}"] + extra, check=True, capture_output=True,
                                       text=True)
                    chose = "dense" if "dense kernel" in p.stderr else "events"
                    sos["auto"] = so
                    times = {"events": [], "dense": [], "auto": []}
                    for _ in range(a.rounds):
                        for mode in ("events", "dense", "auto"):
                            times[mode].append(bench_once(a.bench, sos[mode], x, batch, a.threads,
                                                          tmp / f"{mode}.npy"))
                    equal = bool(np.array_equal(np.load(tmp / "events.npy"),
                                                np.load(tmp / "dense.npy")))
                    ev, de, au = (statistics.median(times[k]) for k in ("events", "dense", "auto"))
                    peak = limits["peak_f64_gflops" if acc == "exact" else "peak_f32_gflops"]
                    # per pass over the n samples; GFLOP/s of the dense layer's work and of the
                    # spikes' work, each against the FMA peak of the sums' precision (the scan
                    # after the layer is inside the time: these are lower bounds)
                    fig = {"dense_gflops_of_dense": dense_flops / de / 1e9,
                           "events_gflops_of_spikes": event_flops / ev / 1e9}
                    fig["dense_pct_of_peak"] = hostlimits.pct(fig["dense_gflops_of_dense"], peak)
                    fig["events_pct_of_peak"] = hostlimits.pct(fig["events_gflops_of_spikes"], peak)
                    rows.append({"workload": name, "accumulate": acc, "rate": rate,
                                 "is_real_rate": bool(real and abs(rate - round(real, 4)) < 1e-9),
                                 "events_s": ev, "dense_s": de, "dense_over_events": de / ev,
                                 "auto_s": au, "auto_chose": chose,
                                 "peak_gflops": peak, **{k: round(v, 2) for k, v in fig.items()},
                                 "events_runs": times["events"], "dense_runs": times["dense"],
                                 "auto_runs": times["auto"], "outputs_equal": equal})
                    print(f"{name:5} {acc:5} rate {rate:4.2f}  events {ev:.3f} s  dense {de:.3f} s"
                          f"  dense/events {de / ev:5.2f}  auto ({chose}) {au:.3f} s"
                          f"  outputs equal: {equal}  [dense {fig['dense_pct_of_peak']}% of "
                          f"peak, events {fig['events_pct_of_peak']}% of peak on the spikes' "
                          f"FLOPs]", flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
           "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                        if l.startswith("model name")), "?"),
           "threads": a.threads, "rounds": a.rounds, "command": " ".join(sys.argv),
           "host_limits": limits, "rows": rows}
    Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
