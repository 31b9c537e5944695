"""The host's limits, measured in the same run as a benchmark: the FMA peak (f32, f64) and the
copy bandwidth at the benchmark's thread count, from bench/cpu/machine_peak.c (built as
build-rel/bench/machine_peak). Benchmarks turn their kernels' figures into % of these floors:
dense and conv layers in GFLOP/s against the FMA peak, scans and elementwise layers in GB/s
against the copy bandwidth."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PEAK = ROOT / "build-rel" / "bench" / "machine_peak"


def measure(threads: int, quick: bool = False, exe: Path = MACHINE_PEAK) -> dict:
    """machine_peak's JSON plus peak_f32_gflops, peak_f64_gflops (the best vector path at
    `threads`) and copy_gbs_n (copy bandwidth at `threads`)."""
    if not Path(exe).exists():
        sys.exit(f"{exe}: not built (cmake --build build-rel --target machine_peak)")
    cmd = [str(exe), f"--threads={threads}"] + (["--quick"] if quick else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {p.stderr.strip()}")
    doc = json.loads(p.stdout)
    key = str(threads)
    for prec in ("f32", "f64"):
        paths = doc["fma_gflops"][prec]
        doc[f"peak_{prec}_gflops"] = max(v[key] for v in paths.values() if key in v)
    doc["copy_gbs_n"] = doc["copy_gbs"][key]
    doc["command"] = " ".join(cmd)
    return doc


def pct(value: float, floor: float) -> float:
    return round(100.0 * value / floor, 1) if floor else 0.0
