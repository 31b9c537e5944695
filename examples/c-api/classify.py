#!/usr/bin/env python3
"""Classify Fashion-MNIST test images with a model.so built by snnc, from Python through ctypes and
numpy only (the C ABI is runtime/snn.h; nothing of snnc is needed at run time).

    snnc examples/fmnist_mlp.snn -o fmnist_mlp.so
    python3 examples/c-api/classify.py ./fmnist_mlp.so [DATA_DIR] [--limit N] [--batch B]

DATA_DIR holds t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (default: $SNN_DATA_DIR,
then /usr/share/datasets/fashion-mnist). Prints the accuracy, images/s and spikes per layer."""
import argparse
import ctypes as C
import gzip
import os
import sys
import time

import numpy as np

SNN_OK = 0
SNN_MAX_RANK = 8


class TensorInfo(C.Structure):
    _fields_ = [("name", C.c_char_p), ("dtype", C.c_int), ("per_step", C.c_int),
                ("rank", C.c_int), ("dims", C.c_int64 * SNN_MAX_RANK), ("numel", C.c_int64)]


class Model:
    """A model.so: its description, and a session that runs batches of float32 arrays."""

    def __init__(self, path, max_batch, threads=0):
        self.lib = lib = C.CDLL(os.path.abspath(path))
        lib.snn_last_error.restype = C.c_char_p
        lib.snn_model_get.restype = C.c_void_p
        lib.snn_model_name.restype = C.c_char_p
        lib.snn_model_name.argtypes = [C.c_void_p]
        for f in ("snn_model_timesteps", "snn_model_num_inputs", "snn_model_num_outputs",
                  "snn_model_num_layers"):
            getattr(lib, f).argtypes = [C.c_void_p]
        lib.snn_model_layer_name.restype = C.c_char_p
        lib.snn_model_layer_name.argtypes = [C.c_void_p, C.c_int]
        for f in ("snn_model_input", "snn_model_output"):
            getattr(lib, f).argtypes = [C.c_void_p, C.c_int, C.POINTER(TensorInfo)]
        lib.snn_session_create.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.c_int,
                                           C.POINTER(C.c_void_p)]
        lib.snn_session_destroy.argtypes = [C.c_void_p]
        lib.snn_run.argtypes = [C.c_void_p, C.c_int64, C.c_int, C.POINTER(C.c_void_p),
                                C.POINTER(C.c_void_p)]
        lib.snn_session_spike_counts.argtypes = [C.c_void_p, C.POINTER(C.c_double), C.c_int]

        self.model = lib.snn_model_get()
        if not self.model:
            raise RuntimeError(lib.snn_last_error().decode())
        self.name = lib.snn_model_name(self.model).decode()
        self.timesteps = lib.snn_model_timesteps(self.model)
        self.inputs = [self._info(lib.snn_model_input, i)
                       for i in range(lib.snn_model_num_inputs(self.model))]
        self.outputs = [self._info(lib.snn_model_output, i)
                        for i in range(lib.snn_model_num_outputs(self.model))]
        self.layers = [lib.snn_model_layer_name(self.model, i).decode()
                       for i in range(lib.snn_model_num_layers(self.model))]
        self.session = C.c_void_p()
        self._check(lib.snn_session_create(self.model, b"cpu", max_batch, threads,
                                           C.byref(self.session)))

    def _info(self, fn, i):
        info = TensorInfo()
        self._check(fn(self.model, i, C.byref(info)))
        shape = ([self.timesteps] if info.per_step else []) + list(info.dims[:info.rank])
        return info.name.decode(), tuple(shape)

    def _check(self, status):
        if status != SNN_OK:
            raise RuntimeError(self.lib.snn_last_error().decode())

    def run(self, first_sample, *arrays):
        """Run one batch: one array per input, [batch, *shape]; returns one array per output."""
        batch = arrays[0].shape[0]
        ins = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        for a, (name, shape) in zip(ins, self.inputs):
            if a.shape[1:] != shape:
                raise ValueError(f"input {name}: shape {a.shape[1:]}, the model wants {shape}")
        outs = [np.empty((batch,) + shape, dtype=np.float32) for _, shape in self.outputs]
        in_ptrs = (C.c_void_p * len(ins))(*[a.ctypes.data for a in ins])
        out_ptrs = (C.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
        self._check(self.lib.snn_run(self.session, first_sample, batch, in_ptrs, out_ptrs))
        return outs

    def spike_counts(self):
        counts = (C.c_double * len(self.layers))()
        self._check(self.lib.snn_session_spike_counts(self.session, counts, len(self.layers)))
        return dict(zip(self.layers, counts))

    def close(self):
        if self.session:
            self.lib.snn_session_destroy(self.session)
            self.session = C.c_void_p()


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("data_dir", nargs="?", default=os.environ.get("SNN_DATA_DIR")
                    or "/usr/share/datasets/fashion-mnist")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()

    images = read_idx(os.path.join(a.data_dir, "t10k-images-idx3-ubyte.gz"), 16)
    labels = read_idx(os.path.join(a.data_dir, "t10k-labels-idx1-ubyte.gz"), 8)
    images = images.reshape(-1, 1, 28, 28).astype(np.float32) / np.float32(255)  # as ToTensor
    n = len(labels) if a.limit is None else min(a.limit, len(labels))
    m = Model(a.model, a.batch, a.threads)
    if m.outputs[0][1] != (10,):
        sys.exit(f"classify.py: model {m.name} does not give 10 scores per image")
    correct, seconds = 0, 0.0
    for b0 in range(0, n, a.batch):
        x = images[b0:min(n, b0 + a.batch)].reshape((-1,) + m.inputs[0][1])
        t0 = time.perf_counter()
        scores, = m.run(b0, x)
        seconds += time.perf_counter() - t0
        correct += int((scores.argmax(axis=1) == labels[b0:b0 + len(x)]).sum())
    print(f"model {m.name}: {n} images, T = {m.timesteps}, batch {a.batch}")
    print(f"accuracy {correct / n:.4f} ({correct}/{n})")
    print(f"{n / seconds:.0f} images/s")
    for layer, count in m.spike_counts().items():
        print(f"spikes {layer}: {count:.0f}")
    m.close()


if __name__ == "__main__":
    main()
