"""The snnc Python package against the snnc command line: the same model, inputs and weights give
the same bits through Model.run as through `snnc --run`. Needs $SNNC (CMake's test sets it) or a
built snnc in the checkout."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import snnc

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def cli(*args):
    r = subprocess.run([snnc.find_snnc(), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cli_run(model, x, tmp_path, *extra):
    """`snnc --run` on the CPU backend: outputs by name, and the report's spike counts"""
    np.save(tmp_path / "x.npy", x)
    report = cli("--run", "-q", model, f"--input={tmp_path / 'x.npy'}", "--backend=cpu",
                 f"--output={tmp_path / 'o.npz'}", "--report=json", *extra)
    with np.load(tmp_path / "o.npz") as z:
        outs = {k: z[k] for k in z.files}
    return outs, json.loads(report.strip().splitlines()[-1])["spike_counts"]


def mlp_input(n, seed=1):
    return np.random.default_rng(seed).uniform(0, 1, (n, 1, 28, 28)).astype(np.float32)


@pytest.fixture(scope="module")
def mlp():
    with snnc.compile(EX / "fmnist_mlp.snn", cuda_arch="none", max_batch=64) as m:
        yield m


def test_description(mlp):
    assert mlp.name == "fmnist_mlp" and mlp.timesteps == 8
    assert list(mlp.inputs) == ["image"] and mlp.inputs["image"].shape == (1, 28, 28)
    assert list(mlp.outputs) == ["rate"] and mlp.outputs["rate"].shape == (10,)
    assert mlp.layers == ["s1", "s2"]
    assert mlp.device == "cpu" and mlp.devices == ["cpu"]
    assert set(mlp.weights) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert mlp.weights["fc1.weight"].shape == (256, 784)
    assert "fmnist_mlp" in repr(mlp) and "rate[10]" in repr(mlp)


def test_run_equals_the_command_line(mlp, tmp_path):
    x = mlp_input(150)  # three batches of 64, the last short
    before = mlp.spike_counts()
    got = mlp.run(x)
    want, counts = cli_run(EX / "fmnist_mlp.snn", x, tmp_path)
    assert got["rate"].dtype == np.float32 and got["rate"].shape == (150, 10)
    assert got["rate"].tobytes() == want["rate"].tobytes()
    assert (got["rate"] > 0).any()  # the network fires: the comparison is not of zeros
    after = mlp.spike_counts()
    assert {k: after[k] - before[k] for k in after} == {k: int(v) for k, v in counts.items()}
    # __call__: the one output itself; one sample without its batch dimension
    assert np.array_equal(mlp(x[:5]), got["rate"][:5])
    assert np.array_equal(mlp.run({"image": x[7]})["rate"][0], got["rate"][7])
    # a float64, non-contiguous array is converted, not refused
    assert np.array_equal(mlp(np.asfortranarray(x[:9].astype(np.float64))), got["rate"][:9])


def test_stats(mlp):
    before = mlp.stats()
    mlp.run(mlp_input(130))
    after = mlp.stats()
    assert after["runs"] - before["runs"] == 3 and after["samples"] - before["samples"] == 130
    assert after["kernel_launches"] > before["kernel_launches"]


def test_batching_keeps_the_poisson_keys(tmp_path):
    """samples split into batches (and a run starting at first_sample) draw the spikes one run
    over all of them draws"""
    src = EX / "poisson.snn"
    with snnc.compile(src, cuda_arch="none", max_batch=4) as m:
        x = np.random.default_rng(3).uniform(0, 1, (11,) + m.inputs[next(iter(m.inputs))].shape)
        x = x.astype(np.float32)
        whole = m.run(x)
        first, rest = m.run(x[:6]), m.run(x[6:], first_sample=6)
        want, _ = cli_run(src, x, tmp_path)
    for k in whole:
        assert whole[k].tobytes() == want[k].tobytes()
        assert np.concatenate([first[k], rest[k]]).tobytes() == whole[k].tobytes()


