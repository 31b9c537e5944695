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
                 threads: int = 0, weights: str | os.PathLike | dict | None = None,
                 record=None, _owned=None):
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
        self.recorded = self._recordings(record)
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

    def _recordings(self, record) -> dict:
        """name -> its output, for the names a library built with `snnc --record=NAMES -o` keeps
        (outputs rec_LAYER and rec_LAYER__VAR)"""
        if record is None:
            return {}
        names = [record] if isinstance(record, str) else list(record)
        out = {}
        for name in names:
            layer, _, var = name.partition(".")
            key = f"rec_{layer}__{var}" if var else f"rec_{layer}"
            if key not in self.outputs:
                raise ValueError(f"{self.path}: records no '{name}' (no output {key}; build it with "
                                 f"snnc --record={name} -o ...)")
            out[name] = key
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

    def run(self, x, first_sample: int = 0, *, record=False) -> dict:
        """Runs every sample of the inputs and returns every output, by name, as float32 arrays
        of [N, *shape]. x: one array (a model of one input) or a dict name -> array, each
        [N, *shape] of the input's shape (T first for per-step inputs), or [*shape] for a single
        sample; torch CPU tensors work too. Contiguous float32 arrays are read in place; others
        are converted once. Samples run max_batch at a time; first_sample numbers the first one
        (the Poisson encoder's draws depend on it, so results do not depend on the batching).
        torch CUDA tensors (every input on one GPU) run on a cuda session in place, through
        run_device, and give torch CUDA tensors; torch's current stream is synchronised first.
        record: True (or a list of names) returns the model's own outputs and the recordings
        the library keeps (compile(..., record=[...])) under their names ("s1", "s1.v"), [N, T,
        ...]: spikes as uint8 (int8 where a layer fired -1), values and states float32."""
        session = self._live()
        if not isinstance(first_sample, int) or first_sample < 0:
            raise ValueError(f"first_sample must be a non-negative integer, got {first_sample!r}")
        named = x if isinstance(x, dict) else ({next(iter(self.inputs)): x}
                                               if len(self.inputs) == 1 else x)
        if isinstance(named, dict) and named and all(_is_cuda_tensor(a) for a in named.values()):
            if set(named) != set(self.inputs):
                raise ValueError(f"{self.name}: inputs {', '.join(self.inputs)} expected")
            return self._run_cuda_tensors(named, first_sample)
        arrays, n = self._inputs(x)
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
        return self._with_recordings(outs, record) if record else outs

    def _with_recordings(self, outs: dict, record) -> dict:
        names = list(self.recorded) if record is True else (
            [record] if isinstance(record, str) else list(record))
        for name in names:
            if name not in self.recorded:
                raise ValueError(f"{self.name}: '{name}' is not recorded (recorded: "
                                 f"{', '.join(self.recorded) or 'nothing'}; compile with "
                                 f"record=[...])")
        rec_outputs = set(self.recorded.values())
        res = {k: v for k, v in outs.items() if k not in rec_outputs}
        for name in names:
            a = outs[self.recorded[name]]
            if "." not in name and name in self.layers:  # a spiking layer
                a = a.astype(np.int8 if (a < 0).any() else np.uint8)
            res[name] = a
        return res

    def run_device(self, inputs: dict, outputs: dict, batch: int, first_sample: int = 0,
                   stream: int | None = None):
        """snn_run_device on a cuda session: inputs and outputs are CUDA device addresses (ints,
        e.g. a torch tensor's data_ptr()), name -> address, each holding `batch` samples of its
        tensor (float32, contiguous); the kernels read and write them in place, no copy through
        the host. Returns when the outputs are written; with `stream` (a CUstream handle as an
        int, e.g. torch.cuda.current_stream().cuda_stream), snn_run_stream: the run is queued on
        that stream, in order with the caller's work there, and not waited for."""
        session = self._live()
        if set(inputs) != set(self.inputs) or set(outputs) != set(self.outputs):
            raise ValueError(f"{self.name}: run_device takes every input ({', '.join(self.inputs)}) "
                             f"and every output ({', '.join(self.outputs)}) by name")
        if not isinstance(batch, int) or not 1 <= batch <= self.max_batch:
            raise ValueError(f"batch must be 1..max_batch ({self.max_batch}), got {batch!r}")
        if not isinstance(first_sample, int) or first_sample < 0:
            raise ValueError(f"first_sample must be a non-negative integer, got {first_sample!r}")
        ins = (C.c_void_p * len(inputs))(*[int(inputs[n]) for n in self.inputs])
        outs = (C.c_void_p * len(outputs))(*[int(outputs[n]) for n in self.outputs])
        where = f"samples {first_sample}..{first_sample + batch - 1} on {self.device}"
        if stream is None:
            self._check(self._lib.snn_run_device(session, first_sample, batch, ins, outs), where)
            return
        fn = getattr(self._lib, "snn_run_stream", None)
        if fn is None:
            raise SnncError(f"{self.name}: this library has no snn_run_stream (built by an older "
                            "snnc): run without stream")
        self._check(fn(session, C.c_void_p(int(stream) or None), first_sample, batch, ins, outs),
                    where)

    def _run_cuda_tensors(self, tensors: dict, first_sample: int) -> dict:
        """torch CUDA tensors in, torch CUDA tensors out, through run_device in batches"""
        import torch
        dev = next(iter(tensors.values())).device
        if not self.device.startswith("cuda"):
            raise ValueError(f"{self.name}: CUDA tensors need a cuda session (this one runs on "
                             f"{self.device}: load the model with device='cuda')")
        xs = {}
        for t in self.inputs.values():
            a = tensors[t.name]
            if a.device != dev:
                raise ValueError(f"{t.name}: on {a.device}, the other inputs on {dev}")
            a = a.detach().to(torch.float32).contiguous()
            if tuple(a.shape) == t.shape:
                a = a[None]
            if tuple(a.shape[1:]) != t.shape:
                raise ValueError(f"{t.name}: shape {tuple(a.shape)}, expected [N, "
                                 f"{', '.join(map(str, t.shape))}]")
            xs[t.name] = a
        n = {a.shape[0] for a in xs.values()}
        if len(n) != 1:
            raise ValueError(f"{self.name}: inputs of different sample counts {sorted(n)}")
        n = n.pop()
        outs = {name: torch.empty((n,) + t.shape, dtype=torch.float32, device=dev)
                for name, t in self.outputs.items()}
        # on torch's current stream: after what writes the inputs, before what reads the outputs,
        # no host synchronisation (a library without snn_run_stream: synchronise and run)
        stream = torch.cuda.current_stream(dev)
        on = stream.cuda_stream if hasattr(self._lib, "snn_run_stream") else None
        if on is None:
            stream.synchronize()
        for start in range(0, n, self.max_batch):
            b = min(self.max_batch, n - start)
            self.run_device({k: a[start].data_ptr() for k, a in xs.items()},
                            {k: o[start].data_ptr() for k, o in outs.items()}, b,
                            first_sample + start, stream=on)
        return outs

    def __call__(self, x, first_sample: int = 0):
        """run(), returning the output itself where the model has one (recordings aside)."""
        outs = self.run(x, first_sample)
        own = {k: v for k, v in outs.items() if k not in set(self.recorded.values())}
        return next(iter(own.values())) if len(own) == 1 else own

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
                if _is_cuda_tensor(a):
                    raise ValueError(f"{t.name}: a CUDA tensor among host inputs: pass every "
                                     "input on the GPU, or every one on the host")
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


def _is_cuda_tensor(a) -> bool:
    dev = getattr(a, "device", None)
    return hasattr(a, "data_ptr") and getattr(dev, "type", None) == "cuda"


def _safetensors(tensors: dict) -> bytes:
    """A safetensors file in memory: float32 little-endian tensors, in the dict's order."""
    header, chunks, offset = {}, [], 0
    for name, a in tensors.items():
        if hasattr(a, "detach") and hasattr(a, "numpy"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a, dtype="<f4", order="C")  # a 0-d tensor stays []
        b = a.tobytes()
        header[str(name)] = {"dtype": "F32", "shape": list(a.shape),
                             "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
