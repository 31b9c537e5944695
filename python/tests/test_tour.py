"""examples/python/tour.py, the notebook-style tour, in its quick form: a trained SpikingJelly
model and an snnTorch model trained there, compiled by snnc and run on torch tensors, give the
frameworks' outputs (it exits non-zero otherwise); the conv example trains from a PyTorch loop
(the loss falls); its spikes are plotted (PNG files with content). Needs Fashion-MNIST
(tools/install-deps.sh installs the Debian package) and the frameworks (install-python-deps.sh
--tests)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("spikingjelly.activation_based")
pytest.importorskip("snntorch")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]


def test_tour(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "tour.py"), "--quick",
                        "--out", str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1. SpikingJelly MLP (trained): snnc's outputs equal SpikingJelly's" in r.stdout
    assert "snnc's spikes equal snnTorch's" in r.stdout
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", r.stdout)
    assert m and float(m.group(2)) < float(m.group(1)), r.stdout
    import matplotlib.image as mpimg
    for name in ("raster_s1.png", "rates_s1.png"):
        img = mpimg.imread(tmp_path / name)
        assert img.shape[0] >= 200 and img.shape[1] >= 300
        assert float(np.std(img[..., :3])) > 0.05  # drawn on, not blank
