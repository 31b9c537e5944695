"""snnc.torch: a compiled network as a torch.nn.Module.

    m = snnc.load("conv_train.so")        # built with `snnc --train conv.snn -o conv_train.so`
    net = snnc.torch.Module(m)            # the weights are nn.Parameters, named as the model's
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(net(x), torch.nn.functional.one_hot(y, 10).float())
        opt.zero_grad(); loss.backward(); opt.step()

The forward is the custom op snnc::run (torch.library: opaque to torch.compile and
torch.export, with a fake implementation for shapes); in training mode (net.train()) it is the
library's compiled training step's forward, and its backward the compiled backward (the trainer
ABI's snn_train_forward / snn_train_backward_inputs pair): the weights' gradients, and the
inputs' where they require one, as the C trainer computes them. In eval mode it is the library's
inference session (batchnorm on its running statistics). A model built without --train runs
in eval mode only, on the weights its session holds (Model.load_weights), and has no
parameters. Batchnorm's running statistics are buffers that training updates, as
PyTorch's. The state_dict holds the model's own weight names (those of the framework the network
came from), so `net.load_state_dict(torch_model.state_dict())` takes a framework's weights
where the names match.

Poisson encoders draw by sample number: in training mode each forward numbers its samples after
the last one's (fresh noise every batch, as `snnc --train`), in eval mode from 0; set
`net.first_sample` to choose.
"""
from __future__ import annotations

import itertools
import weakref

import numpy as np
import torch

from .model import Model, SnncError
from .trainer import Trainer

__all__ = ["Module"]

_keys = itertools.count(1)
_modules: "weakref.WeakValueDictionary[int, Module]" = weakref.WeakValueDictionary()


def _module(key: int) -> "Module":
    mod = _modules.get(int(key))
    if mod is None:
        raise SnncError(f"snnc::run: no live snnc.torch.Module with key {key}")
    return mod


@torch.library.custom_op("snnc::run", mutates_args=())
def _run(key: int, first_sample: int, training: bool, inputs: list[torch.Tensor],
         params: list[torch.Tensor]) -> list[torch.Tensor]:
    return _module(key)._forward(first_sample, training, inputs, params)


@_run.register_fake
def _(key, first_sample, training, inputs, params):
    mod = _module(key)
    n = inputs[0].shape[0]
    return [inputs[0].new_empty((n,) + t.shape) for t in mod.model.outputs.values()]


def _setup_context(ctx, inputs, output):
    key, first_sample, training, xs, params = inputs
    ctx.key, ctx.first_sample, ctx.training = key, first_sample, training
    # the trained weights (not batchnorm's running statistics, which later forwards move in
    # place and a training forward does not read)
    mod = _module(key)
    ctx.save_for_backward(*xs, *[p for k, p in zip(mod._names, params) if not _is_stat(k)])
    ctx.nx = len(xs)
    ctx.forward_id = _module(key)._forward_id


def _backward(ctx, grads):
    if not ctx.training:
        raise SnncError("snnc.torch.Module: a backward through an eval-mode forward (call "
                        "net.train() first: eval runs the inference session)")
    mod = _module(ctx.key)
    saved = ctx.saved_tensors
    xs, trained = list(saved[:ctx.nx]), iter(saved[ctx.nx:])
    bufs = dict(mod.named_buffers())
    params = [bufs[k] if _is_stat(k) else next(trained) for k in mod._names]
    want_x = ctx.needs_input_grad[3]
    gx, gw = mod._backward(ctx.forward_id, ctx.first_sample, xs, params, grads, want_x)
    return None, None, None, gx, gw


_run.register_autograd(_backward, setup_context=_setup_context)


def _is_stat(name: str) -> bool:
    return name.endswith(".running_mean") or name.endswith(".running_var")


