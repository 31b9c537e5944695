"""snnc.plot on a Model's recordings (compile(..., record=[...])) and on snnc.train's report: each
function draws (Agg backend: the figure has artists), and the recordings equal `snnc --run
--record`'s file bit for bit. Skipped where matplotlib is not installed."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

import snnc

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


@pytest.fixture(scope="module")
def recorded():
    x = np.random.default_rng(4).uniform(0, 1, (6, 1, 28, 28)).astype(np.float32)
    with snnc.compile(EX / "fmnist_mlp.snn", cuda_arch="none", record=["s1", "s1.v", "fc2"]) as m:
        yield m, x, m.run(x, record=True)


def test_recordings_equal_the_command_line(recorded, tmp_path):
    m, x, rec = recorded
    assert list(m.recorded) == ["s1", "s1.v", "fc2"]
    assert set(rec) == {"rate", "s1", "s1.v", "fc2"}
    assert rec["s1"].dtype == np.uint8 and rec["s1"].shape == (6, 8, 256)
    assert rec["s1.v"].dtype == np.float32 and rec["fc2"].shape == (6, 8, 10)
    assert rec["s1"].any()
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([snnc.find_snnc(), "--run", "-q", "--backend=cpu", EX / "fmnist_mlp.snn",
                        f"--input={tmp_path / 'x.npy'}", "--record=s1,s1.v,fc2",
                        f"--record-file={tmp_path / 'r.npz'}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "r.npz") as z:
        for k in ("s1", "s1.v", "fc2"):
            assert z[k].dtype == rec[k].dtype and z[k].tobytes() == rec[k].tobytes()
    # the model's own output is unchanged by recording; __call__ still returns it alone
    assert np.array_equal(m(x), rec["rate"])
    assert set(m.run(x)) == {"rate", "rec_s1", "rec_s1__v", "rec_fc2"}
    with pytest.raises(ValueError, match="'s2' is not recorded"):
        m.run(x, record=["s2"])


def test_load_names_the_recordings(recorded, tmp_path):
    so = tmp_path / "r.so"
    r = subprocess.run([snnc.find_snnc(), EX / "fmnist_mlp.snn", "-o", so, "-q",
                        "--cuda-arch=none", "--record=s2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with snnc.load(so, record=["s2"]) as m:
        assert m.run(recorded[1], record=True)["s2"].shape == (6, 8, 10)
    with pytest.raises(ValueError, match="records no 's1'"):
        snnc.load(so, record=["s1"])


def drawn(ax):
    """the axes hold data artists, and the figure renders"""
    ax.figure.canvas.draw()
    return len(ax.lines) + len(ax.collections) + len(ax.patches) > 0


def test_raster_rates_trace(recorded):
    _, _, rec = recorded
    ax = snnc.plot.raster(rec["s1"], sample=1)
    assert drawn(ax) and "sample 1" in ax.get_title() and "256 neurons" in ax.get_title()
    assert ax.collections and ax.get_xlabel() == "time step"
    ax = snnc.plot.raster(rec["s1"][0], sample=None, max_neurons=100)
    assert "every 3rd of 256 neurons (86 shown)" in ax.get_title()
    ax = snnc.plot.rates(rec["s1"])
    assert drawn(ax) and len(ax.patches) == 20 and "256 neurons" in ax.get_title()
    ax = snnc.plot.trace(rec["s1.v"], threshold=1.0)
    assert drawn(ax) and len(ax.lines) == 6  # five neurons and the threshold
    fig, ax = plt.subplots()
    assert snnc.plot.trace(rec["fc2"], neurons=[0, 9], ax=ax) is ax and len(ax.lines) == 2
    with pytest.raises(ValueError, match="sample 6: the recording has 6 samples"):
        snnc.plot.raster(rec["s1"], sample=6)
    plt.close("all")


def test_curves(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    x = (rng.uniform(0, 0.5, (64, 6, 12)) + y[:, None, None] * np.r_[np.ones(6), np.zeros(6)])
    (tmp_path / "c.snn").write_text(
        "model c {\n  timesteps 6\n  seed 3\n  input x : f32[T, 12]\n  h = dense(x, 16)\n"
        "  s = LIF(h, tau = 2.0)\n  o = dense(s, 2)\n  s2 = LIF(o, tau = 2.0)\n"
        "  output rate = mean(s2)\n}\n")
    report = snnc.train(tmp_path / "c.snn", out=tmp_path / "w.safetensors", inputs=x.astype(np.float32),
                        labels=y, epochs=3, batch=16, lr=0.01)
    top, bottom = snnc.plot.curves(report)
    assert drawn(top) and drawn(bottom)
    assert len(top.lines[0].get_xdata()) == 3 and bottom.get_ylabel() == "accuracy"
    plt.close("all")


def test_missing_matplotlib(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        snnc.plot.rates(np.zeros((1, 2, 3)))
