#!/usr/bin/env python3
"""The hand-written peer in JAX: the suite's three networks written with jax.numpy, the time loop
as jax.lax.scan over T, the whole forward under jax.jit, for bench/cpu/handwritten.py.

    python3 bench/cpu/jax_peer.py --selfcheck [--images 16] [--neurons 65536]
    python3 bench/cpu/jax_peer.py --net mlp|conv|lif --input X.npy --weights W.safetensors
                                  --output OUT.npy --json OUT.json [--batch B] [--repeats R]
                                  [--latency-runs L] [--latency-warmup W] [--layout nchw|nhwc]

The same maths, in the same order, as handwritten.py's PyTorch versions: lif_step/if_step
(h = v + (x - v) / 2.0, s = (h >= 1.0), v = h * (1 - s)), the layers that see the same input at
every step (the MLP's fc1, the conv net's conv1 + BN) computed once per image, every later layer
batched over T*B rows, float32 throughout, the weights of the same safetensors files read the same
way (f16 stored, read as f32). BatchNorm (eval) is applied as torch's CPU kernel applies it:
x * alpha + beta with alpha = weight / sqrt(var + eps) (as invstd * weight) and beta = bias -
mean * alpha, alpha and beta computed once, in f32, when the weights are loaded. The convs go
through jax.lax.conv_general_dilated in NHWC/HWIO (the default: 15-25% faster than NCHW on this
2-CPU host; the image is transposed inside the jitted forward, the weights once at load, fc9's
columns permuted to NHWC's flatten order) or, with --layout nchw, NCHW/OIHW like torch; the
selfcheck checks the two give identical rates.

Threads: 2, like every other peer. jaxlib 0.10.2 has no flag for the size of XLA's CPU thread
pools: `intra_op_parallelism_threads` is not an XLA flag (as `--intra_op_parallelism_threads=2` in
XLA_FLAGS it aborts with "Unknown flag"; without the dashes it is silently ignored). XLA sizes its
Eigen intra-op pool ("tf_XLAEigen" threads: 2 with 2 CPUs, 1 with 1) and some of its other thread
pools by the CPUs the process may run on, so limit_threads() restricts the process's CPU affinity to `threads` CPUs
(os.sched_setaffinity) and sets XLA_FLAGS=--xla_cpu_multi_thread_eigen=true (the default, made
explicit) before jax is imported; the JSON records the affinity and the tf_XLAEigen thread count.
handwritten.py runs this file in a subprocess so torch's and XLA's thread pools never share a
process.

Timing as peers.py's helpers (not imported here: peers.py imports torch): the outputs pass over
all images is the first call (it compiles; reported as first_pass_s, not timed), then the median of
`repeats` whole passes, batch-1 latency the median of single-image calls after an untimed first
batch-1 call (its compile) and `latency_warmup` calls; every call waits for its result
(block_until_ready)."""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "out"
DATA = Path(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
THREADS = 2
MLP_T, CONV_T, LIF_T = 8, 4, 8  # as peers.py
TITLE = "JAX jit + lax.scan"
INSTALL = "install it with: python3 -m pip install jax==0.10.2 jaxlib==0.10.2, or tools/install-python-deps.sh"


# ---- used by handwritten.py (no jax import in its process) -----------------------------------

def missing() -> str | None:
    """Why the JAX peer cannot run here, or None. Looks for the packages without importing them."""
    import importlib.util
    for pkg in ("jax", "jaxlib"):
        if importlib.util.find_spec(pkg) is None:
            return f"{pkg} is not installed; {INSTALL}"
    return None


def run(net: str, args: list[str], work: Path, commands: list[str] | None = None) -> dict:
    """Runs this file for one network in a subprocess; returns its JSON plus "output" (the rates,
    or the packed LIF spikes), or {"error": ...} when it failed."""
    js, out = work / f"{net}-jax.json", work / f"{net}-jax.npy"
    cmd = [sys.executable, str(Path(__file__)), "--net", net, "--output", str(out), "--json", str(js)] + args
    if commands is not None:
        commands.append(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-400:]}"}
    import numpy as np
    r = json.loads(js.read_text())
    r["output"] = np.load(out)
    return r


