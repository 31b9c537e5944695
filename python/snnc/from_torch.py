"""snnc.compile(module): a PyTorch module from an SNN framework, as snnc source.

snnTorch exports itself to NIR (snntorch.export_nir.export_to_nir), so its modules go through
NIR with snnTorch's neuron semantics (on a copy whose scalar neuron parameters are tensors of the
layer's size: the export infers no shape from a scalar), Norse's through its own (norse.torch.to_nir, with
Norse's semantics). SpikingJelly's exporter refuses soft resets and its
state_dicts carry no neuron parameters, so its modules are read directly: an nn.Sequential (nested
ones too) of Linear, Conv2d, BatchNorm2d, MaxPool2d, AvgPool2d, Flatten, Dropout (identity in
inference) and IFNode, LIFNode and ParametricLIFNode, written as a .snn model whose layers carry
the state_dict's names and whose weights file is the module's state_dict: the static input fed
at every step, as SpikingJelly's examples repeat the image T times, and the output the last
layer's mean over the steps (their `out.mean(0)`). Each neuron keeps its node's threshold, reset
(hard or soft), tau and decay_input, and its surrogate and detach_reset (for snnc --train); a
PLIF layer's w is a learned parameter (`w = learn(...)`, the layer named as in the state_dict, so
its weight is PATH.w as SpikingJelly's), its value the module's."""
from __future__ import annotations

import os

from .model import SnncError

# SpikingJelly surrogate class -> snnc's surrogate name (ir/surrogates.def)
_SJ_SURROGATES = {"Sigmoid": "sigmoid", "ATan": "atan", "PiecewiseQuadratic": "piecewise_quadratic",
                  "PiecewiseExp": "piecewise_exp", "SoftSign": "soft_sign",
                  "SuperSpike": "sj_superspike", "Erf": "erf"}

# SpikingJelly's neurons as snnc programs (the prelude's IF, IFSoft, LIF, LIFSoft and PLIF, with
# the node's surrogate)
_SJ_NEURONS = {
    "IF": ("v_th, v_reset", "state v = v_reset\n  v = v + I\n  fire v >= v_th\n  reset v = v_reset"),
    "IFSoft": ("v_th", "state v = 0.0\n  v = v + I\n  fire v >= v_th\n  reset v -= v_th"),
    "LIF": ("tau, v_th, v_reset, decay_input",
            "state v = v_reset\n  v = decay_input ? v + (I - (v - v_reset)) / tau : "
            "v - (v - v_reset) / tau + I\n  fire v >= v_th\n  reset v = v_reset"),
    "LIFSoft": ("tau, v_th, decay_input",
                "state v = 0.0\n  v = decay_input ? v + (I - v) / tau : v - v / tau + I\n"
                "  fire v >= v_th\n  reset v -= v_th"),
    "PLIF": ("w, v_th, v_reset, decay_input",
             "state v = v_reset\n  v = decay_input ? v + (I - (v - v_reset)) * sigmoid(w) : "
             "v - (v - v_reset) * sigmoid(w) + I\n  fire v >= v_th\n  reset v = v_reset"),
}


def framework_of(module) -> str | None:
    """'snntorch', 'spikingjelly' or 'norse' when one of module's submodules comes from it"""
    for m in module.modules():
        top = type(m).__module__.split(".")[0]
        if top in ("snntorch", "spikingjelly", "norse"):
            return top
    return None


def _num(x) -> str:
    return repr(float(x))


def _pair(v) -> str:
    v = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    return str(v[0]) if v[0] == v[1] else f"({v[0]}, {v[1]})"


def _leaves(module, prefix=""):
    """(state_dict prefix, module) of the layers in order, nested Sequentials opened"""
    import torch.nn as nn
    if isinstance(module, nn.Sequential):
        for name, child in module.named_children():
            yield from _leaves(child, f"{prefix}{name}.")
    else:
        yield prefix[:-1], module


