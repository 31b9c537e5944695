#!/usr/bin/env python3
"""Pass ablation on the CPU: each workload at -O0, -O2, and -O2 with each pass disabled in turn.

    python3 bench/cpu/ablation.py [--snnc build-rel/driver/snnc] [--repeats 3] [--quick]

Workloads (the CPU suite's, bench/cpu/peers.py): the Fashion-MNIST MLP (10,000 test images, batch
256), the conv SNN (the first 1,024 test images, batch 64, bench/cpu/fmnist_conv_bench.safetensors)
and one LIF layer (2^20 neurons, T = 8, one sample of uniform [0, 2) input, seeded). For each
configuration: median wall time of `snnc --run` (its own timer, compile excluded and cached), peak
resident memory of the process (/proc: VmHWM), kernel calls per inference (`--explain`), and whether
the outputs equal -O2's bit for bit. Writes bench/cpu/ablation.json and prints a table. The passes
and their order come from `snnc --help-passes`."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def passes(snnc):
    out = subprocess.run([snnc, "--help-passes"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def run(snnc, args, out_npy):
    """One snnc --run: (seconds from its report, peak RSS in KiB)."""
    cmd = [snnc, "--run", "-q", "--report=json", "--threads=2", f"--output={out_npy}"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, ru = os.wait4(p.pid, 0)
    out = p.stdout.read()
    err = p.stderr.read()
    if p.returncode not in (0, None) and not out.strip():
        sys.exit(f"ablation: {' '.join(cmd)} failed:\n{err}")
    report = json.loads(out.strip().splitlines()[-1])
    return report["seconds"], ru.ru_maxrss  # ru_maxrss: KiB on Linux


def launches(snnc, args):
    out = subprocess.run([snnc, "--explain"] + args, capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("launches"):
            return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snnc", default=str(ROOT / "build-rel" / "driver" / "snnc"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repeat, fewer images")
    a = ap.parse_args()
    snnc = a.snnc
    repeats = 1 if a.quick else a.repeats
    work = Path(tempfile.mkdtemp(prefix="snnc-ablation-"))
    rng = np.random.default_rng(8)
    lif_x = work / "lif.npy"
    np.save(lif_x, (rng.random((1, 8, 1 << 20), dtype=np.float32) * 2).astype(np.float32))
    n_mlp, n_conv = (2048, 256) if a.quick else (10000, 1024)
    workloads = {
        "mlp": [str(ROOT / "examples/fmnist_mlp.snn"), "--data=fashion-mnist",
                f"--limit={n_mlp}", "--batch=256"],
        "conv": [str(ROOT / "examples/fmnist_conv.snn"), "--data=fashion-mnist",
                 f"--limit={n_conv}", "--batch=64",
                 f"--weights={HERE / 'fmnist_conv_bench.safetensors'}"],
        "lif": [str(ROOT / "examples/lif_layer.snn"), f"--input={lif_x}", "--batch=1"],
    }
    configs = [("-O0", ["-O0"]), ("-O2", [])]
    configs += [(f"-O2 -{p}", [f"--disable-pass={p}"]) for p in passes(snnc)]
    env_cache = os.environ.get("SNN_CACHE_DIR")
    rows = []
    for wname, wargs in workloads.items():
        ref = work / f"{wname}.O2.npy"
        run(snnc, wargs + [], ref)  # the reference outputs, and the compile cache warmed
        for cname, cargs in configs:
            out = work / f"{wname}.{cname.replace(' ', '_')}.npy"
            run(snnc, wargs + cargs, out)  # warm the cache for this configuration
            secs, rss = [], 0
            for _ in range(repeats):
                s, r = run(snnc, wargs + cargs, out)
                secs.append(s)
                rss = max(rss, r)
            same = np.array_equal(np.load(out).view(np.uint32), np.load(ref).view(np.uint32))
            rows.append({"workload": wname, "config": cname, "seconds": sorted(secs)[len(secs) // 2],
                         "all_seconds": secs, "peak_rss_kib": rss,
                         "launches": launches(snnc, wargs[:1] + cargs + [a for a in wargs[1:]
                                                                         if a.startswith("--batch")]),
                         "same_as_O2": bool(same)})
            r = rows[-1]
            print(f"{wname:5} {cname:22} {r['seconds']:9.4f} s  {rss / 1024:8.1f} MiB  "
                  f"{r['launches']:4} launches  {'=' if same else 'DIFFERENT'}", flush=True)
    o2 = {r["workload"]: r["seconds"] for r in rows if r["config"] == "-O2"}
    for r in rows:
        r["time_vs_O2"] = r["seconds"] / o2[r["workload"]]
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.processor() or
              platform.machine(), "cores": os.cpu_count(), "snnc": snnc,
              "command": " ".join(sys.argv), "cache_dir": env_cache, "rows": rows}
    (HERE / ("out" if a.quick else ".")).mkdir(exist_ok=True)
    path = HERE / "out" / "ablation_quick.json" if a.quick else HERE / "ablation.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
