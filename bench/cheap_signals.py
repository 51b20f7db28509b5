"""Cheap signals of a candidate's fine-tuned accuracy: a linear probe and one backward pass.

A fine-tune costs epochs over the training split; these signals cost one forward pass over a
few hundred images and ``samples`` backward passes of one image each, on the candidate's own
network as the search builds it (:func:`tinytune.evaluators.task.network_on_data`):

* ``probe``: the validation accuracy of a linear probe, a multinomial logistic regression
  (scikit-learn) on the frozen features that reach the classifier, fitted on up to
  ``probe_images`` training images. It is the classifier-only scheme of the sub-network,
  without its epochs of SGD.
* ``fisher``: the trace of the empirical Fisher information of the parameters the scheme trains
  (besides the classifier), ``(1/N) Σ_n ‖∇_θ L_n‖²`` over ``samples`` training images, at the
  probe's classifier.
* ``grad_norm``: ``‖(1/N) Σ_n ∇_θ L_n‖²``, the squared norm of the mean gradient over the same
  parameters and images.
* ``potential``: TinyTrain's Fisher potential (Kwon et al., ICML 2024, after BlockSwap) of the
  scheme: per output channel c of a convolution, ``Δ_c = (1/2N) Σ_n (Σ_(h,w) a·g)²`` with a its
  output and g the loss gradient there; a convolution whose weight is trained on a fraction r of
  its input channels adds ``r · Σ_c Δ_c``, one whose bias is trained adds the same expression
  with a = 1 (the bias's own Fisher information). A lite residual branch starts with its last
  GroupNorm's scale at 0 (TinyTL), so its convolutions add nothing to the potential; its
  parameters count in ``fisher`` and ``grad_norm``.

Every scheme trains the classifier, so the classifier-only scheme scores 0 on the last three.
What each signal is worth is its Kendall τ against measured validation accuracy, per scheme
family and pooled (``bench/signals.py``); none of them is used to choose until measured so.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tinytune.data import Images, Splits
from tinytune.errors import ConfigError
from tinytune.models import GraphNet
from tinytune.models.layers import ConvUnit

__all__ = ["SIGNALS", "Signals", "measure_signals"]

SIGNALS = ("probe", "fisher", "grad_norm", "potential")


@dataclass(frozen=True)
class Signals:
    """The signals of one candidate (see the module docstring) and the seconds they took."""

    probe: float
    fisher: float
    grad_norm: float
    potential: float
    seconds: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _features(net: GraphNet, x: Images, batch: int = 256) -> np.ndarray:
    """What reaches the classifier, (N, C), for float images (N, 3, R, R) (an image folder's
    :class:`~tinytune.data.Pixels` converted a batch at a time)."""
    seen: list[torch.Tensor] = []
    hook = net.classifier.register_forward_pre_hook(lambda _, a: seen.append(a[0].flatten(1)))
    try:
        with torch.no_grad():
            for i in range(0, len(x), batch):
                net(torch.tensor(x[i : i + batch]))
    finally:
        hook.remove()
    return torch.cat(seen).double().numpy()


def _probe(net: GraphNet, splits: Splits, images: int, seed: int) -> float:
    """Fit the linear probe, load it into ``net``'s classifier, return its val accuracy."""
    from sklearn.linear_model import LogisticRegression

    train_x, train_y = splits.train.x[:images], splits.train.y[:images]
    n_classes = net.classifier.weight.shape[0]
    if len(np.unique(train_y)) < 2:
        raise ConfigError("a linear probe needs training images of at least two classes")
    feats = _features(net, train_x)
    model = LogisticRegression(max_iter=1000, random_state=seed).fit(feats, train_y)
    weight = np.zeros((n_classes, feats.shape[1]))
    bias = np.zeros(n_classes)
    if len(model.classes_) == 2:  # one row: the logit of the second class against the first
        weight[model.classes_[1]], bias[model.classes_[1]] = model.coef_[0], model.intercept_[0]
    else:
        weight[model.classes_], bias[model.classes_] = model.coef_, model.intercept_
    with torch.no_grad():
        net.classifier.weight.copy_(torch.from_numpy(weight))
        net.classifier.bias.copy_(torch.from_numpy(bias))
    if len(splits.val) == 0:
        return float("nan")
    return float(np.mean(model.predict(_features(net, splits.val.x)) == splits.val.y))


def _trained_convs(net: GraphNet) -> list[tuple[ConvUnit, float, bool]]:
    """Every convolution the scheme trains: (unit, fraction of its weight trained, bias?)."""
    out = []
    for module in net.modules():
        if not isinstance(module, ConvUnit):
            continue
        ratio = 0.0
        if module.weight_train is not None:
            ratio = module.trained_channels / max(1, module.split_channels)
        if ratio > 0 or module.bias.requires_grad:
            out.append((module, ratio, bool(module.bias.requires_grad)))
    return out


def measure_signals(
    net: GraphNet,
    splits: Splits,
    *,
    samples: int = 64,
    probe_images: int = 1024,
    seed: int = 0,
) -> Signals:
    """The signals of ``net`` (a candidate's network on its data; its classifier is replaced
    by the probe's) from the training split; the probe is scored on the validation split.

    Raises:
        ConfigError: fewer than one sample, or training images of a single class.
    """
    if samples < 1 or probe_images < 1:
        raise ConfigError(f"signals need samples >= 1 and probe images >= 1, got {samples}")
    start = time.perf_counter()
    net.eval()
    probe = _probe(net, splits, probe_images, seed)
    trained = [
        p
        for name, p in net.named_parameters()
        if p.requires_grad and not name.startswith("classifier.")
    ]
    convs = _trained_convs(net)
    outputs: dict[int, torch.Tensor] = {}

    def keep(module: torch.nn.Module, _: tuple, out: torch.Tensor) -> None:
        if out.requires_grad:
            outputs[id(module)] = out

    hooks = [unit.register_forward_hook(keep) for unit, _, _ in convs]
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(splits.train), size=min(samples, len(splits.train)), replace=False)
    fisher = 0.0
    mean_grad = [torch.zeros_like(p) for p in trained]
    act = {id(u): torch.zeros(u.out_channels, dtype=torch.float64) for u, _, _ in convs}
    bias = {id(u): torch.zeros(u.out_channels, dtype=torch.float64) for u, _, _ in convs}
    try:
        for i in idx:
            outputs.clear()
            x = torch.tensor(splits.train.x[i : i + 1])
            y = torch.tensor(splits.train.y[i : i + 1])
            loss = F.cross_entropy(net(x), y)
            grads = torch.autograd.grad(loss, trained, retain_graph=True) if trained else ()
            fisher += sum(float(g.double().pow(2).sum()) for g in grads)
            for acc, g in zip(mean_grad, grads, strict=True):
                acc += g
            if outputs:
                held = list(outputs.values())
                grad_out = torch.autograd.grad(loss, held)
                for k, a, g in zip(outputs, held, grad_out, strict=True):
                    act[k] += (a.detach() * g).double().sum(dim=(0, 2, 3)).pow(2)
                    bias[k] += g.double().sum(dim=(0, 2, 3)).pow(2)
    finally:
        for hook in hooks:
            hook.remove()
    n = len(idx)
    potential = sum(
        ratio * float(act[id(u)].sum()) + (float(bias[id(u)].sum()) if has_bias else 0.0)
        for u, ratio, has_bias in convs
    ) / (2 * n)
    grad_norm = sum((float((g / n).double().pow(2).sum()) for g in mean_grad), 0.0)
    return Signals(probe, fisher / n, grad_norm, potential, time.perf_counter() - start)
