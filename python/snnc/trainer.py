"""snnc.Trainer: the training step a model.so built with `snnc --train MODEL.snn -o MODEL.so`
carries (runtime/snn.h snn_trainer_*), from Python: the same compiled step, and so the same bits,
as `snnc --train`.

    m = snnc.load("mlp_train.so")
    t = snnc.Trainer(m, optimizer="adam", lr=1e-3, max_batch=128)
    for x, y in batches:
        loss, correct = t.step(x, y)
    t.sync()                 # the model's inference session runs the trained weights
    t.save("trained.safetensors")
"""
from __future__ import annotations

import ctypes as C
import os

import numpy as np

from . import _abi
from .model import Model, SnncError

_LOSSES = {"mse": 0, "ce": 1, "ce_count": 1, "ce_rate": 2, "mse_count": 3, "mse_membrane": 4}
_OPTIMIZERS = {"adam": 0, "adamw": 1, "sgd": 2}


class Trainer:
    """Trains a Model's weights with its library's compiled training step. loss: "mse" (to the
    one-hot label, SpikingJelly's on rates), "ce", or snnTorch's "ce_count", "ce_rate",
    "mse_count", "mse_membrane" (loss_targets: mse_count's correct and incorrect rates,
    mse_membrane's on and off targets); loss_output: the output (name or index) the loss reads; optimizer "adam", "adamw" or "sgd" with torch.optim's defaults unless given;
    clip_grad_norm > 0 clips every step's gradients (clip_grad_norm_). max_batch defaults to
    the model's."""

    def __init__(self, model: Model, *, loss: str = "mse", loss_output=0, optimizer: str = "adam",
                 lr: float = 1e-3, momentum: float = 0.0, weight_decay: float | None = None,
                 betas=(0.9, 0.999), eps: float = 1e-8, nesterov: bool = False,
                 clip_grad_norm: float = 0.0, loss_targets=(1.0, 0.0),
                 max_batch: int | None = None, threads: int = 0):
        self.model = model
        self._t = None
        lib = model._lib
        if not lib.snn_model_trainable(model._m):
            raise SnncError(f"{model.path}: the library carries no training step (build it with "
                            f"`snnc --train MODEL.snn -o MODEL.so`)")
        if loss not in _LOSSES:
            raise ValueError(f"loss must be one of {', '.join(_LOSSES)}, got {loss!r}")
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(_OPTIMIZERS)}, got {optimizer!r}")
        names = list(model.outputs)
        if isinstance(loss_output, str):
            if loss_output not in names:
                raise ValueError(f"{model.name} has no output {loss_output!r} ({', '.join(names)})")
            loss_output = names.index(loss_output)
        c = _abi.TrainConfig()
        lib.snn_train_config_default(C.byref(c))
        c.loss, c.loss_output, c.optimizer = _LOSSES[loss], int(loss_output), _OPTIMIZERS[optimizer]
        c.lr, c.momentum, c.nesterov = lr, momentum, int(nesterov)
        c.weight_decay = (0.01 if optimizer == "adamw" else 0.0) if weight_decay is None \
            else weight_decay
        if optimizer != "sgd":
            c.beta1, c.beta2 = betas
            c.eps = eps
        c.clip_grad_norm = clip_grad_norm
        c.loss_on, c.loss_off = loss_targets
        self.max_batch = max_batch or model.max_batch
        t = C.c_void_p()
        model._check(lib.snn_trainer_create(model._m, C.byref(c), self.max_batch, threads,
                                            C.byref(t)), "trainer")
        self._t = t
        self._lib = lib
        self._lr = lr

    # ---- steps ----

    def _live(self):
        if self._t is None:
            raise SnncError(f"{self.model.name}: the trainer is closed")
        return self._t

    def step(self, x, labels, first_sample: int = 0):
        """One step (forward, loss, backward, update) over a batch of at most max_batch samples:
        x as Model.run takes it, labels the class of each sample. Returns (the batch's mean loss,
        how many samples the model got right)."""
        t = self._live()
        arrays, n = self.model._inputs(x)
        y = np.ascontiguousarray(labels, dtype=np.float32).reshape(-1)
        if y.shape[0] != n:
            raise ValueError(f"{n} samples but {y.shape[0]} labels")
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"a step takes 1..{self.max_batch} samples, got {n}")
        ins = (C.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        loss, correct = C.c_double(), C.c_int64()
        self.model._check(self._lib.snn_train_step(t, first_sample, n, ins, y.ctypes.data,
                                                   C.byref(loss), C.byref(correct)), "train step")
        return loss.value, correct.value

    def forward(self, x, first_sample: int = 0) -> dict:
        """The forward in training mode (what backward() differentiates): outputs by name"""
        t = self._live()
        arrays, n = self.model._inputs(x)
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"a forward takes 1..{self.max_batch} samples, got {n}")
        outs = {k: np.empty((n,) + o.shape, np.float32) for k, o in self.model.outputs.items()}
        ins = (C.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        ops = (C.c_void_p * len(outs))(*[o.ctypes.data for o in outs.values()])
        self.model._check(self._lib.snn_train_forward(t, first_sample, n, ins, ops), "forward")
        self._n = n
        return outs

    def _optional(self, name):
        fn = getattr(self._lib, name, None)
        if fn is None:
            raise SnncError(f"{self.model.path}: the library has no {name} (built by an older "
                            f"snnc: build it again with `snnc --train`)")
        return fn

    def backward(self, output_grads: dict, *, input_grads: bool = False):
        """After forward(): dLoss/doutput by name (missing ones zero) to every weight's gradient
        (float32 arrays by name), kept for apply(). input_grads=True: (the weights' gradients,
        the inputs' by name: [N, ...] as the inputs, a static input's summed over the steps,
        zeros through a Poisson encoder)."""
        t = self._live()
        keep = []
        ptrs = (C.c_void_p * len(self.model.outputs))()
        for i, (k, o) in enumerate(self.model.outputs.items()):
            if k in output_grads:
                g = np.ascontiguousarray(output_grads[k], dtype=np.float32)
                keep.append(g)
                ptrs[i] = g.ctypes.data
        grads = {k: np.empty(w.shape, np.float32) for k, w in self.model.weights.items()}
        gptrs = (C.c_void_p * len(grads))(*[g.ctypes.data for g in grads.values()])
        if not input_grads:
            self.model._check(self._lib.snn_train_backward(t, ptrs, gptrs), "backward")
            return grads
        n = getattr(self, "_n", 0)
        if not n:
            raise SnncError(f"{self.model.name}: backward before any forward")
        ins = {k: np.empty((n,) + s.shape, np.float32) for k, s in self.model.inputs.items()}
        iptrs = (C.c_void_p * len(ins))(*[a.ctypes.data for a in ins.values()])
        self.model._check(self._optional("snn_train_backward_inputs")(t, ptrs, iptrs, gptrs),
                          "backward")
        return grads, ins

    def apply(self, grads: dict | None = None):
        """One optimiser update from grads (by name; missing ones zero), or from the last
        backward's"""
        t = self._live()
        if grads is None:
            self.model._check(self._lib.snn_trainer_apply(t, None), "update")
            return
        keep = [np.ascontiguousarray(grads[k], dtype=np.float32) if k in grads else None
                for k in self.model.weights]
        ptrs = (C.c_void_p * len(keep))(*[g.ctypes.data if g is not None else None for g in keep])
        self.model._check(self._lib.snn_trainer_apply(t, ptrs), "update")

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float):
        self.model._check(self._lib.snn_trainer_set_lr(self._live(), float(value)), "lr")
        self._lr = float(value)

    @property
    def steps(self) -> int:
        return int(self._lib.snn_trainer_steps(self._live()))

    # ---- weights ----

    def weights(self) -> dict:
        """The weights as float32 arrays by name (copies)"""
        t = self._live()
        out = {}
        for i, (k, w) in enumerate(self.model.weights.items()):
            a = np.empty(w.shape, np.float32)
            self.model._check(self._lib.snn_trainer_get_weight(t, i, a.ctypes.data), k)
            out[k] = a
        return out

    def set_weights(self, weights: dict):
        """Weights by name (float32 arrays of the model's shapes; others stay as they are); the
        optimiser's state is kept"""
        t = self._live()
        names = list(self.model.weights)
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ValueError(f"{self.model.name} has no weight {', '.join(unknown)}")
        fn = self._optional("snn_trainer_set_weight")
        for k, a in weights.items():
            if hasattr(a, "detach"):
                a = a.detach().cpu().numpy()
            a = np.asarray(a, dtype=np.float32, order="C")  # keeps a 0-d one 0-d
            if a.shape != tuple(self.model.weights[k].shape):
                raise ValueError(f"{k}: shape {a.shape}, expected {self.model.weights[k].shape}")
            self.model._check(fn(t, names.index(k), a.ctypes.data), k)

    def sync(self):
        """The model's inference session takes the trainer's weights"""
        self.model._check(self._lib.snn_session_copy_weights(self.model._live(), self._live()),
                          "copying the weights")

    def save(self, path):
        self.model._check(self._lib.snn_trainer_save_weights(self._live(),
                                                             os.fsencode(path)), "saving")

    def save_checkpoint(self, path):
        self.model._check(self._lib.snn_trainer_save_checkpoint(self._live(),
                                                                os.fsencode(path)), "checkpoint")

    def load_checkpoint(self, path):
        self.model._check(self._lib.snn_trainer_load_checkpoint(self._live(),
                                                                os.fsencode(path)), "checkpoint")

    def load_weights(self, path):
        self.model._check(self._lib.snn_trainer_load_weights_file(self._live(),
                                                                  os.fsencode(path)), "weights")

    def close(self):
        if self._t is not None:
            self._lib.snn_trainer_destroy(self._t)
            self._t = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
