"""compile(): runs the snnc compiler on a model source and loads the model.so it builds."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .model import Model, SnncError

SOURCE_SUFFIXES = (".snn", ".snnir", ".nir")


def find_snnc() -> str:
    """The snnc compiler: $SNNC, else beside this package in a source checkout (build*/driver/),
    else `snnc` on PATH."""
    env = os.environ.get("SNNC")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise SnncError(f"$SNNC is '{env}', which is not an executable file")
        return env
    root = Path(__file__).resolve().parent.parent.parent  # python/snnc -> the checkout
    for build in ("build", "build-rel", "build-bench"):
        p = root / build / "driver" / "snnc"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    p = shutil.which("snnc")
    if p:
        return p
    raise SnncError("the snnc compiler was not found: set $SNNC, put snnc on PATH, or build it "
                    "(README.md); snnc.load() runs a model.so without it")


def _flag(key: str, value) -> list[str]:
    name = "--" + key.replace("_", "-")
    if value is True:
        return [name]
    if value is False or value is None:
        return []
    return [f"{name}={value}"]


def _is_torch_module(src) -> bool:
    return any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module"
               for c in type(src).__mro__)


def _is_nir_graph(src) -> bool:
    return type(src).__name__ == "NIRGraph" and type(src).__module__.split(".")[0] == "nir"


def compile(src, *, timesteps: int | None = None, framework: str | None = None,
            device: str = "auto", max_batch: int = 256, threads: int = 0,
            precision: str | None = None, out: str | os.PathLike | None = None,
            weights: str | os.PathLike | None = None, example_input=None, **options) -> Model:
    """Compiles a model into a model.so and loads it. src: a .snn, .snnir or .nir path, or a
    nir.NIRGraph (written to a .nir file with nir.write first; NIR graphs need timesteps, and
    framework says which framework's neuron semantics to follow: snntorch, norse, sinabs,
    spikingjelly, spyx).

    timesteps, framework, precision and weights are snnc's --timesteps, --framework, --precision
    and --weights; src may also be a torch.nn.Module from snnTorch or Norse (through their NIR
    exports) or SpikingJelly (read layer by layer: snnc/from_torch.py), with example_input one
    sample without the batch
    and timesteps; any other keyword is passed as an snnc option (`events="auto"` ->
    --events=auto, `O=3` -> -O3, `disable_pass="narrow-weights"`, `spike_inputs=True` ->
    --spike-inputs). out: where the model.so goes (default: a temporary folder that Model.close()
    removes). device, max_batch and threads are the session's (Model). record: layers (and
    "LAYER.VAR" states) the library keeps at every step, as snnc --record: Model.run(x,
    record=True) returns them, and snnc.plot draws them."""
    owned = tempfile.TemporaryDirectory(prefix="snnc-")
    try:
        if _is_nir_graph(src):
            import nir
            path = os.path.join(owned.name, "model.nir")
            nir.write(path, src)
            src = path
        elif _is_torch_module(src):
            from .from_torch import to_source
            src, fw = to_source(src, example_input, timesteps, framework, owned.name)
            framework = framework or fw
            if src.endswith(".snn"):
                timesteps = None  # written in the model
        elif not isinstance(src, (str, os.PathLike)):
            raise TypeError(f"snnc.compile takes a path to a {', '.join(SOURCE_SUFFIXES)} file, "
                            "a nir.NIRGraph or a torch.nn.Module from snnTorch, SpikingJelly or "
                            f"Norse; got {type(src).__name__}")
        return _compile_file(os.fspath(src), owned, timesteps, framework, device, max_batch,
                             threads, precision, out, weights, options)
    except BaseException:
        owned.cleanup()
        raise


def _compile_file(src, owned, timesteps, framework, device, max_batch, threads, precision, out,
                  weights, options):
    if not src.endswith(SOURCE_SUFFIXES):
        raise ValueError(f"{src}: expected a {', '.join(SOURCE_SUFFIXES)} file")
    if not os.path.isfile(src):
        raise FileNotFoundError(f"{src}: no such file")
    snnc = find_snnc()
    keep = out is None  # the model.so in the temporary folder: the Model removes it at close
    if keep:
        out = os.path.join(owned.name, Path(src).stem + ".so")
    out = os.fspath(out)
    cmd = [snnc, src, "-o", out, "-q"]
    if timesteps is not None:
        cmd.append(f"--timesteps={int(timesteps)}")
    if framework is not None:
        cmd.append(f"--framework={framework}")
    if precision is not None:
        cmd.append(f"--precision={precision}")
    if weights is not None:
        cmd.append(f"--weights={os.fspath(weights)}")
    record = options.pop("record", None)
    if record is not None:
        record = [record] if isinstance(record, str) else list(record)
        cmd.append("--record=" + ",".join(record))
    for key, value in options.items():
        if key == "O":
            cmd.append(f"-O{int(value)}")
        else:
            cmd += _flag(key, value)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip()
        raise SnncError(f"snnc failed (exit status {r.returncode}):\n{msg}")
    if not keep:
        owned.cleanup()  # a NIR graph's file, if any: the model.so is at the caller's path
    return Model(out, device=device, max_batch=max_batch, threads=threads, record=record,
                 _owned=owned if keep else None)


def train(src, *, out, data: str | None = None, inputs=None, labels=None, epochs: int = 1,
          batch: int = 64, loss: str = "mse", optimizer: str = "adam", lr: float | None = None,
          **options) -> dict:
    """Trains a .snn model's weights with `snnc --train` (snnc's own loop: surrogate-gradient BPTT,
    compiled for this CPU where it differentiates every layer, else pass backend="interp") and
    writes them to out (a .safetensors file, PyTorch state_dict names; load them with
    compile(src, weights=out) or Model.load_weights). The data: data="fashion-mnist" (its training
    and test sets), or inputs and labels as arrays (or .npy paths): inputs sample-major as the
    model's input, labels the class of each sample. Any other keyword is an snnc option
    (`momentum=0.9`, `schedule="cosine"`, `seed=3`, `checkpoint="ck"`, `init=True`,
    `device="cuda"`: the same step on a CUDA GPU, the same bits, ...). Returns
    snnc's report: {"epochs": [{"epoch", "loss", "train_accuracy", "test_accuracy",
    "images_per_s", "seconds", "lr", "peak_rss_mb", "phases"}, ...], "samples", "ok"}."""
    import json

    import numpy as np

    if not isinstance(src, (str, os.PathLike)) or not os.fspath(src).endswith((".snn", ".snnir")):
        raise ValueError(f"snnc.train takes a .snn or .snnir model path, got {src!r}")
    if (data is None) == (inputs is None):
        raise ValueError("snnc.train needs data='fashion-mnist' or inputs= and labels=")
    if inputs is not None and labels is None:
        raise ValueError("snnc.train: inputs= needs labels= (the class of each sample)")
    cmd = [find_snnc(), "--train", os.fspath(src), "-o", os.fspath(out), f"--epochs={int(epochs)}",
           f"--batch={int(batch)}", f"--loss={loss}", f"--optimizer={optimizer}", "--report=json",
           "-q"]
    if lr is not None:
        cmd.append(f"--lr={lr}")
    for key, value in options.items():
        cmd += _flag(key, value)
    with tempfile.TemporaryDirectory(prefix="snnc-train-") as tmp:
        if data is not None:
            cmd.append(f"--data={data}")
        else:
            paths = []
            for name, a in (("inputs", inputs), ("labels", labels)):
                if isinstance(a, (str, os.PathLike)):
                    paths.append(os.fspath(a))
                else:
                    p = os.path.join(tmp, name + ".npy")
                    np.save(p, np.ascontiguousarray(np.asarray(a, dtype=np.float32)))
                    paths.append(p)
            cmd += [f"--input={paths[0]}", f"--labels={paths[1]}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip()
        raise SnncError(f"snnc --train failed (exit status {r.returncode}):\n{msg}")
    return json.loads(r.stdout.strip().splitlines()[-1])
