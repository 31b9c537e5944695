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


def compile(src, *, timesteps: int | None = None, device: str = "auto", max_batch: int = 256,
            threads: int = 0, precision: str | None = None, out: str | os.PathLike | None = None,
            weights: str | os.PathLike | None = None, **options) -> Model:
    """Compiles a model source (.snn, .snnir or .nir path) into a model.so and loads it.

    timesteps, precision and weights are snnc's --timesteps, --precision and --weights; any other
    keyword is passed as an snnc option (`events="auto"` -> --events=auto, `O=3` -> -O3,
    `disable_pass="narrow-weights"`, a True value a bare flag). out: where the model.so goes
    (default: a temporary folder that Model.close() removes). device, max_batch and threads are
    the session's (Model)."""
    if not isinstance(src, (str, os.PathLike)):
        raise TypeError(f"snnc.compile takes a path to a {', '.join(SOURCE_SUFFIXES)} file; got "
                        f"{type(src).__name__} (NIR graphs and torch modules: export them to a "
                        ".nir file first, e.g. nir.write)")
    src = os.fspath(src)
    if not src.endswith(SOURCE_SUFFIXES):
        raise ValueError(f"{src}: expected a {', '.join(SOURCE_SUFFIXES)} file")
    if not os.path.isfile(src):
        raise FileNotFoundError(f"{src}: no such file")
    snnc = find_snnc()
    owned = None
    if out is None:
        owned = tempfile.TemporaryDirectory(prefix="snnc-")
        out = os.path.join(owned.name, Path(src).stem + ".so")
    out = os.fspath(out)
    cmd = [snnc, src, "-o", out, "-q"]
    if timesteps is not None:
        cmd.append(f"--timesteps={int(timesteps)}")
    if precision is not None:
        cmd.append(f"--precision={precision}")
    if weights is not None:
        cmd.append(f"--weights={os.fspath(weights)}")
    for key, value in options.items():
        if key == "O":
            cmd.append(f"-O{int(value)}")
        else:
            cmd += _flag(key, value)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        if owned is not None:
            owned.cleanup()
        msg = (r.stderr or r.stdout).strip()
        raise SnncError(f"snnc failed (exit status {r.returncode}):\n{msg}")
    try:
        return Model(out, device=device, max_batch=max_batch, threads=threads, _owned=owned)
    except BaseException:
        if owned is not None:
            owned.cleanup()
        raise
