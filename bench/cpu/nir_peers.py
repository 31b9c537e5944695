#!/usr/bin/env python3
"""An snnTorch model brought to snnc through NIR, timed against snnTorch itself.

    python3 bench/cpu/nir_peers.py [--snnc build-rel/driver/snnc] [--bench build-rel/bench/snnc_bench]
                                   [--images 2048] [--repeats 5] [--threads 2]

The model: snnTorch's tutorial MLP, nn.Linear(784, 256) -> snn.Leaky(beta=0.9) -> nn.Linear(256, 10)
-> snn.Leaky(beta=0.9), subtract reset, T = 25 steps, seeded weights, fed Poisson spikes (rate 0.1,
numpy, seeded) [N, 25, 784]. snnTorch runs it step by step in float32 on --threads threads (batch
256: the tutorials' loop over t); snnc imports the export_to_nir file (--reset=subtract
--reset-step=next) three ways: inputs f32 with exact sums (--accumulate=exact), with --accumulate=f32, and with
--spike-inputs (the inputs declared spikes, so fc1 sums only what spiked), builds a model.so each
and snnc_bench times it on the same inputs and threads (batch 256; compile, first touch and thread
start excluded, as for snnTorch's warm-up pass). All: the median of --repeats passes over all
images. The output spikes [N, 25, 10] are compared with snnTorch's (they differ where float32 sums
in another order move a membrane across the threshold). Writes bench/cpu/nir_peers.json."""
import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
T, BATCH = 25, 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snnc", default=str(ROOT / "build-rel/driver/snnc"))
    ap.add_argument("--bench", default=str(ROOT / "build-rel/bench/snnc_bench"))
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import nir
    import snntorch as snn
    from snntorch import utils
    from snntorch.export_nir import export_to_nir

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.fc1 = torch.nn.Linear(784, 256)
            s.lif1 = snn.Leaky(beta=torch.full((256,), 0.9), threshold=torch.ones(256),
                               init_hidden=True)
            s.fc2 = torch.nn.Linear(256, 10)
            s.lif2 = snn.Leaky(beta=torch.full((10,), 0.9), threshold=torch.ones(10),
                               init_hidden=True, output=True)

        def forward(s, x):
            return s.lif2(s.fc2(s.lif1(s.fc1(x))))

    net = Net()
    with torch.no_grad():  # weights that make the layers fire now and then
        net.fc1.weight *= 3
        net.fc2.weight *= 2
    x = (np.random.default_rng(1).random((a.images, T, 784)) < 0.1).astype(np.float32)
    xt = torch.from_numpy(x)

    def run_snntorch():
        outs = []
        with torch.no_grad():
            for b in range(0, a.images, BATCH):
                utils.reset(net)
                xb = xt[b:b + BATCH]
                outs.append(torch.stack([net(xb[:, t])[0] for t in range(T)], 1))
        return torch.cat(outs).numpy()

    run_snntorch()  # warm-up
    st_times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        st_out = run_snntorch()
        st_times.append(time.perf_counter() - t0)

    variants = {"f32 inputs, exact sums": ["--accumulate=exact"], "accumulate f32": ["--accumulate=f32"],
                "spike inputs": ["--spike-inputs"]}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        nir.write(str(tmp / "mlp.nir"), export_to_nir(net, torch.zeros(784)))
        np.save(tmp / "x.npy", x)
        for name, extra in variants.items():
            so = tmp / "mlp.so"
            t0 = time.perf_counter()
            subprocess.run([a.snnc, str(tmp / "mlp.nir"), "--timesteps=25", "--reset=subtract",
                            "--reset-step=next", "-o", str(so), "--cuda-arch=none", "-q"] + extra,
                           check=True)
            build_s = time.perf_counter() - t0
            r = subprocess.run([a.bench, str(so), f"--input={tmp / 'x.npy'}", f"--batch={BATCH}",
                                f"--threads={a.threads}", f"--repeats={a.repeats}",
                                f"--output={tmp / 'out.npy'}"], capture_output=True, text=True,
                               check=True)
            rep = json.loads(r.stdout.strip().splitlines()[-1])
            out = np.load(tmp / "out.npy")
            rows[name] = {"options": extra, "snnc_s": round(rep["median_pass_s"], 4),
                          "speedup_vs_snntorch": round(float(np.median(st_times)) /
                                                       rep["median_pass_s"], 2),
                          "build_s": round(build_s, 2),
                          "output_spikes_equal_fraction": float(np.mean(out == st_out))}

    st_s = float(np.median(st_times))
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(),
        "threads": a.threads, "images": a.images, "timesteps": T, "batch": BATCH,
        "versions": {"torch": torch.__version__, "snntorch": snn.__version__,
                     "nir": getattr(nir, "__version__", "?")},
        "snntorch_s": round(st_s, 4), "output_spike_rate": float(st_out.mean()),
        "snnc": rows,
    }
    (HERE / "nir_peers.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"snnTorch: {st_s:.3f} s ({a.images} images, T = {T}, {a.threads} threads; output "
          f"spike rate {st_out.mean():.3f})")
    for name, row in rows.items():
        print(f"snnc from NIR, {name}: {row['snnc_s']:.3f} s ({row['speedup_vs_snntorch']:.2f}x), "
              f"output spikes equal to snnTorch's: {row['output_spikes_equal_fraction']:.5%}")
    if min(row["output_spikes_equal_fraction"] for row in rows.values()) < 0.999:
        sys.exit("nir_peers: the outputs differ from snnTorch's beyond rounding")


if __name__ == "__main__":
    main()
