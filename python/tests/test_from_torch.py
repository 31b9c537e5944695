"""snnc.compile(module) of PyTorch modules from the SNN frameworks: a SpikingJelly conv net (read
layer by layer: conv, batchnorm, IF with the ATan surrogate, max pool, flatten, linear, PLIF with
its learned w, LIF with a soft reset), an snnTorch MLP and a Norse one (through their NIR exports)
give the framework's own outputs bit for bit (Norse's box cells within float rounding); what cannot
be read is said. Needs torch, spikingjelly, snntorch, nirtorch and norse
(tools/install-python-deps.sh --tests installs them: CI runs these)."""
import numpy as np
import pytest

import snnc

torch = pytest.importorskip("torch")
sj = pytest.importorskip("spikingjelly.activation_based")
snn = pytest.importorskip("snntorch")
from spikingjelly.activation_based import functional, layer, neuron, surrogate  # noqa: E402

T = 4


def sj_net():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        layer.Conv2d(1, 4, 3, padding=1, bias=False), layer.BatchNorm2d(4),
        neuron.IFNode(surrogate_function=surrogate.ATan()), layer.MaxPool2d(2, 2),
        layer.Flatten(), layer.Linear(64, 16), neuron.ParametricLIFNode(init_tau=1.5, v_threshold=0.5),
        layer.Dropout(0.5), layer.Linear(16, 5), neuron.LIFNode(tau=2.0, v_reset=None, v_threshold=0.3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.1, 0.1)
        net[1].running_var.uniform_(0.5, 1.5)
        net[1].weight.uniform_(0.8, 1.6)
        net[1].bias.uniform_(0.0, 0.6)
        net[5].weight.mul_(4)
        net[8].weight.mul_(4)
        net[6].w.fill_(0.3)
    net.eval()
    functional.set_step_mode(net, "m")
    return net


def test_spikingjelly_module_equals_the_framework():
    net = sj_net()
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        functional.reset_net(net)
        want = net(x.unsqueeze(0).repeat(T, 1, 1, 1, 1)).mean(0).numpy()
    with snnc.compile(net, timesteps=T, example_input=torch.zeros(1, 8, 8)) as m:
        got = m(x.numpy())
        # the weights under the state_dict's names, the PLIF's w too
        assert {"0.weight", "1.running_var", "5.weight", "6.w", "8.bias"} <= set(m.weights)
    assert 0 < want.mean() < 1  # the output layer fires, not always
    assert np.array_equal(got, want)


def snntorch_and_snnc(net, steps, seed):
    """net (a Sequential whose first layer is a Linear(8, ...)), its first weight tripled so that
    it fires, stepped by snnTorch and compiled by snnc on the same [10, steps, 8] input: (snnc's
    output, snnTorch's)"""
    from snntorch import utils
    with torch.no_grad():
        net[0].weight.mul_(3)
    x = torch.rand(10, steps, 8, generator=torch.Generator().manual_seed(seed))
    utils.reset(net)
    with torch.no_grad():
        want = torch.stack([net(x[:, t])[0] for t in range(steps)], 1).numpy()
    with snnc.compile(net, timesteps=steps, example_input=torch.zeros(8)) as m:
        got = next(iter(m.run(x.numpy()).values()))
    return got, want


def test_snntorch_module_through_nir_equals_the_framework():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 12), snn.Leaky(beta=torch.full((12,), 0.8), threshold=torch.ones(12),
                                          init_hidden=True),
        torch.nn.Linear(12, 4), snn.Leaky(beta=torch.full((4,), 0.9), threshold=torch.ones(4),
                                          init_hidden=True, output=True))
    got, want = snntorch_and_snnc(net, 6, 2)
    assert 0 < want.mean() < 1
    assert np.array_equal(got, want)


def test_snntorch_scalar_parameters():
    """snnTorch's own export needs tensor parameters; scalar ones (beta=0.8, the usual way) are
    expanded to the layer's size on a copy first, the module left as it was"""
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(8, 12), snn.Leaky(beta=0.8, init_hidden=True),
                              torch.nn.Linear(12, 4),
                              snn.Synaptic(alpha=0.7, beta=0.9, init_hidden=True, output=True))
    got, want = snntorch_and_snnc(net, 5, 3)
    assert net[1].beta.dim() == 0
    assert 0 < want.mean() < 1
    assert np.array_equal(got, want)


def norse_and_snnc(cells, steps, seed):
    """a Linear(8, 12), cell, Linear(12, 4), cell SequentialState stepped by Norse and compiled by
    snnc (through Norse's NIR export) on the same [6, steps, 8] input: (snnc's, Norse's)"""
    nt = pytest.importorskip("norse.torch")
    torch.manual_seed(seed)
    net = nt.SequentialState(torch.nn.Linear(8, 12), cells[0], torch.nn.Linear(12, 4), cells[1])
    with torch.no_grad():
        net[0].weight.mul_(4)
    x = torch.rand(6, steps, 8, generator=torch.Generator().manual_seed(seed + 1))
    state, outs = None, []
    with torch.no_grad():
        for t in range(steps):
            o, state = net(x[:, t], state)
            outs.append(o)
    want = torch.stack(outs, 1).numpy()
    with snnc.compile(net, timesteps=steps, example_input=torch.zeros(8)) as m:
        got = next(iter(m.run(x.numpy()).values()))
    return got, want


def test_norse_module_through_nir_equals_the_framework():
    """Norse's current-based LIF and IAF cells: the same bits; its box LIF and LI cells within
    float rounding (Norse adds dt/tau ((v_leak - v) + I), snnc's NIR LIF decays and adds the gain:
    tests/nir, norse_lifbox_li)"""
    nt = pytest.importorskip("norse.torch")
    got, want = norse_and_snnc(
        (nt.LIFCell(nt.LIFParameters(tau_syn_inv=torch.tensor(200.0), v_th=torch.tensor(0.3))),
         nt.IAFCell(nt.IAFParameters(v_th=torch.tensor(0.5), v_reset=torch.tensor(0.0)))), 10, 0)
    assert 0 < want.mean() < 1
    assert np.array_equal(got, want)
    got, want = norse_and_snnc((nt.LIFBoxCell(), nt.LIBoxCell()), 10, 1)
    assert np.abs(want).max() > 0.01
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_errors():
    net = torch.nn.Sequential(layer.Linear(4, 3), torch.nn.ReLU(), neuron.IFNode())
    with pytest.raises(snnc.SnncError, match="layer '1': ReLU is not supported"):
        snnc.compile(net, timesteps=2, example_input=torch.zeros(4))
    with pytest.raises(snnc.SnncError, match="needs example_input"):
        snnc.compile(sj_net(), timesteps=2)
    with pytest.raises(snnc.SnncError, match="from snnTorch, SpikingJelly and Norse"):
        snnc.compile(torch.nn.Linear(4, 3), timesteps=2, example_input=torch.zeros(4))
