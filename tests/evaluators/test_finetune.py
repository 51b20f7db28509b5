"""The fine-tune that measures a candidate: a frozen prefix computed once trains to what the
whole network at every step trains to."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from tinytune.data import Split, Splits
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import LiteResidualConfig, UpdateScheme, default_subnet, get_supernet
from tinytune.spaces.candidate import Candidate

SPEC = get_supernet("ofa-proxyless-w0.35")


def _splits(resolution: int, seed: int = 0) -> Splits:
    rng = np.random.default_rng(seed)

    def split(n: int) -> Split:
        x = rng.uniform(-1, 1, (n, 3, resolution, resolution)).astype(np.float32)
        return Split(x, (np.arange(n) % 4).astype(np.int64))

    return Splits(split(40), split(12), split(12))


def _net(bias_last_k: int, weights: tuple[tuple[int, float], ...] = ()) -> torch.nn.Module:
    supernet = build_ofa_supernet(SPEC, 40, seed=0)
    subnet = default_subnet(SPEC)
    candidate = Candidate(
        SPEC.name, subnet, LiteResidualConfig(), UpdateScheme(bias_last_k, weights)
    )
    return build_candidate(candidate, supernet, 4, calibration=[], seed=0)


def test_the_frozen_prefix_ends_before_the_first_trained_module() -> None:
    net = _net(0)
    assert net.frozen_prefix() == 1 + len(net.blocks)  # the classifier alone trains
    net = _net(len(net.convs()))
    assert net.frozen_prefix() == 0  # the stem's bias trains
    net = _net(4)  # the last four convolutions: the head and the last block's three
    assert net.frozen_prefix() == len(net.blocks)
    x = torch.randn(2, 3, net.resolution, net.resolution)
    for n in range(2 + len(net.blocks)):
        torch.testing.assert_close(net.forward_from(net.prefix(x, n), n), net(x))


@pytest.mark.parametrize("bias_last_k", [0, 7])
def test_a_prefix_computed_once_trains_to_the_same_network(
    bias_last_k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    splits = _splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(epochs=3, batch_size=8, lr=0.5)
    cached = _net(bias_last_k, ((len(_net(0).convs()) - 2, 0.5),) if bias_last_k else ())
    assert cached.frozen_prefix() > 0
    result = finetune(cached, splits, config)
    module = importlib.import_module("tinytune.evaluators.finetune")
    monkeypatch.setattr(module, "PREFIX_CACHE_BYTES", 0)  # every step from the image
    whole = _net(bias_last_k, ((len(_net(0).convs()) - 2, 0.5),) if bias_last_k else ())
    again = finetune(whole, splits, config)
    assert result.steps == again.steps == 15
    assert (result.accuracy, result.val_accuracy) == (again.accuracy, again.val_accuracy)
    assert result.train_loss == pytest.approx(again.train_loss, rel=1e-5)
    trained = [(n, p) for n, p in cached.named_parameters() if p.requires_grad]
    assert trained
    for name, p in trained:
        torch.testing.assert_close(p, dict(whole.named_parameters())[name], rtol=1e-5, atol=1e-6)