# ---- thread set-up, before jax is imported ------------------------------------------------------

def limit_threads(n: int) -> dict:
    """Two threads for XLA: the process's CPU affinity cut to n CPUs (XLA sizes its pools by it) and
    XLA_FLAGS with the multi-threaded Eigen runtime. Must run before `import jax`."""
    if "jax" in sys.modules:
        raise RuntimeError("limit_threads() must run before jax is imported")
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_cpu_multi_thread_eigen" not in flags:
        flags = (flags + " --xla_cpu_multi_thread_eigen=true").strip()
    os.environ["XLA_FLAGS"] = flags
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > n:
        os.sched_setaffinity(0, cpus[:n])
    return {"XLA_FLAGS": flags, "cpu_affinity": sorted(os.sched_getaffinity(0)),
            "cpus_before": len(cpus)}


def thread_names() -> dict[str, int]:
    """The process's threads by name (the XLA Eigen pool's are "tf_XLAEigen")."""
    names: dict[str, int] = {}
    for t in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{t}/comm").read_text().strip()
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return names


# ---- the networks (jax imported lazily: call limit_threads() first) -----------------------------

def _jax():
    import jax
    import jax.numpy as jnp
    return jax, jnp


def lif_step(v, x):
    """SpikingJelly LIFNode(tau=2), decay_input, hard reset to 0: handwritten.lif_step in jax."""
    h = v + (x - v) / 2.0
    s = (h >= 1.0).astype(h.dtype)
    return h * (1.0 - s), s


def if_step(v, x):
    """IFNode(v_th=1), hard reset to 0."""
    h = v + x
    s = (h >= 1.0).astype(h.dtype)
    return h * (1.0 - s), s


def scan(step, x, T=None):
    """A neuron layer over time from v = 0 with jax.lax.scan: x [T, ...] step by step, or, with T
    given, the same x at every step (a static input). Returns the spikes stacked [T, ...]."""
    jax, jnp = _jax()
    if T is None:
        _, s = jax.lax.scan(step, jnp.zeros_like(x[0]), x)
    else:
        _, s = jax.lax.scan(lambda v, _: step(v, x), jnp.zeros_like(x), None, length=T)
    return s


def _load(path: Path) -> dict:
    import numpy as np
    from safetensors.numpy import load_file
    return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}


def _linear(jnp, x, w, b=None):
    """F.linear: x @ w.T (+ b), f32."""
    y = jnp.matmul(x, w.T, precision="highest", preferred_element_type=jnp.float32)
    return y if b is None else y + b