def test_load_weights(mlp, tmp_path):
    """new weights from a dict (written as safetensors in memory) equal `snnc --run --weights`.
    The example's weights are f16 values, so the library stores its large one in f16
    (narrow-weights): new weights must be f16 values too, and others are refused."""
    rng = np.random.default_rng(5)
    w = {name: (rng.standard_normal(t.shape) * 0.1).astype(np.float16).astype(np.float32)
         for name, t in mlp.weights.items()}
    x = mlp_input(20, seed=2)
    try:
        mlp.load_weights(w)
        got = mlp(x)
        (tmp_path / "w.safetensors").write_bytes(snnc.model._safetensors(w))
        want, _ = cli_run(EX / "fmnist_mlp.snn", x, tmp_path, f"--weights={tmp_path / 'w.safetensors'}")
        assert got.tobytes() == want["rate"].tobytes()
        # a file works too; a wrong shape is refused and the weights stay as they were
        mlp.load_weights(tmp_path / "w.safetensors")
        bad = dict(w, **{"fc2.bias": np.zeros(11, np.float32)})
        with pytest.raises(snnc.SnncError, match="fc2.bias"):
            mlp.load_weights(bad)
        inexact = dict(w, **{"fc1.weight": w["fc1.weight"] + np.float32(1e-5)})
        with pytest.raises(snnc.SnncError, match="fc1.weight.*not a f16 value.*narrow-weights"):
            mlp.load_weights(inexact)
        assert mlp(x).tobytes() == got.tobytes()
    finally:
        mlp.load_weights(EX / "fmnist_mlp.safetensors")


def test_input_errors(mlp):
    with pytest.raises(ValueError, match=r"image: shape \(3, 783\), expected \[N, 1, 28, 28\]"):
        mlp.run(np.zeros((3, 783), np.float32))
    with pytest.raises(ValueError, match="unknown: img; missing: image"):
        mlp.run({"img": mlp_input(1)})
    with pytest.raises(ValueError, match="first_sample"):
        mlp.run(mlp_input(1), first_sample=-1)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model.so"):
        snnc.load(tmp_path / "none.so")
    (tmp_path / "text.so").write_text("not a library\n")
    with pytest.raises(snnc.SnncError, match="cannot be loaded as a shared library"):
        snnc.load(tmp_path / "text.so")
    with pytest.raises(ValueError, match="max_batch"):
        snnc.load(tmp_path / "text.so", max_batch=0)


def test_compile_errors(tmp_path):
    bad = tmp_path / "bad.snn"
    bad.write_text("model m {\n  timesteps 2\n  input x : f32[3]\n  output o = LIF(y)\n}\n")
    with pytest.raises(snnc.SnncError, match=r"bad\.snn:4:\d+: error: .*'y'"):
        snnc.compile(bad, cuda_arch="none")
    with pytest.raises(TypeError, match="takes a path"):
        snnc.compile(object())
    with pytest.raises(ValueError, match="expected a .snn"):
        snnc.compile(tmp_path / "model.txt")
    old = os.environ.get("SNNC")
    os.environ["SNNC"] = str(tmp_path / "no-snnc")
    try:
        with pytest.raises(snnc.SnncError, match=r"\$SNNC is .* not an executable"):
            snnc.compile(EX / "fmnist_mlp.snn")
    finally:
        if old is None:
            del os.environ["SNNC"]
        else:
            os.environ["SNNC"] = old


def test_compile_out_and_close(tmp_path):
    out = tmp_path / "lif.so"
    m = snnc.compile(EX / "lif_layer.snn", cuda_arch="none", out=out, max_batch=2)
    assert out.is_file()
    m.close()
    m.close()  # idempotent
    assert out.is_file()  # a path the caller chose stays
    with pytest.raises(snnc.SnncError, match="closed"):
        m.run(np.zeros((1,) + m.inputs[next(iter(m.inputs))].shape, np.float32))
    # the default: a temporary folder, removed by close()
    m = snnc.compile(EX / "lif_layer.snn", cuda_arch="none", max_batch=2)
    where = Path(m.path)
    assert where.is_file()
    m.close()
    assert not where.exists()


NIR_CASES = sorted(p.parent.name for p in (ROOT / "tests" / "nir").glob("*/model.nir"))


def _nir_options(case):
    """a fixture's snnc arguments (tests/nir/CASE/args) as compile() keywords"""
    kw = {}
    for a in (ROOT / "tests" / "nir" / case / "args").read_text().split():
        key, _, value = a[2:].partition("=")
        key = key.replace("-", "_")
        kw[key] = int(value) if key == "timesteps" else (value or True)
    return kw


def _tolerance(case):
    """npycmp's arguments of tests/nir/CASE/tolerance: outputs compared exactly, rtol, atol"""
    path = ROOT / "tests" / "nir" / case / "tolerance"
    if not path.exists():
        return None, 0.0, 0.0
    toks, exact, rtol, atol = path.read_text().split(), [], 0.0, 0.0
    for flag, value in zip(toks[::2], toks[1::2]):
        if flag == "--exact":
            exact.append(value)
        elif flag == "--rtol":
            rtol = float(value)
        elif flag == "--atol":
            atol = float(value)
    return exact, rtol, atol


