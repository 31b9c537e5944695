"""snnc from Python: compile spiking networks with snnc and run the model.so it builds on numpy
arrays (ctypes over the model.so's C ABI, runtime/snn.h; numpy the only dependency).

    import snnc
    m = snnc.compile("examples/fmnist_mlp.snn")   # runs the snnc compiler
    rate = m(images)                              # [N, 784] float32 -> [N, 10]
    m = snnc.load("fmnist_mlp.so")                # a built model.so: no compiler needed
    snnc.train("model.snn", out="w.safetensors", inputs=x, labels=y, epochs=5)  # snnc --train
    m = snnc.compile("m.snn", record=["s1", "s1.v"])  # layers and states kept at every step
    snnc.plot.raster(m.run(x, record=True)["s1"])    # matplotlib figures (snnc.plot)
    t = snnc.Trainer(snnc.load("mlp_train.so"))   # a library built with snnc --train -o X.so
    loss, correct = t.step(images, labels)        # its compiled training step, batch by batch
"""
from .compiler import compile, find_snnc, train
from .model import Model, SnncError, Tensor
from .trainer import Trainer
from . import plot

__version__ = "0.1.0"
__all__ = ["compile", "load", "train", "find_snnc", "Model", "SnncError", "Tensor", "Trainer",
           "plot"]


def load(path, *, device: str = "auto", max_batch: int = 256, threads: int = 0,
         weights=None, record=None) -> Model:
    """Loads a model.so built by snnc and opens a session on device ("auto": the GPU where the
    library has CUDA code and a GPU answers, else the CPU; "cpu"; "cuda", "cuda:N") for batches
    of at most max_batch samples, on threads threads (0: every core). weights: a .safetensors
    path or a dict of arrays replacing the library's own. record: the names a library built
    with `snnc --record=NAMES -o` keeps (for Model.run(x, record=True))."""
    return Model(path, device=device, max_batch=max_batch, threads=threads, weights=weights,
                 record=record)
