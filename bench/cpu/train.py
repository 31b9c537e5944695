#!/usr/bin/env python3
"""Training on the CPU against the peers, one command, same machine, same threads, same data:

    python3 bench/cpu/train.py [--net mlp|conv] [--images N] [--epochs E] [--threads 2]
                               [--only snnc,sj,...] [--json bench/cpu/train.json]

The Fashion-MNIST MLP (784-256-10, SpikingJelly's LIFNode: tau 2, decay_input, hard reset to 0,
the Sigmoid(alpha=4) surrogate; T = 8; the image fed unchanged at every step), MSE between the
output firing rate and the one-hot label, Adam lr 1e-3, batch 128, from PyTorch's default
initialisation, the first N training images in order (no shuffle; N rounded down to whole
batches), trained by:

  snnc          snnc --train --backend=cpu (compiled; its figure is its own report's)
  sj            SpikingJelly 2.0, multi-step mode (step_mode='m', its torch backend: the fastest
                it has on a CPU), the example's loop (the image repeated T times, reset_net)
  hand          the same network written by hand in PyTorch: fc1 of the static image once, the
                LIF scan in tensor ops with the surrogate as an autograd.Function, fc2 over all
                T*B rows at once; eager
  hand-compile  the same under torch.compile (inductor; its compile is the first batch, reported
                and not timed)
  snntorch      snnTorch 1.0's tutorial loop: snn.Leaky(beta=0.5) layers stepped in Python, the
                same loss (its neuron differs: subtract reset, atan surrogate; a framework-native
                row, not the same network)

--net conv: SpikingJelly's Fashion-MNIST conv net (examples/fmnist_conv.snn: conv 128 + BN + IF,
maxpool, conv 128 + BN + IF, maxpool, fc 2048 + IF, fc 10 + IF; IF with the ATan surrogate, hard
reset to 0; batchnorm on the batch's statistics over T*B*H*W; T = 4, batch 64, the image fed
directly; snnc trains the example with its IF given the ATan surrogate, as the peers' IFNode,
from the hand peer's initial weights), the same loss and optimiser; peers sj (layer.Conv2d/BatchNorm2d/MaxPool2d, multi-step,
torch backend), hand (conv1 + BN of the static image once, the IF scans in tensor ops, the other
layers over all T*B rows at once) and hand-compile; snnTorch has no row there.

--device cuda: the same on a CUDA GPU (snnc --train --device=cuda; the peers' modules and data on
torch's CUDA device, each step synchronised before it is timed; peak device memory from
torch.cuda.max_memory_allocated for the peers). SpikingJelly's GPU neurons as peers too:
sj-cupy (0.0.0.0.14's backend='cupy' fused CUDA kernels, forward and backward; its package folder
in $SNN_SJ014_SITE) and sj-triton (2.0's Triton kernels, SJ_*_CUDA_IMPLEMENTATION=triton; its
folder in $SNN_SJ2_SITE); bench/gpu/train.sh runs it all on a lent GPU.

Each runs in a subprocess of its own (its peak RSS is its own), torch held to --threads threads.
Reported: images/s over the timed batches (every batch after the first), the test accuracy after
training (10,000 test images), peak RSS. Prints a table, writes the JSON with the host and
versions."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# SNNC: another build (the GPU machine runs one without LLVM: tools/gpu-check.sh prepare)
SNNC = Path(os.environ.get("SNNC", ROOT / "build" / "driver" / "snnc"))
T, BATCH, LR = 8, 128, 1e-3
NETS = {"mlp": (8, 128), "conv": (4, 64)}  # T, batch


def fmnist():
    """(train images [N, 1, 28, 28] f32 in [0, 1], labels), the same for the test set"""
    import gzip
    import numpy as np
    d = Path(os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist"))

    def load(split):
        arrays = []
        for n, off in ((f"{split}-images-idx3-ubyte", 16), (f"{split}-labels-idx1-ubyte", 8)):
            p = d / n
            raw = p.read_bytes() if p.exists() else gzip.open(str(p) + ".gz").read()
            arrays.append(np.frombuffer(raw, np.uint8, offset=off))
        return arrays[0].reshape(-1, 1, 28, 28).astype(np.float32) / 255.0, arrays[1].astype(np.int64)
    return load("train"), load("t10k")


# ---- the peers (run in a child: python3 train.py --child NAME) ----------------------------------

def child(name, images, epochs, threads, net="mlp", device="cpu", tta=None):
    global T, BATCH
    T, BATCH = NETS[net]
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = fmnist()
    dev = torch.device(device)
    xtr, ytr = torch.tensor(xtr[:images]).to(dev), torch.tensor(ytr[:images]).to(dev)
    xte, yte = torch.tensor(xte).to(dev), torch.tensor(yte).to(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    class SigmoidSpike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x >= 0).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x * 4.0)
            return g * (1.0 - s) * s * 4.0

    def lif(x_seq):
        v = torch.zeros_like(x_seq[0])
        out = []
        for t in range(x_seq.shape[0]):
            h = v + (x_seq[t] - v) / 2.0
            s = SigmoidSpike.apply(h - 1.0)
            v = s * 0.0 + (1.0 - s) * h
            out.append(s)
        return torch.stack(out)

    class ATanSpike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x >= 0).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 1.0 / (1.0 + (torch.pi / 2 * 2.0 * x) ** 2) * g

    def if_scan(x_seq):
        v = torch.zeros_like(x_seq[0])
        out = []
        for t in range(x_seq.shape[0]):
            h = v + x_seq[t]
            s = ATanSpike.apply(h - 1.0)
            v = s * 0.0 + (1.0 - s) * h
            out.append(s)
        return torch.stack(out)

    if name == "sj-cupy" and "int" not in np.__dict__:
        np.int = int  # 0.0.0.0.14 compares dtypes with np.int, which numpy 1.24 removed
    # (0.0.0.0.14 accepts backend='cupy' only from a neuron made multi-step)
    sj_kw = {"backend": "cupy", "step_mode": "m"} if name == "sj-cupy" else {}
    if net == "conv" and name in ("sj", "sj-cupy", "sj-triton"):
        from spikingjelly.activation_based import functional, layer, neuron, surrogate
        def ifn():
            return neuron.IFNode(surrogate_function=surrogate.ATan(), **sj_kw)
        net_ = nn.Sequential(
            layer.Conv2d(1, 128, 3, padding=1, bias=False), layer.BatchNorm2d(128), ifn(),
            layer.MaxPool2d(2, 2),
            layer.Conv2d(128, 128, 3, padding=1, bias=False), layer.BatchNorm2d(128), ifn(),
            layer.MaxPool2d(2, 2),
            layer.Flatten(), layer.Linear(128 * 7 * 7, 2048, bias=False), ifn(),
            layer.Linear(2048, 10, bias=False), ifn())
        functional.set_step_mode(net_, "m")

        def forward(x):
            functional.reset_net(net_)
            return net_(x.unsqueeze(0).repeat(T, 1, 1, 1, 1)).mean(0)
        params = net_.parameters()
        train_mode, eval_mode = net_.train, net_.eval
    elif net == "conv" and name in ("hand", "hand-compile"):
        c1, b1 = nn.Conv2d(1, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128)
        c2, b2 = nn.Conv2d(128, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128)
        f3, f4 = nn.Linear(128 * 7 * 7, 2048, bias=False), nn.Linear(2048, 10, bias=False)
        mods = nn.ModuleList([c1, b1, c2, b2, f3, f4])

        def fwd(x):
            B = x.shape[0]
            h = b1(c1(x))                                 # the static image: once
            s1 = if_scan(h.unsqueeze(0).expand(T, -1, -1, -1, -1))
            p1 = F.max_pool2d(s1.flatten(0, 1), 2)        # every layer after: all T*B rows
            s2 = if_scan(b2(c2(p1)).view(T, B, 128, 14, 14))
            p2 = F.max_pool2d(s2.flatten(0, 1), 2)
            s3 = if_scan(f3(p2.flatten(1)).view(T, B, 2048))
            s4 = if_scan(f4(s3.flatten(0, 1)).view(T, B, 10))
            return s4.mean(0)
        forward = torch.compile(fwd) if name == "hand-compile" else fwd
        params = mods.parameters()
        train_mode, eval_mode = mods.train, mods.eval
    elif net == "conv":
        raise SystemExit(f"no conv net for peer {name}")
    elif name in ("sj", "sj-cupy", "sj-triton"):
        from spikingjelly.activation_based import functional, layer, neuron
        mlp = nn.Sequential(layer.Flatten(), layer.Linear(784, 256), neuron.LIFNode(tau=2.0, **sj_kw),
                            layer.Linear(256, 10), neuron.LIFNode(tau=2.0, **sj_kw))
        functional.set_step_mode(mlp, "m")

        def forward(x):
            functional.reset_net(mlp)
            return mlp(x.unsqueeze(0).repeat(T, 1, 1, 1, 1)).mean(0)
        params = mlp.parameters()
    elif name in ("hand", "hand-compile"):
        fc1, fc2 = nn.Linear(784, 256), nn.Linear(256, 10)

        def fwd(x):
            h = fc1(x.flatten(1))                       # the static image: once
            s1 = lif(h.unsqueeze(0).expand(T, -1, -1))
            s2 = lif(fc2(s1))                           # over all T*B rows at once
            return s2.mean(0)
        forward = torch.compile(fwd) if name == "hand-compile" else fwd
        params = list(fc1.parameters()) + list(fc2.parameters())
    elif name == "snntorch":
        import snntorch as snn
        fc1, fc2 = nn.Linear(784, 256), nn.Linear(256, 10)
        l1, l2 = snn.Leaky(beta=0.5), snn.Leaky(beta=0.5)

        def forward(x):
            m1, m2 = l1.init_leaky(), l2.init_leaky()
            xf, rec = x.flatten(1), []
            for _ in range(T):
                s1, m1 = l1(fc1(xf), m1)
                s2, m2 = l2(fc2(s1), m2)
                rec.append(s2)
            return torch.stack(rec).mean(0)
        params = list(fc1.parameters()) + list(fc2.parameters()) + list(l1.parameters()) + \
            list(l2.parameters())
    else:
        raise SystemExit(f"unknown peer {name}")
    if net == "mlp":
        train_mode = eval_mode = lambda: None
    # the modules to the device (the peers' parameters and batchnorm's buffers)
    params = list(params)
    for v in list(locals().values()):
        if isinstance(v, nn.Module):
            v.to(dev)
    opt = torch.optim.Adam(params, lr=LR)
    # --tta: the training set shuffled each epoch (a seeded generator), the learning rate on a
    # cosine over the epochs (as snnc --schedule=cosine), the test accuracy after every epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs) if tta else None
    gen = torch.Generator().manual_seed(0)

    def test_accuracy():
        correct = 0
        eval_mode()
        with torch.no_grad():
            step = 1000 if net == "mlp" else BATCH
            for i in range(0, xte.shape[0], step):
                correct += int((forward(xte[i:i + step]).argmax(1) == yte[i:i + step]).sum())
        train_mode()
        return correct / xte.shape[0]

    train_mode()
    timed_images, timed = 0, 0.0
    first_batch = None
    trained, log, tta_s = 0.0, [], None
    for e in range(epochs):
        order = torch.randperm(images, generator=gen).to(dev) if tta else None
        for i in range(0, images, BATCH):
            if tta:
                x, y = xtr[order[i:i + BATCH]], ytr[order[i:i + BATCH]]
            else:
                x, y = xtr[i:i + BATCH], ytr[i:i + BATCH]
            sync()
            t0 = time.perf_counter()
            out = forward(x)
            loss = F.mse_loss(out, F.one_hot(y, 10).float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sync()
            dt = time.perf_counter() - t0
            trained += dt
            if first_batch is None:
                first_batch = dt
            else:
                timed += dt
                timed_images += x.shape[0]
        if tta:
            sched.step()
            acc = test_accuracy()
            log.append({"epoch": e + 1, "train_s": trained, "test_accuracy": acc})
            print(f"  epoch {e + 1}: test accuracy {acc:.4f}, {trained:.1f} s training",
                  file=sys.stderr, flush=True)
            if acc >= tta:
                tta_s = trained
                break
    acc = log[-1]["test_accuracy"] if log else test_accuracy()
    print(json.dumps({"images_per_s": timed_images / timed if timed else 0.0,
                      "first_batch_s": first_batch, "test_accuracy": acc,
                      "epochs_log": log, "tta_s": tta_s,
                      "loss": float(loss),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      "peak_device_mb": (torch.cuda.max_memory_allocated() / 2**20
                                         if dev.type == "cuda" else None)}))


# ---- the parent -------------------------------------------------------------------------------

def run_child(cmd, env=None, timeout=None):
    """the child's last stdout line as JSON, its wall time, and its peak RSS over its whole life
    as the kernel counted it (wait4's ru_maxrss, from start to exit: the same measure for every
    row, whatever the child reports of itself)"""
    import tempfile
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if timeout is not None and time.perf_counter() - t0 > timeout:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                return {"error": f"not finished in {timeout} s"}
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        stdout, stderr = fo.read(), fe.read()
    if p.returncode != 0:
        return {"error": (stderr or stdout).strip()[-600:]}
    out = json.loads(stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    out["reported_peak_rss_mb"] = out.get("peak_rss_mb")
    out["peak_rss_mb"] = ru.ru_maxrss / 1024.0
    return out


def conv_model_atan():
    """examples/fmnist_conv.snn with the peers' neuron: SpikingJelly's IFNode with the ATan
    surrogate, as its conv example trains it (the prelude's IF has IFNode's default, Sigmoid
    alpha 4: the same forward, another backward)"""
    text = (ROOT / "examples" / "fmnist_conv.snn").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("weights "))
    text = text.replace(" IF(", " IFA(")
    neuron = ("neuron IFA(v_th = 1.0, v_reset = 0.0) {\n  state v = v_reset\n  v = v + I\n"
              "  fire v >= v_th\n  reset v = v_reset\n  surrogate atan(alpha = 2.0)\n}\n")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"snnc-bench-fmnist-conv-atan-{os.getpid()}.snn"
    path.write_text(neuron + text + "\n")
    return path


def conv_init(path):
    """(a child) the conv net's initial weights as the `hand` peer draws them (torch.manual_seed(0),
    its layers made in the same order), by SpikingJelly's state_dict names, to safetensors at path:
    snnc starts from them, so that the rows' accuracies compare (the first steps' losses swing with
    the draw: 0.1, 0.84, 0.55, ... from this one)"""
    import torch
    import torch.nn as nn
    from safetensors.torch import save_file
    torch.manual_seed(0)
    c1, b1 = nn.Conv2d(1, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128)
    c2, b2 = nn.Conv2d(128, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128)
    f3, f4 = nn.Linear(128 * 7 * 7, 2048, bias=False), nn.Linear(2048, 10, bias=False)
    w = {}
    for name, m in (("conv_fc.0", c1), ("conv_fc.1", b1), ("conv_fc.4", c2), ("conv_fc.5", b2),
                    ("conv_fc.9", f3), ("conv_fc.11", f4)):
        for k, v in m.state_dict().items():
            if k != "num_batches_tracked":
                w[f"{name}.{k}"] = v.detach().clone().contiguous()
    save_file(w, path)


def run_snnc(images, epochs, threads, net="mlp", device="cpu", extra=(), timeout=None, tta=None):
    model = conv_model_atan() if net == "conv" else ROOT / "examples" / f"fmnist_{net}.snn"
    init = ["--init"]
    if net == "conv":
        # the hand peer's initial weights (made in a child: the parent imports no torch)
        path = model.with_suffix(".init.safetensors")
        r = subprocess.run([sys.executable, __file__, "--child", "conv-init", "--json", str(path)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            init = [f"--weights={path}"]
    cmd = [str(SNNC), "--train", "--device=cuda" if device == "cuda" else "--backend=cpu",
           str(model),
           *init, "--data=fashion-mnist", f"--limit={images}", f"--epochs={epochs}",
           f"--batch={BATCH}", "--optimizer=adam", f"--lr={LR}", "--loss=mse",
           *(["--schedule=cosine"] if tta else ["--no-shuffle"]),
           f"--threads={threads}", "-o", "/tmp/snnc-bench-train.safetensors", "--report=json",
           "-q", *extra]
    r = run_child(cmd, timeout=timeout)
    if net == "conv":
        model.unlink(missing_ok=True)
        model.with_suffix(".init.safetensors").unlink(missing_ok=True)
    if "error" in r:
        return r
    ep = r["epochs"]
    # --tta: the training seconds up to the first epoch at the accuracy (snnc runs every epoch)
    log, tta_s, trained = [], None, 0.0
    for e in ep:
        trained += e["seconds"]
        log.append({"epoch": e["epoch"], "train_s": trained, "test_accuracy": e["test_accuracy"]})
        if tta and tta_s is None and e["test_accuracy"] >= tta:
            tta_s = trained
    return {"images_per_s": sum(e["images_per_s"] for e in ep) / len(ep),
            "epochs_log": log, "tta_s": tta_s,
            "test_accuracy": ep[-1]["test_accuracy"], "loss": ep[-1]["loss"],
            "peak_rss_mb": r["peak_rss_mb"], "wall_s": r["wall_s"], "command": " ".join(cmd),
            "peak_device_mb": ep[-1].get("device_mb") if device == "cuda" else None,
            "phases": ep[-1].get("phases")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", choices=sorted(NETS), default="mlp")
    ap.add_argument("--images", type=int, default=60000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--only", default="snnc,sj,hand,hand-compile,snntorch")
    ap.add_argument("--json", default=None)
    ap.add_argument("--snnc-args", default="", help="more arguments for snnc, e.g. --test-limit=N")
    ap.add_argument("--timeout", type=float, default=None, help="seconds each row may take")
    ap.add_argument("--tta", type=float, default=None,
                    help="time to this test accuracy: every row trains up to --epochs epochs "
                         "(shuffled, a cosine learning rate), tested after each, and reports the "
                         "training seconds to the first epoch at or past it")
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    global T, BATCH
    T, BATCH = NETS[a.net]
    if a.net == "conv" and a.only == ap.get_default("only"):
        a.only = "snnc,sj,hand,hand-compile"
    # whole batches only: a last, smaller batch would make torch.compile compile again inside
    # the timed loop (dynamic shapes), which no user's epoch pays more than once
    a.images -= a.images % BATCH
    if a.child == "conv-init":
        conv_init(a.json)
        return
    if a.child:
        child(a.child, a.images, a.epochs, a.threads, a.net, a.device, a.tta)
        return
    # the parent imports no torch: a child's peak RSS (ru_maxrss) keeps the parent's high-water
    # mark across fork and exec, so the parent stays small
    vers = {"python": platform.python_version()}
    for pkg in ("torch", "spikingjelly", "snntorch"):
        try:
            import importlib.metadata as md
            vers[pkg] = md.version(pkg)
        except Exception:
            pass
    cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    res = {"date": datetime.date.today().isoformat(), "host": cpu.group(1) if cpu else "?",
           "device": a.device,
           "cpus": os.cpu_count(), "threads": a.threads, "net": a.net, "images": a.images, "epochs": a.epochs,
           "tta": a.tta,
           "batch": BATCH, "T": T, "versions": vers, "rows": {}}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    for name in a.only.split(","):
        if name == "snnc":
            r = run_snnc(a.images, a.epochs, a.threads, a.net, a.device, a.snnc_args.split(),
                         a.timeout, a.tta)
        else:
            cenv = dict(env)
            site = {"sj-cupy": "SNN_SJ014_SITE", "sj-triton": "SNN_SJ2_SITE",
                    "sj": "SNN_SJ2_SITE"}.get(name)
            if site and os.environ.get(site):
                cenv["PYTHONPATH"] = os.pathsep.join(
                    [os.environ[site]] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            if name == "sj-triton":
                cenv["SJ_LIF_CUDA_IMPLEMENTATION"] = cenv["SJ_IF_CUDA_IMPLEMENTATION"] = "triton"
            r = run_child([sys.executable, __file__, "--child", name, "--images", str(a.images),
                           "--epochs", str(a.epochs), "--threads", str(a.threads),
                           "--net", a.net, "--device", a.device,
                           *(["--tta", str(a.tta)] if a.tta else [])], cenv, a.timeout)
        res["rows"][name] = r
        dev_mb = r.get("peak_device_mb")
        print(f"{name:14s} " + (r["error"] if "error" in r else
              f"{r['images_per_s']:10.0f} images/s  test accuracy {r['test_accuracy']:.4f}  "
              f"peak RSS {r['peak_rss_mb']:.0f} MB" +
              (f"  device {dev_mb:.0f} MiB" if dev_mb else "") +
              (("  to %.4f: %s" % (a.tta, "%.2f s training" % r["tta_s"] if r.get("tta_s")
                                   is not None else "not reached")) if a.tta else "")),
              flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    rows = res["rows"]
    if "snnc" in rows and "images_per_s" in rows["snnc"]:
        s = rows["snnc"]["images_per_s"]
        for k, r in rows.items():
            if k != "snnc" and "images_per_s" in r and r["images_per_s"] > 0:
                print(f"snnc / {k}: {s / r['images_per_s']:.2f}x images/s")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
