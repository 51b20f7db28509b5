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


def test_the_data_moves_to_the_device_once_not_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves of tensors to the fine-tune's device (``Tensor.to`` with the very device object it
    was given) are as many with five batches an epoch as with one: the splits go over once, as
    whole tensors, and the data order once an epoch."""
    splits = _splits(default_subnet(SPEC).resolution)
    device = torch.device("cpu")
    moves: list[int] = []
    to = torch.Tensor.to

    def counted(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        moves[-1] += bool(args) and args[0] is device
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counted)
    for batch_size in (40, 8):  # 1 and 5 batches of the 40 training images
        moves.append(0)
        finetune(_net(7), splits, FinetuneConfig(epochs=2, batch_size=batch_size), device)
    # an image that sizes the frozen prefix's output, the three splits (each under 256
    # images: one chunk through the prefix), the training labels, the data order twice
    assert moves[0] == moves[1] == 1 + 3 + 1 + 2


def test_the_device_argument_cpu_trains_as_the_default() -> None:
    splits = _splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(epochs=2, batch_size=8, lr=0.5)
    default, named = _net(7), _net(7)
    a = finetune(default, splits, config)
    b = finetune(named, splits, config, torch.device("cpu"))
    assert (a.accuracy, a.val_accuracy, a.train_loss, a.steps) == (
        b.accuracy,
        b.val_accuracy,
        b.train_loss,
        b.steps,
    )
    theirs = named.state_dict()
    for name, x in default.state_dict().items():
        assert torch.equal(x, theirs[name]), name


def test_a_task_fine_tunes_on_a_gpu_only_when_given_one_and_one_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tinytune.evaluators.task import task_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert [task_device(g) for g in (0.0, 0.25, 1.0)] == ["cpu", "cpu", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [task_device(g) for g in (0.0, 0.25, 2.0)] == ["cpu", "cuda", "cuda"]
