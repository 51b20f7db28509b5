"""Cheap signals: each checked against an independent computation with torch autograd and
scikit-learn, and against what the schemes' parameter sets imply."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinytune.data import get_dataset
from tinytune.errors import ConfigError
from tinytune.evaluators.task import network_on_data
from tinytune.models.layers import ConvUnit
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import get_supernet, make_preset

from .benches import load_bench

_signals = load_bench("cheap_signals")  # bench/cheap_signals.py, used only by bench/signals.py
_features, measure_signals = _signals._features, _signals.measure_signals

SPEC = get_supernet("ofa-proxyless-w0.35")
RES = 32


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    dataset = get_dataset("digits", seed=0)
    return build_ofa_supernet(SPEC, 10, seed=0), dataset.load(RES), dataset.num_classes


def _net(setting, preset: str):
    supernet, splits, n_classes = setting
    candidate = make_preset(preset, SPEC)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=RES))
    net, _ = network_on_data(candidate, supernet, splits, n_classes, seed=0)
    return net


def _batch(splits, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The images measure_signals draws (the same generator and call)."""
    idx = np.random.default_rng(seed).choice(len(splits.train), size=samples, replace=False)
    return torch.tensor(splits.train.x[idx]), torch.tensor(splits.train.y[idx])


def test_classifier_only_scores_zero_and_its_probe_is_scikit_learns(setting) -> None:
    from sklearn.linear_model import LogisticRegression

    _, splits, _ = setting
    net = _net(setting, "last")
    reference = _net(setting, "last")
    signals = measure_signals(net, splits, samples=8, probe_images=400)
    assert (signals.fisher, signals.grad_norm, signals.potential) == (0.0, 0.0, 0.0)
    feats = _features(reference, splits.train.x[:400])
    model = LogisticRegression(max_iter=1000, random_state=0).fit(feats, splits.train.y[:400])
    want = np.mean(model.predict(_features(reference, splits.val.x)) == splits.val.y)
    assert signals.probe == want
    # the probe's weights are in the network: its logits give the same predictions
    with torch.no_grad():
        logits = net(torch.tensor(splits.val.x))
    assert np.mean(logits.argmax(1).numpy() == splits.val.y) == pytest.approx(want)


def test_fisher_and_gradient_norm_against_batched_autograd(setting) -> None:
    """grad_norm is ‖∇ of the mean loss‖² of one batched backward pass; fisher, the mean of the
    per-sample squared norms, is at least that (Jensen) and equal to it for one sample."""
    _, splits, _ = setting
    net = _net(setting, "mcunetv3")
    signals = measure_signals(net, splits, samples=12, probe_images=300, seed=3)
    x, y = _batch(splits, 12, seed=3)
    trained = [p for n, p in net.named_parameters() if p.requires_grad and "classifier" not in n]
    grads = torch.autograd.grad(F.cross_entropy(net(x), y), trained)
    want = sum(float(g.double().pow(2).sum()) for g in grads)
    assert signals.grad_norm == pytest.approx(want, rel=1e-4)
    per_sample = [
        sum(
            float(g.double().pow(2).sum())
            for g in torch.autograd.grad(F.cross_entropy(net(x[i : i + 1]), y[i : i + 1]), trained)
        )
        for i in range(12)
    ]
    assert signals.fisher == pytest.approx(np.mean(per_sample), rel=1e-4)
    assert signals.fisher > signals.grad_norm > 0
    one = measure_signals(_net(setting, "mcunetv3"), splits, samples=1, probe_images=300)
    assert one.fisher == pytest.approx(one.grad_norm, rel=1e-9)


def test_potential_against_a_batched_pass(setting) -> None:
    """Δ_c from one batched forward and backward of the summed loss (the samples are
    independent: per-sample gradients at each convolution's output) gives the same potential.
    The batched pass runs in float64: in float32, a batch of ten can take another convolution
    algorithm, 2 % off on an AVX-512 machine."""
    _, splits, _ = setting
    net = _net(setting, "mcunetv3")
    signals = measure_signals(net, splits, samples=10, probe_images=300, seed=5)
    x, y = _batch(splits, 10, seed=5)
    net, x = copy.deepcopy(net).double(), x.double()
    units = [m for m in net.modules() if isinstance(m, ConvUnit)]
    kept: dict[int, torch.Tensor] = {}
    hooks = [
        u.register_forward_hook(lambda m, _, out: kept.__setitem__(id(m), out)) for u in units
    ]
    loss = F.cross_entropy(net(x), y, reduction="sum")
    for h in hooks:
        h.remove()
    live = [u for u in units if kept[id(u)].requires_grad]
    outs = torch.autograd.grad(loss, [kept[id(u)] for u in live])
    want = 0.0
    for u, g in zip(live, outs, strict=True):
        a = kept[id(u)].detach()
        act = (a * g).double().sum(dim=(2, 3)).pow(2).sum()  # Σ_n Σ_c (Σ_hw a g)²
        bias = g.double().sum(dim=(2, 3)).pow(2).sum()
        ratio = u.trained_channels / u.split_channels if u.weight_train is not None else 0.0
        want += ratio * float(act) + (float(bias) if u.bias.requires_grad else 0.0)
    assert signals.potential == pytest.approx(want / (2 * 10), rel=1e-4)
    assert signals.potential > 0


def test_a_superset_of_trained_parameters_has_at_least_the_fisher(setting) -> None:
    """Full fine-tuning trains every parameter bias-only trains, on the same function: its
    Fisher trace is at least bias-only's."""
    _, splits, _ = setting
    full = measure_signals(_net(setting, "full"), splits, samples=6, probe_images=300)
    bias = measure_signals(_net(setting, "bias-only"), splits, samples=6, probe_images=300)
    assert full.probe == bias.probe  # the same sub-network, the same probe
    assert full.fisher >= bias.fisher > 0
    assert full.potential >= bias.potential > 0


def test_bad_inputs(setting) -> None:
    _, splits, _ = setting
    with pytest.raises(ConfigError, match="samples"):
        measure_signals(_net(setting, "last"), splits, samples=0)
