"""Three classes of per-step inputs [N, T, 12]: each class a fixed random template, each sample the
template plus noise; labels [N]. Usage: make_classes.py PREFIX (writes PREFIX.x.npy, PREFIX.y.npy)"""
import sys
import numpy as np

r = np.random.default_rng(11)
templates = r.uniform(0, 1.2, (3, 6, 12)).astype(np.float32)
y = np.arange(240) % 3
x = templates[y] + r.normal(0, 0.15, (240, 6, 12)).astype(np.float32)
np.save(sys.argv[1] + ".x.npy", x.astype(np.float32))
np.save(sys.argv[1] + ".y.npy", y.astype(np.float32))
