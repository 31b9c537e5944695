"""snnc.ray: batch inference of a model.so over a Ray Dataset, one session per actor.

    import ray, snnc.ray
    ds = ray.data.from_numpy(images).add_column("id", ...)   # or any dataset with the columns
    out = snnc.ray.predict(ds, "fmnist_mlp.so", concurrency=2)
    rates = out.to_pandas()["rate"]

`predict` runs `Dataset.map_batches` with an actor pool (`concurrency` actors, each holding one
snnc session: on the GPU where the library has CUDA code and the actor gets one with
`num_gpus=1`, else on the CPU with `threads` threads). Each row carries its sample number in the
`id` column: the Poisson encoder draws by sample number (snn_run's first_sample), so the outputs
do not depend on how Ray splits, orders or batches the rows; a batch runs as runs of consecutive
ids. Outputs come back as columns named after the model's outputs (one array per row), the
input and id columns kept. Ray is the caller's dependency (`pip install "ray[data]"`), not
snnc's.
"""
from __future__ import annotations

import numpy as np

import snnc

__all__ = ["Predictor", "predict"]


class Predictor:
    """The callable class map_batches makes one of per actor: loads the library once, then runs
    each batch (a dict of numpy columns) and returns it with the outputs added"""

    def __init__(self, library: str, *, device: str = "cpu", threads: int = 1,
                 max_batch: int = 256, id_column: str = "id", columns: dict | None = None):
        self.model = snnc.load(library, device=device, threads=threads, max_batch=max_batch)
        self.id_column = id_column
        # input name -> column name (default: the input's own name)
        self.columns = {k: (columns or {}).get(k, k) for k in self.model.inputs}

    def __call__(self, batch: dict) -> dict:
        ids = np.asarray(batch[self.id_column]).astype(np.int64).reshape(-1)
        n = ids.shape[0]
        xs = {}
        for name, spec in self.model.inputs.items():
            col = batch[self.columns[name]]
            a = np.stack(list(col)) if col.dtype == object else np.asarray(col)
            xs[name] = np.ascontiguousarray(a, dtype=np.float32).reshape((n,) + spec.shape)
        outs = {k: np.empty((n,) + t.shape, np.float32) for k, t in self.model.outputs.items()}
        # runs of consecutive sample numbers, each one call (its first sample keys the draws)
        start = 0
        while start < n:
            end = start + 1
            while end < n and ids[end] == ids[end - 1] + 1:
                end += 1
            got = self.model.run({k: v[start:end] for k, v in xs.items()},
                                 first_sample=int(ids[start]))
            for k, v in got.items():
                outs[k][start:end] = v
            start = end
        result = dict(batch)
        for k, v in outs.items():
            result[k] = v
        return result


def predict(dataset, library: str, *, concurrency: int = 1, batch_size: int = 256,
            threads: int = 1, device: str = "cpu", num_gpus: float = 0, id_column: str = "id",
            columns: dict | None = None):
    """dataset (a ray.data.Dataset with an id column and a column per model input) -> the lazy
    Dataset with the model's outputs as columns. concurrency: actors (one session each);
    threads: each session's CPU threads; device="cuda" with num_gpus=1 puts each actor's session
    on its GPU."""
    return dataset.map_batches(
        Predictor,
        fn_constructor_args=(str(library),),
        fn_constructor_kwargs=dict(device=device, threads=threads, max_batch=batch_size,
                                   id_column=id_column, columns=columns),
        batch_size=batch_size, batch_format="numpy", concurrency=concurrency,
        num_cpus=threads, num_gpus=num_gpus)
