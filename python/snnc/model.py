"""Model: a compiled model.so, loaded and run on numpy arrays through its C ABI."""
from __future__ import annotations

import ctypes as C
import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from . import _abi


class SnncError(RuntimeError):
    """An error reported by snnc or by a model.so (its status and snn_last_error's message)."""

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Tensor:
    """An input, output or weight of a model: its name and the shape of one sample (with T first
    where the tensor has one slice a timestep), or a weight's shape."""
    name: str
    shape: tuple
    per_step: bool


class Model:
    """A model.so built by snnc, with one session (memory, threads, weights) to run it.

    >>> m = snnc.load("fmnist_mlp.so")
    >>> rate = m(images)                       # [N, 784] float32 -> [N, 10]
    >>> out = m.run({"image": images})         # every output, by name
    """

    def __init__(self, path: str | os.PathLike, *, device: str = "auto", max_batch: int = 256,
                 threads: int = 0, weights: str | os.PathLike | dict | None = None, _owned=None):
        self.path = os.fspath(path)
        self._owned = _owned  # a temporary folder compile() made, removed by close()
        self._session = None
        if not isinstance(max_batch, int) or not 1 <= max_batch <= _abi.SNN_MAX_BATCH:
            raise ValueError(f"max_batch must be an integer from 1 to {_abi.SNN_MAX_BATCH}, "
                             f"got {max_batch!r}")
        if not isinstance(threads, int) or not 0 <= threads <= _abi.SNN_MAX_THREADS:
            raise ValueError(f"threads must be an integer from 0 (all cores) to "
                             f"{_abi.SNN_MAX_THREADS}, got {threads!r}")
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"{self.path}: no such model.so (build one with "
                                    f"`snnc MODEL.snn -o MODEL.so` or snnc.compile)")
        try:
            self._lib = _abi.bind(C.CDLL(os.path.abspath(self.path)))
        except OSError as e:
            raise SnncError(f"{self.path}: cannot be loaded as a shared library: {e}") from None
        except AttributeError as e:
            raise SnncError(f"{self.path}: not a model.so built by snnc ({e})") from None
        lib = self._lib
        abi = lib.snn_abi_version()
        if abi != _abi.ABI_VERSION:
            raise SnncError(f"{self.path}: C ABI version {abi}, this package speaks "
                            f"{_abi.ABI_VERSION} (rebuild the model with this snnc)")
        self._m = lib.snn_model_get()
        if not self._m:
            raise SnncError(f"{self.path}: {self._error()}")
        self.name = lib.snn_model_name(self._m).decode()
        self.timesteps = lib.snn_model_timesteps(self._m)
        self.inputs = {t.name: t for t in self._tensors(lib.snn_model_input,
                                                        lib.snn_model_num_inputs(self._m))}
        self.outputs = {t.name: t for t in self._tensors(lib.snn_model_output,
                                                         lib.snn_model_num_outputs(self._m))}
        self.weights = {t.name: t for t in self._tensors(lib.snn_model_weight,
                                                         lib.snn_model_num_weights(self._m))}
        self.layers = [lib.snn_model_layer_name(self._m, i).decode()
                       for i in range(lib.snn_model_num_layers(self._m))]
        self.devices = lib.snn_model_devices(self._m).decode().split(",")
        self.max_batch = max_batch
        s = C.c_void_p()
        self._check(lib.snn_session_create(self._m, device.encode(), max_batch, threads,
                                           C.byref(s)), f"session on '{device}'")
        self._session = s
        self.device = lib.snn_session_device(s).decode()
        self.threads = lib.snn_session_threads(s)
        if weights is not None:
            self.load_weights(weights)

    # ---- description ----

    def _tensors(self, fn, n):
        out = []
        for i in range(n):
            info = _abi.TensorInfo()
            self._check(fn(self._m, i, C.byref(info)), "model description")
            dims = tuple(info.dims[:info.rank])
            shape = ((self.timesteps,) if info.per_step else ()) + dims
            out.append(Tensor(info.name.decode(), shape, bool(info.per_step)))
        return out

    def __repr__(self):
        ins = ", ".join(f"{t.name}{list(t.shape)}" for t in self.inputs.values())
        outs = ", ".join(f"{t.name}{list(t.shape)}" for t in self.outputs.values())
        where = self.device if self._session is not None else "closed"
        return f"<snnc.Model {self.name} T={self.timesteps} ({ins}) -> ({outs}) on {where}>"

    # ---- errors ----

    def _error(self):
        msg = self._lib.snn_last_error()
        return msg.decode(errors="replace") if msg else "unknown error"

    def _check(self, status, what):
        if status != _abi.SNN_OK:
            name = _abi.STATUS.get(status, f"status {status}")
            raise SnncError(f"{self.name if hasattr(self, 'name') else self.path}: {what}: "
                            f"{self._error()} ({name})", name)

    def _live(self):
        if self._session is None:
            raise SnncError(f"{self.name}: the model is closed")
        return self._session

    # ---- running ----

    def run(self, x, first_sample: int = 0) -> dict:
        """Runs every sample of the inputs and returns every output, by name, as float32 arrays
        of [N, *shape]. x: one array (a model of one input) or a dict name -> array, each
        [N, *shape] of the input's shape (T first for per-step inputs), or [*shape] for a single
        sample; torch CPU tensors work too. Contiguous float32 arrays are read in place; others
        are converted once. Samples run max_batch at a time; first_sample numbers the first one
        (the Poisson encoder's draws depend on it, so results do not depend on the batching)."""
        session = self._live()
        arrays, n = self._inputs(x)
        if not isinstance(first_sample, int) or first_sample < 0:
            raise ValueError(f"first_sample must be a non-negative integer, got {first_sample!r}")
        outs = {name: np.empty((n,) + t.shape, np.float32) for name, t in self.outputs.items()}
        in_ptrs = (C.c_void_p * len(arrays))()
        out_ptrs = (C.c_void_p * len(outs))()
        for start in range(0, n, self.max_batch):
            b = min(self.max_batch, n - start)
            for i, a in enumerate(arrays):
                in_ptrs[i] = a[start:start + b].ctypes.data
            for i, o in enumerate(outs.values()):
                out_ptrs[i] = o[start:start + b].ctypes.data
            self._check(self._lib.snn_run(session, first_sample + start, b, in_ptrs, out_ptrs),
                        f"samples {first_sample + start}..{first_sample + start + b - 1}")
        return outs

    def __call__(self, x, first_sample: int = 0):
        """run(), returning the output itself where the model has one."""
        outs = self.run(x, first_sample)
        return next(iter(outs.values())) if len(outs) == 1 else outs

    def _inputs(self, x):
        specs = list(self.inputs.values())
        if not isinstance(x, dict):
            if len(specs) != 1:
                raise ValueError(f"{self.name} has {len(specs)} inputs "
                                 f"({', '.join(self.inputs)}): pass a dict of arrays by name")
            x = {specs[0].name: x}
        unknown = sorted(set(x) - set(self.inputs))
        missing = [t.name for t in specs if t.name not in x]
        if unknown or missing:
            raise ValueError(f"{self.name}: inputs {', '.join(self.inputs)} expected"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                             + (f"; missing: {', '.join(missing)}" if missing else ""))
        arrays, n = [], None
        for t in specs:
            a = x[t.name]
            if hasattr(a, "detach") and hasattr(a, "numpy"):  # a torch tensor
                if getattr(a, "device", None) is not None and a.device.type != "cpu":
                    raise ValueError(f"{t.name}: a tensor on {a.device}; this package runs host "
                                     "arrays (move it with .cpu())")
                a = a.detach().numpy()
            a = np.ascontiguousarray(a, dtype=np.float32)
            if a.shape == t.shape:
                a = a[None]
            if a.shape[1:] != t.shape:
                raise ValueError(f"{t.name}: shape {a.shape}, expected [N, "
                                 f"{', '.join(map(str, t.shape))}] (or one sample "
                                 f"[{', '.join(map(str, t.shape))}])")
            if n is not None and a.shape[0] != n:
                raise ValueError(f"{t.name}: {a.shape[0]} samples, the other inputs {n}")
            n = a.shape[0]
            arrays.append(a)
        return arrays, n

    # ---- weights, counts, stats ----

    def load_weights(self, weights):
        """Replaces every weight: a .safetensors path, or a dict name -> array (a state_dict;
        torch tensors work) of exactly the model's weights and shapes. On an error the session
        keeps the weights it had."""
        session = self._live()
        if isinstance(weights, dict):
            blob = _safetensors(weights)
            buf = C.create_string_buffer(blob, len(blob))
            self._check(self._lib.snn_session_load_weights(session, buf, len(blob)), "weights")
        else:
            path = os.fspath(weights)
            self._check(self._lib.snn_session_load_weights_file(session, path.encode()),
                        f"weights {path}")

    def spike_counts(self) -> dict:
        """Spikes each neuron layer fired since the session began: layer name -> count."""
        session = self._live()
        n = len(self.layers)
        counts = (C.c_double * max(n, 1))()
        self._check(self._lib.snn_session_spike_counts(session, counts, n), "spike counts")
        return {name: int(counts[i]) for i, name in enumerate(self.layers)}

    def stats(self) -> dict:
        """The session's runs, samples, kernel and graph launches and seconds inside runs."""
        st = _abi.Stats()
        self._check(self._lib.snn_session_stats(self._live(), C.byref(st)), "stats")
        return {f: getattr(st, f) for f, _ in _abi.Stats._fields_}

    # ---- lifetime ----

    def close(self):
        """Frees the session (memory, threads); the model cannot run after. Idempotent."""
        if getattr(self, "_session", None) is not None:
            self._lib.snn_session_destroy(self._session)
            self._session = None
        owned, self._owned = getattr(self, "_owned", None), None
        if owned is not None:
            owned.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _safetensors(tensors: dict) -> bytes:
    """A safetensors file in memory: float32 little-endian tensors, in the dict's order."""
    header, chunks, offset = {}, [], 0
    for name, a in tensors.items():
        if hasattr(a, "detach") and hasattr(a, "numpy"):
            a = a.detach().cpu().numpy()
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[str(name)] = {"dtype": "F32", "shape": list(a.shape),
                             "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