def _sj_neuron(path, m, defs):
    """the call of a SpikingJelly node, defining its neuron in defs when it needs one"""
    from spikingjelly.activation_based import neuron as sjn
    cls = type(m).__name__
    if isinstance(m, sjn.ParametricLIFNode):
        kind = "PLIF"
    elif isinstance(m, sjn.LIFNode):
        kind = "LIF"
    elif isinstance(m, sjn.IFNode):
        kind = "IF"
    else:
        raise SnncError(f"layer '{path}': SpikingJelly's {cls} has no snnc neuron yet (IFNode, "
                        "LIFNode and ParametricLIFNode do)")
    soft = m.v_reset is None
    if soft and kind == "PLIF":
        raise SnncError(f"layer '{path}': ParametricLIFNode with a soft reset (v_reset=None) has "
                        "no snnc neuron yet")
    if soft:
        kind += "Soft"
    sg = m.surrogate_function
    sname = _SJ_SURROGATES.get(type(sg).__name__)
    if sname is None:
        raise SnncError(f"layer '{path}': surrogate {type(sg).__name__} has no snnc surrogate "
                        f"(known: {', '.join(_SJ_SURROGATES)})")
    alpha = float(getattr(sg, "alpha", 0.0))
    name = f"SJ_{kind}_{sname}_{alpha:g}_{int(bool(m.detach_reset))}".replace(".", "_")
    name = name.replace("-", "m")
    if name not in defs:
        params, body = _SJ_NEURONS[kind]
        defaults = {"tau": "2.0", "v_th": "1.0", "v_reset": "0.0", "decay_input": "1", "w": "0.0"}
        plist = ", ".join(f"{p} = {defaults[p]}" for p in params.split(", "))
        defs[name] = (f"neuron {name}({plist}) {{\n  {body}\n"
                      f"  surrogate {sname}(alpha = {_num(alpha)}, detach_reset = "
                      f"{int(bool(m.detach_reset))})\n}}\n")
    args = [f"v_th = {_num(m.v_threshold)}"]
    if not soft:
        args.append(f"v_reset = {_num(m.v_reset)}")
    if kind.startswith("LIF"):
        args += [f"tau = {_num(m.tau)}", f"decay_input = {int(bool(m.decay_input))}"]
    if kind == "PLIF":
        args += [f"w = learn({_num(m.w.detach())})", f"decay_input = {int(bool(m.decay_input))}"]
    return name, args


def spikingjelly_source(module, example_input, timesteps: int, out_dir: str) -> str:
    """module as a .snn file (and its weights beside it) in out_dir; returns the .snn path"""
    import numpy as np
    import torch.nn as nn

    from .model import _safetensors
    shape = tuple(example_input.shape)
    if not shape:
        raise SnncError("example_input: one sample (without the batch), e.g. torch.zeros(1, 28, 28)")
    lines, defs, tensors, x, k = [], {}, {}, "x", 0
    state = module.state_dict()

    def keep(path, names):
        for n in names:
            t = state[f"{path}.{n}" if path else n]
            tensors[f"{path}.{n}" if path else n] = np.array(t.detach().cpu(), np.float32)

    for path, m in _leaves(module):
        k += 1
        v = f"l{k}"
        label = f'name = "{path}"'
        if isinstance(m, nn.Linear):
            lines.append(f"{v} = dense({x}, {m.out_features}, bias = "
                         f"{'true' if m.bias is not None else 'false'}, {label})")
            keep(path, ["weight"] + (["bias"] if m.bias is not None else []))
        elif isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros" or isinstance(m.padding, str):
                raise SnncError(f"layer '{path}': Conv2d padding {m.padding!r} "
                                f"({m.padding_mode}): only zero padding by numbers is supported")
            lines.append(f"{v} = conv2d({x}, {m.out_channels}, kernel = {_pair(m.kernel_size)}, "
                         f"stride = {_pair(m.stride)}, pad = {_pair(m.padding)}, dilation = "
                         f"{_pair(m.dilation)}, groups = {m.groups}, bias = "
                         f"{'true' if m.bias is not None else 'false'}, {label})")
            keep(path, ["weight"] + (["bias"] if m.bias is not None else []))
        elif isinstance(m, nn.BatchNorm2d):
            if not m.affine or not m.track_running_stats:
                raise SnncError(f"layer '{path}': BatchNorm2d needs affine weights and running "
                                "statistics")
            lines.append(f"{v} = batchnorm({x}, eps = {_num(m.eps)}, {label})")
            keep(path, ["weight", "bias", "running_mean", "running_var"])
        elif isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            if getattr(m, "ceil_mode", False) or (isinstance(m, nn.MaxPool2d) and
                                                  _pair(m.dilation) != "1"):
                raise SnncError(f"layer '{path}': {type(m).__name__} with ceil_mode or dilation "
                                "is not supported")
            if isinstance(m, nn.AvgPool2d) and not m.count_include_pad:
                raise SnncError(f"layer '{path}': AvgPool2d(count_include_pad=False) is not "
                                "supported")
            op = "maxpool2d" if isinstance(m, nn.MaxPool2d) else "avgpool2d"
            stride = m.stride if m.stride is not None else m.kernel_size
            lines.append(f"{v} = {op}({x}, {_pair(m.kernel_size)}, stride = {_pair(stride)}, "
                         f"pad = {_pair(m.padding)})")
        elif isinstance(m, nn.Flatten):
            lines.append(f"{v} = flatten({x})")
        elif isinstance(m, (nn.Dropout, nn.Identity)) or type(m).__name__ in ("Dropout",
                                                                             "Dropout2d"):
            k -= 1
            continue
        elif type(m).__module__.split(".")[0] == "spikingjelly" and hasattr(m, "v_threshold"):
            name, args = _sj_neuron(path, m, defs)
            lines.append(f"{v} = {name}({x}, {', '.join(args)}, {label})")
            if name.startswith("SJ_PLIF"):  # its w under the state_dict's name
                tensors[f"{path}.w"] = np.array(m.w.detach().cpu(), np.float32)
        else:
            raise SnncError(f"layer '{path or type(m).__name__}': {type(m).__name__} is not "
                            "supported (Linear, Conv2d, BatchNorm2d, MaxPool2d, AvgPool2d, "
                            "Flatten, Dropout and SpikingJelly's IFNode, LIFNode and "
                            "ParametricLIFNode are)")
        x = v
    if x == "x":
        raise SnncError("the module has no layers")
    with open(os.path.join(out_dir, "weights.safetensors"), "wb") as f:
        f.write(_safetensors(tensors))
    dims = ", ".join(str(d) for d in shape)
    text = ("# from a SpikingJelly module (snnc.compile)\n" + "".join(defs.values()) +
            f"model {type(module).__name__.lower() or 'net'} {{\n  timesteps {timesteps}\n"
            f"  weights \"weights.safetensors\"\n  input x : f32[{dims}]\n" +
            "".join(f"  {line}\n" for line in lines) + f"  output out = mean({x})\n}}\n")
    path = os.path.join(out_dir, "model.snn")
    with open(path, "w") as f:
        f.write(text)
    return path


