"""snnc.torch.Module over a library built with `snnc --train` (SpikingJelly's conv net with
batchnorm, tests/grad/sj_conv): PyTorch's autograd gets snnc's compiled backward, so the weights'
and the input's gradients equal the C trainer's bit for bit; torch.optim.SGD over it trains as
snnc.Trainer's SGD does; eval mode runs the inference session on the running statistics; the
state_dict carries the model's names; two forwards before a backward still give each its own
gradient; torch.compile(fullgraph=True) runs it as one opaque op. Needs torch, and $SNNC or a
built snnc in the checkout."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import snnc

torch = pytest.importorskip("torch")  # tools/install-python-deps.sh installs it: CI runs these
F = torch.nn.functional
import snnc.torch as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "grad" / "sj_conv"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch") / "sj_conv_train.so"
    r = subprocess.run([snnc.find_snnc(), "--train", "model.snn", "--cuda-arch=none", "-o",
                        str(out)], capture_output=True, text=True, cwd=CASE)
    assert r.returncode == 0, r.stderr
    return out


def data():
    x, y = np.load(CASE / "input.npy"), np.load(CASE / "labels.npy")
    return x, y, np.eye(10, dtype=np.float32)[y.astype(int)]


def test_gradients_equal_the_trainer(lib):
    x, y, onehot = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        net = st.Module(m)
        assert [k for k, _ in net.named_parameters()] == [
            k for k in m.weights if "running" not in k]
        xt = torch.from_numpy(x.copy()).requires_grad_()
        out = net(xt)
        assert out.shape == (len(y), 10)
        seen = {}
        out.register_hook(lambda g: seen.setdefault("g", g.clone()))
        F.mse_loss(out, torch.from_numpy(onehot)).backward()
        # torch's MSE gradient is the one runtime/train.c computes
        g = seen["g"].numpy()
        assert np.allclose(g, (out.detach().numpy() - onehot) * np.float32(2 / g.size),
                           rtol=1e-6, atol=0)
        with snnc.Trainer(m, optimizer="sgd", lr=0.1) as ref:
            ref.forward(x)
            wg, ig = ref.backward({"rate": g}, input_grads=True)
        assert np.abs(wg["conv_fc.0.weight"]).sum() > 0
        for k, p in net.named_parameters():
            assert np.array_equal(p.grad.numpy(), wg[k]), k
        assert np.abs(ig["x"] if "x" in ig else next(iter(ig.values()))).sum() > 0
        assert np.array_equal(xt.grad.numpy(), next(iter(ig.values())))
        # the forward moved batchnorm's running statistics, as PyTorch's does
        assert np.abs(net.state_dict()["conv_fc.1.running_mean"].numpy()).sum() > 0


def test_sgd_loop_equals_the_trainer(lib):
    x, y, onehot = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        net = st.Module(m)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            loss = F.mse_loss(net(torch.from_numpy(x)), torch.from_numpy(onehot))
            opt.zero_grad()
            loss.backward()
            opt.step()
        with snnc.Trainer(m, optimizer="sgd", lr=0.1, momentum=0.9) as ref:
            for e in range(3):
                ref.step(x, y, first_sample=e * len(y))
            want = ref.weights()
        sd = net.state_dict()
        assert set(sd) == set(m.weights)
        for k, v in sd.items():
            np.testing.assert_allclose(v.numpy(), want[k], rtol=1e-5, atol=1e-7, err_msg=k)
        # eval mode: the inference session on the trained weights and running statistics
        net.eval()
        with snnc.Trainer(m, optimizer="sgd", lr=0.1) as t2:
            t2.set_weights({k: v.numpy() for k, v in sd.items()})
            t2.sync()
            want_out = m.run(x)["rate"]
        with torch.no_grad():
            got = net(torch.from_numpy(x)).numpy()
        assert np.array_equal(got, want_out)


def test_state_dict_round_trip_and_two_forwards(lib):
    x, y, onehot = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        net = st.Module(m)
        sd = {k: v.clone() for k, v in net.state_dict().items()}
        a, b = torch.from_numpy(x[:4].copy()), torch.from_numpy(x[4:].copy())
        # each forward's gradient alone
        net.zero_grad()
        net(a).sum().backward()
        ga = {k: p.grad.clone() for k, p in net.named_parameters()}
        net.load_state_dict(sd)  # the running statistics as before
        net.zero_grad()
        net(b).sum().backward()
        gb = {k: p.grad.clone() for k, p in net.named_parameters()}
        # both forwards, then one backward through both: the earlier one is run again
        net.load_state_dict(sd)
        net.zero_grad()
        oa = net(a)
        with torch.no_grad():  # b's forward from the statistics a's started from
            for k, v in net.named_buffers():
                v.copy_(sd[k])
        ob = net(b)
        (oa.sum() + ob.sum()).backward()
        for k, p in net.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), (ga[k] + gb[k]).numpy(), rtol=1e-6,
                                       atol=1e-9, err_msg=k)
        # a weight changed through the state_dict changes what the forward computes
        z = dict(sd)
        z["conv_fc.9.weight"] = torch.zeros_like(sd["conv_fc.9.weight"])
        net.load_state_dict(z)
        with torch.no_grad():
            assert not net(a).any()


def test_torch_compile_fullgraph(lib):
    x, _, _ = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        net = st.Module(m).eval()
        with torch.no_grad():
            eager = net(torch.from_numpy(x))
            compiled = torch.compile(lambda t: net(t) * 2, fullgraph=True)(torch.from_numpy(x))
        assert torch.equal(compiled, eager * 2)


def test_errors(lib, tmp_path):
    x, _, _ = data()
    with snnc.load(lib, device="cpu", max_batch=8) as m:
        net = st.Module(m)
        with pytest.raises(ValueError, match="shape"):
            net(torch.zeros(2, 3))
        net.eval()
        out = net(torch.from_numpy(x).requires_grad_())
        with pytest.raises(Exception, match="eval-mode"):
            out.sum().backward()


def test_learned_neuron_parameters(tmp_path):
    """SpikingJelly's PLIF with w learned (tests/grad/sj_plif_learn): w is a 0-d nn.Parameter, as
    in the framework's state_dict, its gradient the C trainer's, and the framework's own gradient
    to the fixture's tolerance"""
    case = ROOT / "tests" / "grad" / "sj_plif_learn"
    out = tmp_path / "plif.so"
    r = subprocess.run([snnc.find_snnc(), "--train", "model.snn", "--cuda-arch=none", "-o",
                        str(out)], capture_output=True, text=True, cwd=case)
    assert r.returncode == 0, r.stderr
    x, y = np.load(case / "input.npy"), np.load(case / "labels.npy")
    onehot = np.eye(10, dtype=np.float32)[y.astype(int)]
    sys.path.insert(0, str(ROOT / "tests" / "lit" / "Inputs"))
    from st import load  # safetensors with numpy alone
    want = load(case / "grads.safetensors")
    with snnc.load(out, device="cpu", max_batch=4) as m:
        net = st.Module(m)
        params = dict(net.named_parameters())
        assert params["s.w"].shape == ()
        assert float(params["s.w"].detach()) == float(np.log(2.0).astype(np.float32))
        outp = net(torch.from_numpy(x.copy()))
        seen = {}
        outp.register_hook(lambda g: seen.setdefault("g", g.clone()))
        F.mse_loss(outp, torch.from_numpy(onehot)).backward()
        with snnc.Trainer(m, optimizer="sgd", lr=0.1) as ref:
            ref.forward(x)
            wg = ref.backward({"rate": seen["g"].numpy()})
        for k, p in params.items():
            assert np.array_equal(p.grad.numpy(), wg[k]), k
        assert np.allclose(params["s.w"].grad.numpy(), want["s.w"], rtol=1e-4, atol=0)
        assert float(params["s.w"].grad.detach()) != 0
