"""Pre-training a supernet on a source task with the sandwich rule (Yu et al., "Universally
Slimmable Networks", §3.3, as used by BigNAS and Once-for-All's progressive shrinking): each step
accumulates the gradients of the largest, the smallest and some random sub-networks on one batch
at one resolution drawn from the supernet's resolutions.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.ofa_adapter import build_ofa_supernet, set_active
from tinytune.models.supernet.files import (
    PartialRun,
)
from tinytune.models.supernet.recipes import PretrainRecipe
from tinytune.spaces import StageConfig, SubnetConfig, SupernetSpec, default_subnet

__all__ = ["StepDraws", "pretrain_supernet", "random_subnet", "step_rng"]

log = logging.getLogger(__name__)

BatchFn = Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def random_subnet(spec: SupernetSpec, rng: random.Random, resolution: int) -> SubnetConfig:
    """A uniformly random sub-network at a given resolution."""
    stages = []
    for i in range(spec.n_stages):
        depth = rng.choice(spec.stage_depths(i))
        stages.append(
            StageConfig(
                tuple(rng.choice(spec.block_kernels(i, b)) for b in range(depth)),
                tuple(rng.choice(spec.block_expands(i, b)) for b in range(depth)),
            )
        )
    return SubnetConfig(resolution, tuple(stages))


def _lr_at(recipe: PretrainRecipe, step: int) -> float:
    """Linear warm-up to ``recipe.lr``, then cosine decay to 0 at ``recipe.steps``."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    done = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    return 0.5 * recipe.lr * (1 + math.cos(math.pi * done))


def _mix(x: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Mixup (Zhang et al. 2018, α 0.8) or CutMix (Yun et al. 2019, α 1.0), half each.

    Returns:
        The mixed images, the permutation of the partners and λ, the weight of the own label.
    """
    n, r = x.shape[0], x.shape[-1]
    perm = torch.from_numpy(rng.permutation(n))
    if rng.random() < 0.5:
        lam = float(rng.beta(0.8, 0.8))
        return lam * x + (1 - lam) * x[perm], perm, lam
    lam = float(rng.beta(1.0, 1.0))
    side = round(r * math.sqrt(1 - lam))
    top, left = (int(v) for v in rng.integers(0, r - side + 1, 2))
    mixed = x.clone()
    mixed[:, :, top : top + side, left : left + side] = x[
        perm, :, top : top + side, left : left + side
    ]
    return mixed, perm, 1.0 - side * side / (r * r)


class StepDraws(torch.utils.data.Dataset):
    """The batches of a ``per-step`` run by step number (a dataset, so that DataLoader workers
    draw them ahead): step ``s`` draws its resolution from :func:`step_rng` and its images from
    a generator seeded by ``(seed, s, 0)``."""

    def __init__(self, spec: SupernetSpec, recipe: PretrainRecipe, batch_fn: BatchFn) -> None:
        self.spec, self.recipe, self.batch_fn = spec, recipe, batch_fn

    def __len__(self) -> int:
        return self.recipe.steps

    def __getitem__(self, step: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        res = step_rng(self.recipe, step).choice(self.spec.resolutions)
        x, y = self.batch_fn(
            self.recipe.batch_size, res, np.random.default_rng([self.recipe.seed, step, 0])
        )
        return res, torch.from_numpy(x), torch.from_numpy(y)


def step_rng(recipe: PretrainRecipe, step: int) -> random.Random:
    """The generator of a ``per-step`` step's resolution (its first draw) and sub-networks."""
    return random.Random(f"{recipe.seed}/{step}")


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)


def _step_stream(
    spec: SupernetSpec,
    recipe: PretrainRecipe,
    batch_fn: BatchFn,
    workers: int,
    device: str,
    start: int = 0,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, random.Random, np.random.Generator]]:
    """``(resolution, x, y, rng, np_rng)`` for each step from ``start`` (``per-step`` streams
    only; a ``sequential`` one starts at 0); ``rng`` draws the random sub-networks after the
    resolution, ``np_rng`` the mixing."""
    if recipe.stream == "sequential":
        if start:
            raise ModelError("a 'sequential' recipe's run cannot resume; a 'per-step' one can")
        if workers:
            raise ModelError(
                "this recipe draws its batches in one sequence (stream 'sequential'); "
                "batch workers need a 'per-step' recipe"
            )
        rng = random.Random(recipe.seed)
        np_rng = np.random.default_rng(recipe.seed)
        for _ in range(recipe.steps):
            res = rng.choice(spec.resolutions)
            x, y = batch_fn(recipe.batch_size, res, np_rng)
            yield res, torch.from_numpy(x), torch.from_numpy(y), rng, np_rng
        return
    draws = torch.utils.data.Subset(StepDraws(spec, recipe, batch_fn), range(start, recipe.steps))
    loader = torch.utils.data.DataLoader(
        draws,
        batch_size=None,
        num_workers=workers,
        prefetch_factor=4 if workers else None,
        worker_init_fn=_one_thread if workers else None,
        pin_memory=device.startswith("cuda"),
    )
    for step, (res, x, y) in enumerate(loader, start):
        rng = step_rng(recipe, step)
        rng.choice(spec.resolutions)  # the resolution's draw, made in the worker
        yield int(res), x, y, rng, np.random.default_rng([recipe.seed, step, 1])


