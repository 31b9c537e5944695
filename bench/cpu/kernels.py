#!/usr/bin/env python3
"""Each kernel of the benchmark networks against the host's limits, one command:

    python3 bench/cpu/kernels.py [--threads 2] [--quick] [--json bench/cpu/kernels.json]

For the Fashion-MNIST MLP (batch 256 and batch 1), the conv SNN (batch 64 and batch 1), both with
their trained weights, and the LIF layer (2^20 neurons, T = 8), `snnc --run --profile
--report=json` times every kernel of the CPU code alone (build-rel/driver/snnc, the default
passes, float sums); bench/cpu/machine_peak measures the FMA peak and the copy bandwidth in the
same run (hostlimits.py). Per kernel it prints:
  - time and share of the run;
  - dense and conv layers: GFLOP/s of the dense equivalent (every input counted) and its % of the
    f32 FMA peak, and for a layer fed by spikes the GFLOP/s of the work the spikes that occurred
    make (dense FLOPs x the input's firing rate, read from a --record run of the same images) and
    its % of the peak: the floor an event-driven kernel is held to;
  - GB/s of the bytes of the buffers it reads and writes, and its % of the copy bandwidth: the
    floor of a scan or an elementwise layer.
`snnc --profile` runs its first batch once untimed before timing it, so a one-batch run (the LIF
layer) is not its page faults. Writes the JSON (host, versions, commands, every figure)."""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hostlimits  # noqa: E402

ROOT = HERE.parents[1]
SNNC = ROOT / "build-rel" / "driver" / "snnc"

# the spike-fed layers' inputs, per kernel: what --record keeps to give their firing rates
SPIKE_INPUTS = {"fmnist_mlp": {"dense_fc2": "s1"},
                "fmnist_conv": {"conv2d_c2": "p1", "dense_f3": "p2", "dense_f4": "s3"}}


def run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}:\n{p.stderr[-3000:]}")
    return p.stdout


def input_rates(model: str, data: list[str], limit: int, work: Path, commands: list) -> dict:
    """the firing rate of each spike-fed kernel's input over the same images"""
    want = SPIKE_INPUTS.get(model, {})
    if not want:
        return {}
    rec = work / f"{model}-rec.npz"
    cmd = [str(SNNC), "--run", str(ROOT / "examples" / f"{model}.snn"), *data, f"--limit={limit}",
           f"--record={','.join(sorted(set(want.values())))}", f"--record-file={rec}", "-q"]
    commands.append(" ".join(cmd))
    run(cmd)
    d = np.load(rec)
    return {k: float(np.mean(d[v] != 0)) for k, v in want.items()}


def profile(model: str, data: list[str], batch: int, limit: int, threads: int, commands: list):
    cmd = [str(SNNC), "--run", str(ROOT / "examples" / f"{model}.snn"), *data, f"--limit={limit}",
           f"--batch={batch}", f"--threads={threads}", "--profile", "--report=json", "-q"]
    commands.append(" ".join(cmd))
    rep = json.loads(run(cmd).strip().splitlines()[-1])
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer images")
    ap.add_argument("--json", type=Path, default=HERE / "kernels.json")
    a = ap.parse_args()
    if not SNNC.exists():
        sys.exit(f"{SNNC}: not built (cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && "
                 "cmake --build build-rel)")
    host = hostlimits.measure(a.threads, quick=a.quick)
    peak, copy = host["peak_f32_gflops"], host["copy_gbs_n"]
    work = Path(tempfile.mkdtemp(prefix="snnc-kernels-"))
    commands: list[str] = []
    lif_in = work / "lif.npy"
    np.save(lif_in, np.random.default_rng(0).normal(0.6, 0.6, (1, 8, 1 << 20)).astype(np.float32))
    fm = ["--data=fashion-mnist"]
    q = a.quick
    cases = [("fmnist_mlp", fm, 256, 2048 if q else 10000), ("fmnist_mlp", fm, 1, 200 if q else 1000),
             ("fmnist_conv", fm, 64, 256 if q else 1024), ("fmnist_conv", fm, 1, 32 if q else 128),
             ("lif_layer", [f"--input={lif_in}"], 1, 1)]
    doc = {"date": datetime.date.today().isoformat(), "host": host, "threads": a.threads,
           "python": platform.python_version(), "runs": []}
    rates_of: dict[str, dict] = {}
    print(f"host: {host['cpu']}, {', '.join(host['features'])}; FMA peak f32 {peak:.0f} GFLOP/s, "
          f"copy {copy:.1f} GB/s at {a.threads} threads")
    for model, data, batch, limit in cases:
        if model not in rates_of:
            rates_of[model] = input_rates(model, data, limit, work, commands)
        rates = rates_of[model]
        reps = [profile(model, data, batch, limit, a.threads, commands) for _ in range(1 if q else 3)]
        rep = min(reps, key=lambda r: sum(u["seconds"] for u in r["profile"]))  # the quietest run
        total = sum(u["seconds"] for u in rep["profile"])
        print(f"\n{model}, batch {batch}, {rep['images']} samples: {total / rep['images'] * 1e3:.4f} "
              f"ms a sample in the kernels")
        print(f"  {'kernel':34} {'ms/sample':>9} {'share':>6} {'GFLOP/s':>8} {'%peak':>6} "
              f"{'rate':>6} {'spk GF/s':>8} {'%peak':>6} {'GB/s':>7} {'%copy':>6}")
        units = []
        for u in rep["profile"]:
            name = "+".join(u["kernels"])
            s = u["seconds"]
            gf = u["flops"] / s * 1e-9 if s > 0 and u["flops"] else None
            rate = next((rates[k] for k in u["kernels"] if k in rates), None)
            sgf = gf * rate if gf is not None and rate is not None else None
            gbs = u["bytes"] / s * 1e-9 if s > 0 else None
            row = {"kernels": u["kernels"], "seconds": s, "share": s / total if total else 0,
                   "gflops_dense": gf, "pct_peak_dense": gf and 100 * gf / peak,
                   "input_rate": rate, "gflops_spikes": sgf,
                   "pct_peak_spikes": sgf and 100 * sgf / peak, "gbs": gbs,
                   "pct_copy": gbs and 100 * gbs / copy}
            units.append(row)

            def f(x, width, prec, pct=False):
                if x is None:
                    return "-".rjust(width + pct)
                return f"{x:{width}.{prec}f}" + ("%" if pct else "")
            print(f"  {name[:34]:34} {s / rep['images'] * 1e3:9.4f} {100 * row['share']:5.1f}% "
                  f"{f(gf, 8, 1)} {f(row['pct_peak_dense'], 5, 1, True)} {f(rate, 6, 3)} "
                  f"{f(sgf, 8, 1)} {f(row['pct_peak_spikes'], 5, 1, True)} {f(gbs, 7, 1)} "
                  f"{f(row['pct_copy'], 5, 1, True)}")
        doc["runs"].append({"model": model, "batch": batch, "images": rep["images"],
                            "firing_rates": rep["firing_rates"], "units": units,
                            "kernel_seconds": total})
    doc["commands"] = [c.replace(str(ROOT) + "/", "").replace(str(work), "TMP") for c in commands]
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