def _snntorch_exportable(module, example_input):
    """a copy of an snnTorch module whose neurons' scalar parameters (beta=0.9) are tensors of
    their layer's size: snnTorch's NIR export needs the shapes and infers none from a scalar"""
    import copy

    import torch
    from snntorch import utils
    c = copy.deepcopy(module)
    shapes, hooks = {}, []
    for name, m in c.named_modules():
        if type(m).__module__.startswith("snntorch"):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, inp, name=name: shapes.setdefault(name, tuple(inp[0].shape[1:]))
                and None))
    utils.reset(c)
    with torch.no_grad():
        c(example_input[None])  # a batch of one: each neuron's input is [1, layer shape]
    for h in hooks:
        h.remove()
    for name, m in c.named_modules():
        for p in ("alpha", "beta", "threshold") if name in shapes else ():
            t = getattr(m, p, None)
            if isinstance(t, torch.Tensor) and t.dim() == 0:
                full = torch.full(shapes[name], float(t))
                setattr(m, p, torch.nn.Parameter(full) if isinstance(t, torch.nn.Parameter)
                        else full)
    utils.reset(c)
    return c


def to_source(module, example_input, timesteps, framework, out_dir: str):
    """(path, framework) of an snnc source for a torch module"""
    fw = framework or framework_of(module)
    if example_input is None:
        raise SnncError("snnc.compile of a torch module needs example_input: one sample "
                        "(without the batch), e.g. torch.zeros(1, 28, 28)")
    if not timesteps:
        raise SnncError("snnc.compile of a torch module needs timesteps")
    if fw == "spikingjelly":
        return spikingjelly_source(module, example_input, int(timesteps), out_dir), None
    if fw == "snntorch":
        import nir
        from snntorch.export_nir import export_to_nir
        path = os.path.join(out_dir, "model.nir")
        try:
            graph = export_to_nir(_snntorch_exportable(module, example_input), example_input)
        except ValueError as e:
            raise SnncError(f"snnTorch's export_to_nir failed: {e}") from e
        nir.write(path, graph)
        return path, "snntorch"
    if fw == "norse":
        return _norse_nir(module, example_input, out_dir), "norse"
    raise SnncError(f"snnc.compile takes torch modules from snnTorch, SpikingJelly and Norse; "
                    f"{type(module).__name__} is from {fw or 'none of them'}")


def _norse_nir(module, example_input, out_dir: str) -> str:
    """Norse's own export (norse.torch.to_nir) of module, written where snnc reads it. Norse runs
    the export on a batch and keeps that batch of one in its Input and Output nodes ([1, 8] for a
    sample of 8), which are made the sample's shape again; its neuron parameters are 0-d arrays,
    which nir.write cannot compress, made 1-element arrays (the same to NIR readers)."""
    import nir
    import numpy as np
    import torch
    from norse.torch import to_nir
    x = torch.as_tensor(example_input)
    try:
        graph = to_nir(module, x[None])
    except Exception as e:  # noqa: BLE001 (Norse raises what its tracer meets)
        raise SnncError(f"Norse's to_nir failed: {type(e).__name__}: {e}") from e
    sample = np.asarray(tuple(x.shape))
    for node in graph.nodes.values():
        for k, v in list(vars(node).items()):
            if isinstance(v, torch.Tensor):
                v = v.detach().numpy()
            if isinstance(v, (np.ndarray, np.generic)) and np.ndim(v) == 0:
                setattr(node, k, np.reshape(np.asarray(v, dtype=np.float32), (1,)))
        if isinstance(node, (nir.Input, nir.Output)):
            for types in (node.input_type, node.output_type):
                for name, shape in types.items():
                    shape = np.asarray(shape)
                    if len(shape) == len(sample) + 1 and shape[0] == 1:
                        types[name] = shape[1:]
    path = os.path.join(out_dir, "model.nir")
    nir.write(path, graph)
    return path
