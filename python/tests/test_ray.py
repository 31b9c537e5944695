"""snnc.ray.predict: a model.so over a Ray Dataset on a local Ray cluster (over loopback, 2
actors, one session each) gives every row the outputs a single session gives, bit for bit, with
the rows shuffled and split into batches by Ray: the Poisson encoder's draws follow each row's
id. Needs ray[data] (tools/install-python-deps.sh --tests installs it), and $SNNC or a built
snnc in the checkout."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

import snnc

ray = pytest.importorskip("ray")  # tools/install-python-deps.sh installs it: CI runs these
import snnc.ray as sray  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray")
    src = ROOT / "examples" / "poisson.snn"
    for args in (["--emit=weights", "-o", d / "w.safetensors"],
                 [f"--weights={d / 'w.safetensors'}", "--cuda-arch=none", "-o", d / "p.so"]):
        r = subprocess.run([snnc.find_snnc(), str(src), *map(str, args)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
    return d / "p.so"


@pytest.fixture(scope="module")
def cluster():
    # four logical CPUs on this machine's two: the 2 actors hold two, the reads and the shuffle
    # need others (with two, Ray Data waits forever)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             configure_logging=False, ignore_reinit_error=True)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def test_predict_equals_one_session(lib, cluster):
    n = 300
    x = np.random.default_rng(0).uniform(0, 1, (n, 1, 28, 28)).astype(np.float32)
    with snnc.load(lib, device="cpu") as m:
        want = m.run(x)
    assert np.abs(want["encoded"]).sum() > 0
    ds = ray.data.from_items([{"id": i, "image": x[i]} for i in range(n)])
    ds = ds.random_shuffle(seed=1)  # batches of ids in no order: each row keyed by its own id
    out = sray.predict(ds, lib, concurrency=2, batch_size=32).take_all()
    assert len(out) == n
    got = {int(r["id"]): r for r in out}
    assert sorted(got) == list(range(n))
    for k in want:
        a = np.stack([np.asarray(got[i][k], np.float32) for i in range(n)])
        assert np.array_equal(a, want[k]), k
    # the same rows without their ids' order kept would differ: the ids matter
    with snnc.load(lib, device="cpu") as m:
        shifted = m.run(x, first_sample=1)
    assert not np.array_equal(shifted["encoded"], want["encoded"])
