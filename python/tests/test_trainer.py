"""snnc.Trainer (a library built with `snnc --train MODEL.snn -o MODEL.so`, runtime/snn.h
snn_trainer_*) against `snnc --train`: SpikingJelly's conv net with batchnorm (tests/grad/sj_conv)
trained two steps through the library gives the same bits as the command line; the forward /
backward / apply pair gives what a step gives; a checkpoint continues to the same bits; errors
are clear. Needs $SNNC (CMake's test sets it) or a built snnc in the checkout."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

import snnc

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "grad" / "sj_conv"
SGD = dict(optimizer="sgd", lr=0.1, momentum=0.9)


def cli(*args, cwd=None):
    r = subprocess.run([snnc.find_snnc(), *map(str, args)], capture_output=True, text=True,
                       cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("trainer") / "sj_conv_train.so"
    cli("--train", "model.snn", "--cuda-arch=none", "-o", out, cwd=CASE)
    return out


def data():
    return np.load(CASE / "input.npy"), np.load(CASE / "labels.npy")


def test_step_equals_the_command_line(lib, tmp_path):
    x, y = data()
    want = tmp_path / "cli.safetensors"
    cli("--train", "--backend=cpu", "model.snn", "--input=input.npy", "--labels=labels.npy",
        "--loss=mse", "--batch=8", "--epochs=2", "--no-shuffle", "--optimizer=sgd", "--lr=0.1",
        "--momentum=0.9", "-q", "-o", want, cwd=CASE)
    with snnc.load(lib, device="cpu", max_batch=8) as m, snnc.Trainer(m, **SGD) as t:
        for e in range(2):
            loss, correct = t.step(x, y, first_sample=e * len(y))
            assert np.isfinite(loss) and 0 <= correct <= len(y)
        assert t.steps == 2
        t.save(tmp_path / "lib.safetensors")
        w = t.weights()
        assert set(w) == set(m.weights)
        # the running statistics moved from their initial (0, 1)
        assert not np.all(w["conv_fc.1.running_mean"] == 0)
        t.sync()  # inference now runs the trained weights (running statistics for batchnorm)
        assert m(x).shape == (len(y), 10)
    assert (tmp_path / "lib.safetensors").read_bytes() == want.read_bytes()


def test_forward_backward_apply_equal_a_step(lib):
    x, y = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        with snnc.Trainer(m, **SGD) as a, snnc.Trainer(m, **SGD) as b:
            a.step(x, y)
            out = b.forward(x)["rate"]
            # MSE's gradient as runtime/train.c computes it: (z - onehot) * float(2 / (B K))
            onehot = np.eye(10, dtype=np.float32)[y.astype(int)]
            g = (out - onehot) * np.float32(2.0 / out.size)
            grads = b.backward({"rate": g})
            assert np.abs(grads["conv_fc.9.weight"]).sum() > 0
            assert not grads["conv_fc.1.running_mean"].any()  # no gradient reaches them
            b.apply(grads)
            wa, wb = a.weights(), b.weights()
            for k in wa:
                assert np.array_equal(wa[k], wb[k]), k


def read_safetensors(path):
    import json
    import struct
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             np.float32).reshape(v["shape"])
            for k, v in head.items() if k != "__metadata__"}


def test_input_gradients_equal_the_interpreter(lib, tmp_path):
    """snn_train_backward_inputs: the inputs' gradients (the image's, summed over the steps) and
    the weights' equal the interpreter's for the first batch (`snnc --train --grads`), bit for
    bit; weights set from outside change what the forward computes"""
    x, y = data()
    grads = tmp_path / "grads.safetensors"
    cli("--train", "--backend=interp", "--precision=f32", "model.snn", "--input=input.npy",
        "--labels=labels.npy", "--loss=mse", "--batch=8", "--no-shuffle", "-q",
        f"--grads={grads}", "-o", tmp_path / "w.safetensors", cwd=CASE)
    want = read_safetensors(grads)
    with snnc.load(lib, device="cpu", max_batch=8) as m, snnc.Trainer(m, **SGD) as t:
        out = t.forward(x)["rate"]
        onehot = np.eye(10, dtype=np.float32)[y.astype(int)]
        g = (out - onehot) * np.float32(2.0 / out.size)
        wg, ig = t.backward({"rate": g}, input_grads=True)
        name = next(iter(m.inputs))
        assert ig[name].shape == (len(y),) + m.inputs[name].shape
        assert np.abs(ig[name]).sum() > 0
        assert np.array_equal(ig[name], want[name + ".grad"])
        for k in wg:
            assert np.array_equal(wg[k], want[k]), k
        # the pair again, without the inputs': the same weights' gradients
        t.forward(x)
        again = t.backward({"rate": g})
        for k in wg:
            assert np.array_equal(again[k], wg[k]), k
        w = t.weights()
        w2 = {k: v * 0 for k, v in w.items() if k.endswith(".weight") and "running" not in k}
        t.set_weights(w2)
        assert np.array_equal(t.weights()["conv_fc.9.weight"], w2["conv_fc.9.weight"])
        assert not t.forward(x)["rate"].any()  # zero weights: no spikes reach the output
        with pytest.raises(ValueError, match="no weight"):
            t.set_weights({"nope": w2["conv_fc.9.weight"]})
        with pytest.raises(ValueError, match="shape"):
            t.set_weights({"conv_fc.9.weight": np.zeros(3, np.float32)})


def test_checkpoint_continues_exactly(lib, tmp_path):
    x, y = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        with snnc.Trainer(m, optimizer="adam", lr=1e-3) as t:
            t.step(x, y)
            t.save_checkpoint(tmp_path / "ck.safetensors")
            t.step(x, y)
            want = t.weights()
        with snnc.Trainer(m, optimizer="adam", lr=1e-3) as u:
            u.load_checkpoint(tmp_path / "ck.safetensors")
            assert u.steps == 1
            u.step(x, y)
            got = u.weights()
    for k in want:
        assert np.array_equal(want[k], got[k]), k


def test_snntorch_loss_equals_the_command_line(tmp_path):
    """snnTorch's ce_rate_loss (on every step's spikes) through the library: the command line's
    bits"""
    case = ROOT / "tests" / "grad" / "snntorch_ce_rate"
    so = tmp_path / "ce_rate.so"
    cli("--train", "model.snn", "--cuda-arch=none", "-o", so, cwd=case)
    want = tmp_path / "cli.safetensors"
    cli("--train", "--backend=cpu", "model.snn", "--input=input.npy", "--labels=labels.npy",
        "--loss=ce_rate", "--batch=16", "--no-shuffle", "--optimizer=adam", "--lr=1e-2", "-q",
        "-o", want, cwd=case)
    x, y = np.load(case / "input.npy"), np.load(case / "labels.npy")
    with snnc.load(so, device="cpu", max_batch=16) as m:
        with snnc.Trainer(m, loss="ce_rate", optimizer="adam", lr=1e-2) as t:
            loss, _ = t.step(x, y)
            assert abs(loss - float((case / "loss").read_text())) < 1e-6 * loss
            t.save(tmp_path / "lib.safetensors")
        snnc.Trainer(m, loss="ce_rate", loss_output="spikes", max_batch=4).close()
        with pytest.raises(snnc.SnncError, match=r"is not class scores \[B, K\]"):
            snnc.Trainer(m, loss="mse")  # a loss of one value a class, on a sequence
    assert (tmp_path / "lib.safetensors").read_bytes() == want.read_bytes()


def test_errors(lib, tmp_path):
    x, y = data()
    plain = tmp_path / "plain.so"
    cli("model.snn", "--cuda-arch=none", "-o", plain, cwd=CASE)
    with snnc.load(plain, device="cpu") as m:
        with pytest.raises(snnc.SnncError, match="carries no training step"):
            snnc.Trainer(m)
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        with pytest.raises(ValueError, match="loss must be"):
            snnc.Trainer(m, loss="hinge")
        with snnc.Trainer(m) as t:
            with pytest.raises(snnc.SnncError, match="not a class"):
                t.step(x, np.full(len(y), 12, np.float32))
            with pytest.raises(ValueError, match="1..8 samples"):
                t.step(np.concatenate([x, x]), np.concatenate([y, y]))
            with pytest.raises(snnc.SnncError, match="not a trainer checkpoint"):
                t.save(tmp_path / "w.safetensors")
                t.load_checkpoint(tmp_path / "w.safetensors")