def _has_nir_support():
    r = subprocess.run([snnc.find_snnc(), "--emit=ir", str(ROOT / "tests/nir/snntorch_mlp/model.nir"),
                        "--timesteps=1", "-q", "-o", "/dev/null"], capture_output=True, text=True)
    return "NIR support is off" not in r.stderr


@pytest.mark.parametrize("case", NIR_CASES)
def test_nir_graph_object(case):
    """a NIR graph as a Python object (nir.read of a framework's export) compiles and runs to the
    outputs the framework computed"""
    nir = pytest.importorskip("nir")  # a test dependency (tools/install-python-deps.sh --tests)
    if not _has_nir_support():
        pytest.skip("this snnc was built without NIR support (no libhdf5)")
    d = ROOT / "tests" / "nir" / case
    # type_check=False: nir 1.0.8's own check refuses graphs Norse and Sinabs export (a [16]
    # output into a [1] input: shapes they leave to broadcasting), which snnc imports
    graph = nir.read(str(d / "model.nir"), type_check=False)
    with snnc.compile(graph, cuda_arch="none", **_nir_options(case)) as m:
        got = m.run({name: arr for name, arr in _inputs(m, np.load(d / "input.npy")).items()})
    exact, rtol, atol = _tolerance(case)
    with np.load(d / "expected.npz") as want:
        assert sorted(got) == sorted(want.files)
        for name in want.files:
            if exact is None or name in exact:
                assert got[name].tobytes() == want[name].astype(np.float32).tobytes(), name
            else:
                np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol)


def _inputs(m, x):
    assert len(m.inputs) == 1
    return {next(iter(m.inputs)): x}


def test_run_device_on_the_cuda_stand_in(monkeypatch):
    """run_device on a cuda session, on tests/cuda_emu's stand-in for libcuda and NVRTC (its
    device memory is host memory): the outputs a CPU session computes, bit for bit"""
    import ctypes as C
    emu = os.environ.get("SNN_CUEMU")
    if not emu:
        pytest.skip("no CUDA stand-in named (CTest's python test passes SNN_CUEMU)")
    x = mlp_input(6, seed=4)
    with snnc.compile(EX / "fmnist_mlp.snn", cuda_arch="none") as cpu:
        want = cpu(x)
    for name, value in (("SNN_NVRTC", emu), ("SNN_CUDA_DRIVER", emu), ("SNN_CACHE_DIR", "off")):
        monkeypatch.setenv(name, value)
    cu = C.CDLL(emu)
    dev, ctx = C.c_int(), C.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(C.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev) == 0
    assert cu.cuCtxPushCurrent_v2(ctx) == 0
    dx, dy = C.c_uint64(), C.c_uint64()
    assert cu.cuMemAlloc_v2(C.byref(dx), C.c_size_t(x.nbytes)) == 0
    assert cu.cuMemAlloc_v2(C.byref(dy), C.c_size_t(want.nbytes)) == 0
    cu.cuCtxPopCurrent_v2(C.byref(C.c_void_p()))
    C.memmove(dx.value, x.ctypes.data, x.nbytes)
    C.memset(dy.value, 0xff, want.nbytes)  # NaN: every output must be written
    with snnc.compile(EX / "fmnist_mlp.snn", cuda_arch="sm_90", device="cuda", max_batch=4) as m:
        assert m.device == "cuda:0" and "cuda" in m.devices
        per = x[0].nbytes
        m.run_device({"image": dx.value}, {"rate": dy.value}, batch=4)
        m.run_device({"image": dx.value + 4 * per}, {"rate": dy.value + 4 * want[0].nbytes},
                     batch=2, first_sample=4)
        with pytest.raises(ValueError, match="every input"):
            m.run_device({}, {"rate": dy.value}, batch=1)
        with pytest.raises(ValueError, match="batch must be 1..max_batch"):
            m.run_device({"image": dx.value}, {"rate": dy.value}, batch=5)
        got = np.empty_like(want)
        C.memmove(got.ctypes.data, dy.value, want.nbytes)
        assert got.tobytes() == want.tobytes()
        assert m.stats()["graph_launches"] == 2
        # queued on a stream of the caller's (snn_run_stream), the legacy default one too: the
        # same outputs once the stream is synchronised
        C.memset(dy.value, 0xff, want.nbytes)
        stream = C.c_void_p()
        assert cu.cuCtxPushCurrent_v2(ctx) == 0 and cu.cuStreamCreate(C.byref(stream), 0) == 0
        cu.cuCtxPopCurrent_v2(C.byref(C.c_void_p()))
        m.run_device({"image": dx.value}, {"rate": dy.value}, batch=4, stream=stream.value)
        m.run_device({"image": dx.value + 4 * per}, {"rate": dy.value + 4 * want[0].nbytes},
                     batch=2, first_sample=4, stream=0)
        assert cu.cuCtxPushCurrent_v2(ctx) == 0 and cu.cuStreamSynchronize(stream) == 0
        assert cu.cuStreamDestroy_v2(stream) == 0
        cu.cuCtxPopCurrent_v2(C.byref(C.c_void_p()))
        C.memmove(got.ctypes.data, dy.value, want.nbytes)
        assert got.tobytes() == want.tobytes()
        assert m.stats()["graph_launches"] == 4


