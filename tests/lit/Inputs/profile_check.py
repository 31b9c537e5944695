"""profile.test's checks: each profiled unit's FLOP count, and the profiled run's spike counts and
outputs against the plain run's (bit for bit)."""
import json
import sys

import numpy as np

plain, prof = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
for u in prof["profile"]:
    assert u["seconds"] >= 0 and u["bytes"] > 0, u
    print("+".join(u["kernels"]), "flops", u["flops"])
a, b = np.load(sys.argv[3]), np.load(sys.argv[4])
same = sorted(a.files) == sorted(b.files) and all(
    a[k].tobytes() == b[k].tobytes() and a[k].shape == b[k].shape for k in a.files)
print("spike counts", "equal" if plain["spike_counts"] == prof["spike_counts"] else "differ",
      end=", ")
print("outputs", "equal" if same else "differ")