class Module(torch.nn.Module):
    """A Model (snnc.load of a model.so) as an nn.Module: the weights as Parameters (batchnorm's
    running statistics as buffers) under the model's own names, forward through snnc::run.
    Returns the output tensor ([N, ...] float32 on the CPU), or a dict by name for a model of
    several outputs. max_batch: the largest batch a training forward takes (default the
    model's)."""

    def __init__(self, model: Model, *, max_batch: int | None = None, threads: int = 0):
        super().__init__()
        self.model = model
        self.trainer = None
        if model._lib.snn_model_trainable(model._m):
            # the step's memory and weights; the optimiser is the caller's (torch's)
            self.trainer = Trainer(model, optimizer="sgd", lr=0.0, max_batch=max_batch,
                                   threads=threads)
            start = self.trainer.weights()
        # without --train: no parameters (the session's weights stay the model's: load_weights)
        self._names = list(model.weights) if self.trainer is not None else []
        for name in self._names:
            *path, leaf = name.split(".")
            owner = self
            for part in path:
                if not hasattr(owner, part) or not isinstance(getattr(owner, part),
                                                              torch.nn.Module):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            t = torch.from_numpy(start[name].copy())
            if _is_stat(name):
                owner.register_buffer(leaf, t)
            else:
                owner.register_parameter(leaf, torch.nn.Parameter(t))
        self._key = next(_keys)
        _modules[self._key] = self
        self._pushed: dict = {}  # name -> (data_ptr, version) last given to the library
        self._forward_id = 0
        self.first_sample = 0
        self._in_session = None  # what the inference session holds: the versions pushed

    # ---- what snnc::run calls ----

    def _tensors(self) -> list:
        named = dict(self.named_parameters())
        named.update(dict(self.named_buffers()))
        return [named[k] for k in self._names]

    def _push(self, params) -> bool:
        """Gives the library the weights that changed since it last took them"""
        changed = {}
        for name, p in zip(self._names, params):
            stamp = (p.data_ptr(), p._version)
            if self._pushed.get(name) != stamp:
                changed[name] = p.detach().to("cpu", torch.float32).contiguous().numpy()
                self._pushed[name] = stamp
        if changed:
            self.trainer.set_weights(changed)
        return bool(changed)

    def _numpy_inputs(self, xs) -> dict:
        return {k: x.detach().to("cpu", torch.float32).contiguous().numpy()
                for k, x in zip(self.model.inputs, xs)}

    def _forward(self, first_sample, training, xs, params):
        changed = self._push(params)
        if training:
            if self.trainer is None:
                raise SnncError(f"{self.model.path}: built without --train: it runs in eval "
                                f"mode only (net.eval())")
            outs = self.trainer.forward(self._numpy_inputs(xs), first_sample=first_sample)
            self._forward_id += 1
            self._in_session = None  # its running statistics moved
            self._stats_back()
        else:
            if self.trainer is not None and (changed or self._in_session is None):
                self.trainer.sync()
                self._in_session = True
            outs = self.model.run(self._numpy_inputs(xs), first_sample=first_sample)
        return [torch.from_numpy(np.ascontiguousarray(o)) for o in outs.values()]

    def _stats_back(self):
        """batchnorm's running statistics, as the training forward moved them, into the buffers"""
        stats = [k for k in self._names if _is_stat(k)]
        if not stats:
            return
        w = self.trainer.weights()
        bufs = dict(self.named_buffers())
        with torch.no_grad():
            for k in stats:
                bufs[k].copy_(torch.from_numpy(w[k]))
                self._pushed[k] = (bufs[k].data_ptr(), bufs[k]._version)

    def _backward(self, forward_id, first_sample, xs, params, grads, want_x):
        if forward_id != self._forward_id:
            # another forward ran since: that one's again (the same bits), statistics kept
            stats = {k: b.clone() for k, b in self.named_buffers()}
            self._forward(first_sample, True, xs, params)
            with torch.no_grad():
                for k, b in self.named_buffers():
                    b.copy_(stats[k])
            self._pushed.clear()
        og = {k: (g.detach().to("cpu", torch.float32).contiguous().numpy() if g is not None
                  else None)
              for k, g in zip(self.model.outputs, grads)}
        og = {k: v for k, v in og.items() if v is not None}
        if want_x:
            wg, ig = self.trainer.backward(og, input_grads=True)
            gx = [torch.from_numpy(ig[k]).to(x.device) for k, x in zip(self.model.inputs, xs)]
        else:
            wg = self.trainer.backward(og)
            gx = [None] * len(xs)
        gw = [None if _is_stat(k) else torch.from_numpy(wg[k]).to(p.device)
              for k, p in zip(self._names, params)]
        return gx, gw

    # ---- nn.Module ----

    def forward(self, x):
        """x: one tensor (a model of one input) or a dict by input name, [N, ...] each"""
        if not isinstance(x, dict):
            if len(self.model.inputs) != 1:
                raise ValueError(f"{self.model.name} has inputs {', '.join(self.model.inputs)}: "
                                 "pass a dict")
            x = {next(iter(self.model.inputs)): x}
        xs = []
        for k, spec in self.model.inputs.items():
            if k not in x:
                raise ValueError(f"{self.model.name}: input {k!r} missing")
            t = x[k]
            if not isinstance(t, torch.Tensor):
                t = torch.as_tensor(np.asarray(t, np.float32))
            if tuple(t.shape[1:]) != tuple(spec.shape):
                raise ValueError(f"{k}: shape {tuple(t.shape)}, expected [N, "
                                 f"{', '.join(map(str, spec.shape))}]")
            xs.append(t.to(torch.float32))
        n = xs[0].shape[0]
        first = self.first_sample
        if self.training:
            self.first_sample += n
        outs = _run(self._key, first, self.training, xs, self._tensors())
        if len(outs) == 1:
            return outs[0]
        return dict(zip(self.model.outputs, outs))

    def extra_repr(self) -> str:
        return f"{self.model.name}: {self.model!r}"