def _optimizer(net: nn.Module, recipe: PretrainRecipe) -> torch.optim.SGD:
    """SGD with Nesterov momentum; weight decay on weights (not on biases and norms)."""
    decay = [p for n, p in net.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in net.named_parameters() if p.ndim <= 1]
    return torch.optim.SGD(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay}],
        lr=recipe.lr,
        momentum=0.9,
        nesterov=True,
    )


def _sandwich(
    net: nn.Module,
    spec: SupernetSpec,
    recipe: PretrainRecipe,
    batch: tuple[Tensor, Tensor, Tensor | None, float],
    rng: Any,
    res: int,
) -> Tensor:
    """The sandwich rule's gradients of one batch, accumulated in ``net``: the largest, the
    smallest and ``recipe.random_subnets`` random sub-networks at resolution ``res``, each on
    the batch ``(x, y, perm, lam)`` (a mix: ``lam`` of ``y``'s loss, the rest of
    ``y[perm]``'s). Their losses' sum (detached)."""
    x, y, perm, lam = batch
    subnets = [default_subnet(spec, "max"), default_subnet(spec, "min")]
    subnets += [random_subnet(spec, rng, res) for _ in range(recipe.random_subnets)]
    total = torch.zeros((), device=x.device)
    for sub in subnets:
        set_active(net, spec, sub)
        logits = net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        if perm is not None:
            loss = lam * loss + (1 - lam) * F.cross_entropy(logits, y[perm], label_smoothing=0.1)
        loss.backward()
        total += loss.detach()
    return total


def pretrain_supernet(
    spec: SupernetSpec,
    recipe: PretrainRecipe,
    batch_fn: BatchFn,
    progress: Callable[[int, int, float], None] | None = None,
    *,
    device: str = "cpu",
    checkpoint: Callable[[nn.Module, int, dict[str, Any]], None] | None = None,
    checkpoint_every: int = 0,
    workers: int = 0,
    resume: PartialRun | None = None,
) -> nn.Module:
    """Pre-train a supernet from scratch with the sandwich rule.

    Args:
        spec: the supernet.
        recipe: steps, batch size, learning rate, seed.
        batch_fn: ``(n, resolution, rng) -> (x, y)`` drawing source-task images.
        progress: called after each step with (step, steps, loss).
        device: torch device to train on (``cpu`` or ``cuda``); the network returned is on
            the CPU.
        checkpoint: called as ``(net, step, optimizer_state)`` every ``checkpoint_every``
            steps (with the largest sub-network active), so that a partial run is usable and
            can be resumed.
        checkpoint_every: steps between calls of ``checkpoint``; 0 never calls it.
        workers: processes drawing batches ahead (``per-step`` recipes only; what is drawn
            does not depend on their number). 0 draws them in this process.
        resume: a partial run of this recipe to go on from (``per-step`` recipes only): its
            weights, optimiser state and steps done. The steps after it draw what they would
            have drawn, so the result is the uninterrupted run's (exactly, on the CPU).

    Raises:
        ModelError: ``spec`` is published, or ``workers`` is set for a ``sequential`` recipe.
    """
    if spec.published or spec.fixed:
        raise ModelError(
            f"{spec.name} is a published {'network' if spec.fixed else 'supernet'}: load its "
            "weights, do not train it"
        )
    if workers < 0:
        raise ModelError(f"batch workers must be >= 0, got {workers}")
    net = build_ofa_supernet(spec, recipe.source_classes, seed=recipe.seed)
    if resume is not None:
        net.load_state_dict(resume.state_dict)
    net = net.to(device)
    opt = _optimizer(net, recipe)
    start = 0
    if resume is not None:
        opt.load_state_dict(resume.optimizer)
        start = resume.step
    net.train()
    stream = _step_stream(spec, recipe, batch_fn, workers, device, start)
    for step, (res, x, y, rng, np_rng) in enumerate(stream, start):
        for group in opt.param_groups:
            group["lr"] = _lr_at(recipe, step)
        xt, yt = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        perm, lam = None, 1.0
        if recipe.mix_prob and np_rng.random() < recipe.mix_prob:
            xt, perm, lam = _mix(xt, np_rng)
            perm = perm.to(device)
        opt.zero_grad(set_to_none=True)
        total = _sandwich(net, spec, recipe, (xt, yt, perm, lam), rng, res)
        nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        if progress is not None:  # the mean over the sub-networks
            progress(step + 1, recipe.steps, float(total) / (2 + recipe.random_subnets))
        if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0:
            set_active(net, spec, default_subnet(spec, "max"))
            checkpoint(net, step + 1, opt.state_dict())
    set_active(net, spec, default_subnet(spec, "max"))
    return net.cpu()
