"""snnc.plot: figures of a Model's recordings and of snnc.train's report, on matplotlib (imported
when a function is called: the rest of the package does not need it). The same figures as
`snnc --plot=DIR` draws as SVG: a spike raster, a histogram of firing rates, traces of a few
neurons, and the loss and accuracies per epoch. Each function draws into `ax` (a new figure's
axes when None) and returns the axes.

    m = snnc.compile("model.snn", record=["s1", "s1.v"])
    rec = m.run(x, record=True)            # {"rate": ..., "s1": [N, T, 256] uint8, "s1.v": ...}
    snnc.plot.raster(rec["s1"], sample=0)
    snnc.plot.rates(rec["s1"])
    snnc.plot.trace(rec["s1.v"], threshold=1.0)
    snnc.plot.curves(snnc.train("model.snn", out="w.safetensors", inputs=x, labels=y, epochs=5))
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["raster", "rates", "trace", "curves"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("snnc.plot draws with matplotlib, which is not installed "
                          "(pip install matplotlib)") from None
    return plt


def _axes(ax, height=4.5):
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots(figsize=(8, height))
    return ax


def _ordinal(k: int) -> str:
    return "th" if k % 100 // 10 == 1 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")


def _one_sample(a, sample):
    """[N, T, ...] (as Model.run returns recordings) -> sample's [T, neurons]; sample=None: a
    is one sample's [T, ...] already"""
    a = np.asarray(a)
    if sample is not None:
        if a.ndim < 2:
            raise ValueError(f"expected a recording [N, T, ...], got shape {a.shape}")
        if not 0 <= sample < a.shape[0]:
            raise ValueError(f"sample {sample}: the recording has {a.shape[0]} samples")
        a = a[sample]
    if a.ndim < 1:
        raise ValueError(f"expected [T, ...] for one sample, got shape {a.shape}")
    return a.reshape(a.shape[0], -1)


def raster(spikes, *, sample: int | None = 0, ax=None, title: str | None = None,
           max_neurons: int = 400):
    """Time step on x, neuron on y, a mark per spike (-1 spikes in red). spikes: [N, T, ...] (a
    recording) drawn for one sample, or with sample=None one sample's [T, ...]. Past max_neurons
    neurons every k-th is drawn, as the title says."""
    a = _one_sample(spikes, sample)
    T, n = a.shape
    stride = max(1, math.ceil(n / max_neurons))
    idx = np.arange(0, n, stride)
    ax = _axes(ax)
    sub = a[:, idx].astype(np.float32)
    for sign, colour in ((1, "black"), (-1, "tab:red")):
        t, i = np.nonzero(sub * sign > 0)
        if len(t):
            # few steps: a dash along time per spike (as the SVG's cells); many: a tick
            ax.scatter(t, idx[i], marker="_" if T <= 64 else "|",
                       s=max(4.0, 4000.0 / (T if T <= 64 else len(idx))), color=colour,
                       linewidths=1)
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(-0.5, n - 0.5)
    ax.set_xlabel("time step")
    ax.set_ylabel("neuron")
    which = f"sample {sample}" if sample is not None else "one sample"
    shown = (f"{n} neurons" if stride == 1
             else f"every {stride}{_ordinal(stride)} of {n} neurons ({len(idx)} shown)")
    ax.set_title(title or f"spikes of {which}, {shown}")
    return ax


def rates(spikes, *, ax=None, bins: int = 20, title: str | None = None):
    """A histogram of each neuron's firing rate (spikes per step, over every sample and step).
    spikes: [N, T, ...]."""
    a = np.asarray(spikes)
    if a.ndim < 2:
        raise ValueError(f"expected a recording [N, T, ...], got shape {a.shape}")
    r = np.abs(a.reshape(a.shape[0] * a.shape[1], -1).astype(np.float64)).mean(axis=0)
    hi = next((v for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0) if r.max(initial=0) <= v), 1.0)
    ax = _axes(ax)
    ax.hist(r, bins=bins, range=(0, hi), color="tab:blue", edgecolor="white")
    ax.set_xlabel("firing rate (spikes per neuron per step)")
    ax.set_ylabel("neurons")
    ax.set_title(title or f"firing rates of {r.size} neurons over {a.shape[0]} samples x "
                          f"{a.shape[1]} steps (mean {r.mean():.4g})")
    return ax


def trace(values, *, sample: int | None = 0, neurons=5, threshold: float | None = None, ax=None,
          title: str | None = None):
    """A state (or any value) at every step for a few neurons: neurons is how many (evenly
    spaced over the layer) or which indices; threshold draws a dashed line. values: [N, T, ...],
    or with sample=None one sample's [T, ...]."""
    a = _one_sample(values, sample)
    T, n = a.shape
    if isinstance(neurons, int):
        k = min(neurons, n)
        idx = [j * n // k for j in range(k)]
    else:
        idx = [int(i) for i in neurons]
        if any(not 0 <= i < n for i in idx):
            raise ValueError(f"neurons {idx}: the layer has {n}")
    ax = _axes(ax)
    for i in idx:
        ax.plot(np.arange(T), a[:, i], marker="o" if T <= 64 else None, markersize=3,
                label=f"neuron {i}")
    if threshold is not None:
        ax.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold = {threshold:g}")
    ax.set_xlabel("time step")
    ax.set_ylabel("value")
    ax.legend(loc="best", fontsize="small")
    which = f"sample {sample}" if sample is not None else "one sample"
    ax.set_title(title or f"{len(idx)} neurons, {which}")
    return ax


def curves(report, *, axes=None, title: str | None = None):
    """The loss and the train (and test) accuracy per epoch. report: what snnc.train returns
    ({"epochs": [...]}), or its list of epochs (dicts with "epoch", "loss", "train_accuracy",
    "test_accuracy"; a negative test accuracy: none). axes: two axes, or None for a new figure.
    Returns the two axes."""
    epochs = report["epochs"] if isinstance(report, dict) else list(report)
    if not epochs:
        raise ValueError("curves: the report has no epochs")
    e = [d["epoch"] for d in epochs]
    if axes is None:
        fig, axes = _pyplot().subplots(2, 1, figsize=(8, 7), sharex=True)
        fig.suptitle(title or f"training: epochs {e[0]} to {e[-1]}")
    top, bottom = axes
    top.plot(e, [d["loss"] for d in epochs], marker="o", label="loss")
    top.set_ylabel("loss (training, mean)")
    top.legend(loc="best")
    bottom.plot(e, [d["train_accuracy"] for d in epochs], marker="o", label="train")
    test = [(d["epoch"], d["test_accuracy"]) for d in epochs if d.get("test_accuracy", -1) >= 0]
    if test:
        bottom.plot(*zip(*test), marker="o", label="test")
    bottom.set_ylim(0, 1)
    bottom.set_xlabel("epoch")
    bottom.set_ylabel("accuracy")
    bottom.legend(loc="best")
    return top, bottom
