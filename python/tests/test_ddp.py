"""Data-parallel training of an snnc-compiled network with torch.distributed: snnc.torch.Module
under DistributedDataParallel, 2 processes on the gloo backend over loopback, each training on
its half of every batch, end with the weights a single process gets training on the whole
batches (to float rounding: DDP averages the two halves' gradients, the single process sums the
whole batch's in another order). Needs torch, and $SNNC or a built snnc in the checkout."""
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

import snnc

torch = pytest.importorskip("torch")  # tools/install-python-deps.sh installs it: CI runs these
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

MODEL = """model ddp {
  timesteps 4
  input x : f32[12]
  h = LIF(dense(x, 32), tau = 2.0, v_th = 0.5)
  o = LIF(dense(h, 3), tau = 2.0, v_th = 0.3)
  output rate = mean(o)
}
"""
STEPS, BATCH = 4, 16


def batches():
    r = np.random.default_rng(11)
    x = r.uniform(0, 1.5, (STEPS, BATCH, 12)).astype(np.float32)
    y = r.integers(0, 3, (STEPS, BATCH))
    return x, y


def initial(names_shapes):
    g = torch.Generator().manual_seed(5)
    return {k: torch.randn(s, generator=g) * 0.4 for k, s in names_shapes}


def train(lib, rank, world):
    import snnc.torch as st
    F = torch.nn.functional
    m = snnc.load(lib, device="cpu", max_batch=BATCH)
    net = st.Module(m, threads=1)
    with torch.no_grad():
        start = initial([(k, p.shape) for k, p in net.named_parameters()])
        for k, p in net.named_parameters():
            p.copy_(start[k])
    model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = batches()
    per = BATCH // world
    for s in range(STEPS):
        xs = torch.from_numpy(x[s, rank * per:(rank + 1) * per])
        ys = torch.from_numpy(y[s, rank * per:(rank + 1) * per])
        loss = F.mse_loss(model(xs), F.one_hot(ys, 3).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = {k: v.detach().clone() for k, v in net.state_dict().items()}
    m.close()
    return out


def worker(rank, world, lib, port, out_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        w = train(lib, rank, world)
        torch.save(w, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_equal_one(tmp_path):
    src = tmp_path / "ddp.snn"
    src.write_text(MODEL)
    lib = tmp_path / "ddp_train.so"
    r = subprocess.run([snnc.find_snnc(), "--train", str(src), "--cuda-arch=none", "-o",
                        str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    mp.start_processes(worker, args=(2, str(lib), free_port(), str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    w0, w1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    one = train(str(lib), 0, 1)
    start = initial([(k, v.shape) for k, v in one.items()])
    for k in one:
        assert torch.equal(w0[k], w1[k]), k  # the ranks agree exactly
        assert not torch.equal(one[k], start[k]), k  # training moved it
        torch.testing.assert_close(w0[k], one[k], rtol=1e-5, atol=1e-6, msg=k)