def test_train(tmp_path):
    """snnc.train on arrays: the loss falls, the weights it writes load into a compiled model that
    classifies the training samples, and the same call gives the same bytes"""
    r = np.random.default_rng(11)
    templates = r.uniform(0, 1.2, (3, 6, 12)).astype(np.float32)
    y = np.arange(240) % 3
    x = templates[y] + r.normal(0, 0.15, (240, 6, 12)).astype(np.float32)
    model = tmp_path / "c.snn"
    model.write_text("model c {\n  timesteps 6\n  seed 3\n  input x : f32[T, 12]\n"
                     "  s = LIF(dense(x, 16), tau = 2.0)\n  s2 = LIF(dense(s, 3), tau = 2.0)\n"
                     "  output rate = mean(s2)\n}\n")
    out = tmp_path / "w.safetensors"
    rep = snnc.train(model, out=out, inputs=x, labels=y, epochs=20, batch=24, lr=0.01)
    ep = rep["epochs"]
    assert rep["ok"] and len(ep) == 20 and ep[-1]["loss"] < 0.34 * ep[0]["loss"]
    with snnc.compile(model, weights=out, cuda_arch="none") as m:
        rate = m.run(x)["rate"]
    assert (rate.argmax(1) == y).mean() >= 0.95
    again = tmp_path / "w2.safetensors"
    snnc.train(model, out=again, inputs=x, labels=y, epochs=20, batch=24, lr=0.01)
    assert out.read_bytes() == again.read_bytes()
    with pytest.raises(ValueError, match="needs data"):
        snnc.train(model, out=out)
    with pytest.raises(snnc.SnncError, match="not a class"):
        snnc.train(model, out=tmp_path / "bad.safetensors", inputs=x, labels=y + 5)
    assert not (tmp_path / "bad.safetensors").exists()


def test_train_on_the_cuda_stand_in(tmp_path, monkeypatch):
    """snnc.train(device="cuda") is snnc --train --device=cuda: on tests/cuda_emu's stand-in, the
    same weights as the CPU's compiled step, bit for bit"""
    emu = os.environ.get("SNN_CUEMU")
    if not emu:
        pytest.skip("no CUDA stand-in named (CTest's python test passes SNN_CUEMU)")
    r = np.random.default_rng(5)
    x = r.uniform(0, 1.2, (48, 5, 8)).astype(np.float32)
    y = np.arange(48) % 3
    model = tmp_path / "c.snn"
    model.write_text("model c {\n  timesteps 5\n  seed 3\n  input x : f32[T, 8]\n"
                     "  s = PLIF(dense(x, 12), w = learn(0.4), v_th = 0.5)\n"
                     "  s2 = LIF(dense(s, 3) + dense(prev(s2), 3, bias = false), v_th = 0.3)\n"
                     "  output rate = mean(s2)\n}\n")
    cpu = tmp_path / "cpu.safetensors"
    snnc.train(model, out=cpu, inputs=x, labels=y, epochs=2, batch=16, lr=0.05)
    for name, value in (("SNN_NVRTC", emu), ("SNN_CUDA_DRIVER", emu), ("SNN_CACHE_DIR", "off")):
        monkeypatch.setenv(name, value)
    gpu = tmp_path / "gpu.safetensors"
    rep = snnc.train(model, out=gpu, inputs=x, labels=y, epochs=2, batch=16, lr=0.05,
                     device="cuda")
    assert rep["ok"] and len(rep["epochs"]) == 2
    assert gpu.read_bytes() == cpu.read_bytes()