def mlp(weights: Path = ROOT / "examples" / "fmnist_mlp.safetensors"):
    """The Fashion-MNIST MLP (784-256-10, LIF, T=8): a jitted function of [B, 1, 28, 28] images to
    the output rates [B, 10]."""
    jax, jnp = _jax()
    w = _load(weights)
    p = jax.device_put({k: w[k] for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")})

    @jax.jit
    def forward(p, img):
        c1 = _linear(jnp, img.reshape(img.shape[0], -1), p["fc1.weight"], p["fc1.bias"])  # once
        s1 = scan(lif_step, c1, MLP_T)                                                   # [T, B, 256]
        c2 = _linear(jnp, s1.reshape(-1, s1.shape[-1]), p["fc2.weight"], p["fc2.bias"])   # T*B rows
        return scan(lif_step, c2.reshape(MLP_T, -1, c2.shape[-1])).sum(0) / MLP_T

    return lambda img: forward(p, img)


def conv(weights: Path, layout: str = "nhwc"):
    """SpikingJelly's Fashion-MNIST conv SNN (IF, T=4): a jitted function of [B, 1, 28, 28] images
    to the output rates [B, 10]. layout "nchw" (torch's) or "nhwc" (images transposed in the jitted
    function, weights once here)."""
    import numpy as np
    jax, jnp = _jax()
    w = _load(weights)
    p = {}
    for i in (1, 5):  # torch's CPU batch_norm (eval): x * alpha + beta, alpha and beta in f32
        invstd = np.float32(1) / np.sqrt(w[f"conv_fc.{i}.running_var"] + np.float32(1e-5))
        alpha = invstd * w[f"conv_fc.{i}.weight"]
        p[f"bn{i}"] = (alpha, w[f"conv_fc.{i}.bias"] - w[f"conv_fc.{i}.running_mean"] * alpha)
    w9 = w["conv_fc.9.weight"]
    if layout == "nhwc":
        dn, cax, win = ("NHWC", "HWIO", "NHWC"), 3, (1, 2, 2, 1)
        p["w0"], p["w4"] = (w[f"conv_fc.{i}.weight"].transpose(2, 3, 1, 0) for i in (0, 4))
        # torch flattens [C, 7, 7]; NHWC flattens [7, 7, C]: the same columns, permuted once
        w9 = w9.reshape(-1, 128, 7, 7).transpose(0, 2, 3, 1).reshape(w9.shape[0], -1)
    else:
        dn, cax, win = ("NCHW", "OIHW", "NCHW"), 1, (1, 1, 2, 2)
        p["w0"], p["w4"] = w["conv_fc.0.weight"], w["conv_fc.4.weight"]
    p["w9"], p["w11"] = np.ascontiguousarray(w9), w["conv_fc.11.weight"]
    p = jax.device_put(p)
    T = CONV_T

    def conv3(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn,
                                            precision="highest", preferred_element_type=jnp.float32)

    def bn(x, ab):
        shape = [1, 1, 1, 1]
        shape[cax] = -1
        return x * ab[0].reshape(shape) + ab[1].reshape(shape)

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, win, win, "VALID")

    @jax.jit
    def forward(p, img):
        B = img.shape[0]
        if layout == "nhwc":
            img = img.transpose(0, 2, 3, 1)
        x1 = bn(conv3(img, p["w0"]), p["bn1"])                         # once per image
        s1 = scan(if_step, x1, T)                                      # [T, B, ...]
        p1 = pool(s1.reshape((T * B,) + s1.shape[2:]))                 # [T*B, 128, 14, 14]
        x2 = bn(conv3(p1, p["w4"]), p["bn5"])
        s2 = scan(if_step, x2.reshape((T, B) + x2.shape[1:]))
        p2 = pool(s2.reshape((T * B,) + s2.shape[2:])).reshape(T * B, -1)  # [T*B, 6272]
        x3 = _linear(jnp, p2, p["w9"]).reshape(T, B, -1)
        x4 = _linear(jnp, scan(if_step, x3).reshape(T * B, -1), p["w11"]).reshape(T, B, -1)
        return scan(if_step, x4).sum(0) / T

    return lambda img: forward(p, img)


def lif_layer():
    """One LIF layer: a jitted function of [T, N] currents to the spikes [T, N] (f32)."""
    jax, _ = _jax()
    return jax.jit(lambda x: scan(lif_step, x))


# ---- timing, as peers.py's throughput/latency/median_ms ----------------------------------------

def _ready(y):
    return y.block_until_ready()


def outputs(fn, images, batch: int):
    import numpy as np
    return np.concatenate([np.asarray(fn(images[i:i + batch])) for i in range(0, len(images), batch)])


def throughput(fn, images, batch: int, repeats: int) -> dict:
    """Images/s: the median of `repeats` whole passes in batches (after the outputs pass, which is
    the warm-up), each call waited for."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(0, len(images), batch):
            _ready(fn(images[i:i + batch]))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"images": len(images), "batch": batch, "repeats": repeats,
            "pass_s": [round(t, 4) for t in times], "median_pass_s": round(med, 4),
            "images_per_s": round(len(images) / med, 1)}


def latency(fn, images, runs: int, warmup: int) -> dict:
    """Batch-1 latency: the median of `runs` single-image calls (image i for run i) after
    `warmup` calls."""
    for i in range(warmup):
        j = i % len(images)
        _ready(fn(images[j:j + 1]))
    ts = []
    for i in range(runs):
        j = i % len(images)
        x = images[j:j + 1]
        t0 = time.perf_counter()
        _ready(fn(x))
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return {"runs": runs, "warmup": warmup, "median_ms": round(1e3 * statistics.median(ts), 4),
            "p10_ms": round(1e3 * ts[len(ts) // 10], 4), "p90_ms": round(1e3 * ts[(9 * len(ts)) // 10], 4)}


def median_ms(fn, repeats: int, warmup: int = 2) -> tuple[float, list[float]]:
    for _ in range(warmup):
        _ready(fn())
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _ready(fn())
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts), [round(1e3 * t, 3) for t in ts]


def bench(a, setup: dict) -> dict:
    """One network's figures; writes its outputs (rates, or packed LIF spikes) to a.output."""
    import numpy as np
    jax, _ = _jax()
    x = np.load(a.input).astype(np.float32, copy=False)
    res = {"implementation": TITLE, "layout": a.layout if a.net == "conv" else None}
    if a.net == "lif":
        x = jax.device_put(x.reshape(x.shape[-2], x.shape[-1]))  # [T, N] ([1, T, N] accepted)
        fn = lif_layer()
        t0 = time.perf_counter()
        s = _ready(fn(x))
        res["first_call_s"] = round(time.perf_counter() - t0, 2)
        ms, runs = median_ms(lambda: fn(x), a.repeats)
        res.update(median_ms=round(ms, 3), runs_ms=runs)
        np.save(a.output, np.packbits(np.asarray(s).astype(bool), axis=-1))
    else:
        fn = mlp(a.weights) if a.net == "mlp" else conv(a.weights, a.layout)
        t0 = time.perf_counter()
        rates = outputs(fn, x, a.batch)  # the first calls compile (the full batch and the tail)
        res["first_pass_s"] = round(time.perf_counter() - t0, 2)
        res[f"throughput_b{a.batch}"] = throughput(fn, x, a.batch, a.repeats)
        t0 = time.perf_counter()
        _ready(fn(x[:1]))  # batch-1 compile
        res["first_call_b1_s"] = round(time.perf_counter() - t0, 2)
        res["latency_b1"] = latency(fn, x, a.latency_runs, a.latency_warmup)
        np.save(a.output, rates)
    res["threads"] = {**setup, "threads": a.threads, "thread_names": thread_names()}
    res["versions"] = {"jax": jax.__version__, "jaxlib": __import__("jaxlib").__version__,
                       "numpy": np.__version__}
    return res


# ---- selfcheck ----------------------------------------------------------------------------------

def _test_images(n: int):
    """The first n Fashion-MNIST test images as peers.test_set() makes them: uint8 / 255, f32."""
    import numpy as np
    with gzip.open(DATA / "t10k-images-idx3-ubyte.gz", "rb") as f:
        raw = f.read(16 + 784 * n)
    u8 = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, 28, 28)
    return u8.astype(np.float32) / np.float32(255)


def _agree(a, b):
    import numpy as np
    if b is None:
        return None
    n = min(len(a), len(b))
    return round(float((np.asarray(a[:n]) == np.asarray(b[:n])).mean()), 6)


def selfcheck(a) -> int:
    """Each network on a few images / neurons against SpikingJelly's saved outputs (bench/cpu/out/,
    from peers.py) and, when torch is importable, handwritten.py's PyTorch functions."""
    import numpy as np

    def saved(name):
        p = OUT / name
        return np.load(p, mmap_mode="r") if p.exists() else None

    n, ncv, nn = a.images, max(1, a.images // 2), max(8, a.neurons // 8 * 8)
    x = _test_images(n)
    got = {"mlp": np.asarray(mlp()(x)),
           "conv": np.asarray(conv(a.weights or ROOT / "examples" / "fmnist_conv.safetensors",
                                   a.layout)(x[:ncv]))}
    other = np.asarray(conv(a.weights or ROOT / "examples" / "fmnist_conv.safetensors",
                            "nhwc" if a.layout == "nchw" else "nchw")(x[:ncv]))
    lif_in = saved("lif_input.npy")
    lif_x = np.ascontiguousarray(lif_in[0][:, :nn]) if lif_in is not None else None
    if lif_x is not None:
        got["lif"] = np.packbits(np.asarray(lif_layer()(lif_x)).astype(bool), axis=-1)
    rows = [("mlp rates == SpikingJelly", _agree(got["mlp"], saved("mlp_rate_spikingjelly.npy"))),
            ("mlp predictions == SpikingJelly",
             _agree(np.argmax(got["mlp"], 1).astype(np.uint8), saved("mlp_pred_spikingjelly.npy"))),
            ("conv rates == SpikingJelly", _agree(got["conv"], saved("conv_rate_spikingjelly.npy"))),
            ("conv rates nchw == nhwc", _agree(got["conv"], other))]
    if "lif" in got:
        sj = saved("lif_spikes_packed_spikingjelly.npy")
        sj = sj[:, :nn // 8] if sj is not None else None  # packbits: 8 neurons a byte
        rows.append(("lif spikes == SpikingJelly", _agree(got["lif"], sj)))
    try:
        sys.path.insert(0, str(HERE))
        import handwritten  # torch, SpikingJelly (through peers.py)
        import torch
        with torch.inference_mode():
            tx = torch.from_numpy(x)
            rows += [("mlp rates == torch by hand", _agree(got["mlp"], handwritten.MLP()(tx).numpy())),
                     ("conv rates == torch by hand",
                      _agree(got["conv"], handwritten.Conv()(tx[:ncv]).numpy()))]
            if lif_x is not None:
                ts = handwritten.lif_layer(torch.from_numpy(lif_x)).numpy().astype(bool)
                rows.append(("lif spikes == torch by hand", _agree(got["lif"], np.packbits(ts, axis=-1))))
    except ImportError as e:
        print(f"(torch by-hand comparison skipped: {e})")
    print(f"selfcheck: {n} images (conv: {ncv}), {nn} LIF neurons, layout {a.layout}, "
          f"threads {thread_names().get('tf_XLAEigen', 0)} tf_XLAEigen")
    bad = 0
    for what, frac in rows:
        print(f"  {what:34s} {frac if frac is not None else 'no saved output (run peers.py)'}")
        bad += frac is not None and frac < 0.99
    print("selfcheck: " + ("FAILED" if bad else "ok"))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--selfcheck", action="store_true", help="a few images/neurons against saved outputs")
    ap.add_argument("--net", choices=("mlp", "conv", "lif"))
    ap.add_argument("--input", type=Path, help=".npy: images [N, 1, 28, 28] or LIF currents [T, N]")
    ap.add_argument("--weights", type=Path, help="safetensors (mlp, conv)")
    ap.add_argument("--output", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--latency-runs", type=int, default=200)
    ap.add_argument("--latency-warmup", type=int, default=10)
    ap.add_argument("--layout", choices=("nchw", "nhwc"), default="nhwc",
                    help="the conv net's layout (nhwc: the faster here; both give the same sums)")
    ap.add_argument("--threads", type=int, default=THREADS)
    ap.add_argument("--images", type=int, default=16, help="--selfcheck: images")
    ap.add_argument("--neurons", type=int, default=1 << 16, help="--selfcheck: LIF neurons")
    a = ap.parse_args()
    setup = limit_threads(a.threads)
    if a.selfcheck:
        return selfcheck(a)
    if not (a.net and a.input and a.output and a.json) or (a.net != "lif" and not a.weights):
        ap.error("--net, --input, --output, --json (and --weights for mlp/conv) are needed")
    res = bench(a, setup)
    a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
