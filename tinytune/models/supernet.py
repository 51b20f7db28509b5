"""Supernet weights: pre-training on a source task, named recipes, the checkpoint cache,
published weights.

A supernet that tinytune pre-trains itself is trained with the sandwich rule (Yu et al.,
"Universally Slimmable Networks", §3.3, as used by BigNAS and Once-for-All's progressive
shrinking): each step accumulates the gradients of the largest, the smallest and some random
sub-networks on one batch at one resolution drawn from the supernet's resolutions. Checkpoints
are plain dicts of tensors and primitives, so loading uses ``torch.load(weights_only=True)``;
a checkpoint may store its floating-point tensors in float16 (they are loaded back as float32).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinytune.errors import ModelError, flag
from tinytune.models.ofa_adapter import build_ofa_supernet, set_active
from tinytune.paths import cache_dir
from tinytune.spaces import StageConfig, SubnetConfig, SupernetSpec, default_subnet

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_RECIPE",
    "RECIPES",
    "PartialRun",
    "PretrainRecipe",
    "StepDraws",
    "cache_dir",
    "checkpoint_path",
    "get_recipe",
    "load_partial",
    "load_supernet",
    "pretrain_supernet",
    "random_subnet",
    "require_weights",
    "save_supernet",
    "step_rng",
]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "tinytune-supernet/1"
PUBLISHED_URL = "https://raw.githubusercontent.com/han-cai/files/master/ofa/ofa_nets/{name}"

BatchFn = Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PretrainRecipe:
    """How a supernet is pre-trained on a source task.

    The defaults are the ``quick`` recipe (300 small steps on shapes and glyphs), the default
    recipe; :data:`RECIPES` names the others.

    Attributes:
        source_classes: Classes of the source task.
        steps: Optimiser steps.
        batch_size: Images per step (every sub-network of a step sees the same batch).
        lr: Peak learning rate of SGD with Nesterov momentum 0.9.
        weight_decay: On weights of two or more dimensions only.
        seed: Seed of the network's initialisation, the source task and every draw.
        source: Source task, a name of ``tinytune.data.sources.SOURCE_TASKS``.
        warmup_steps: Linear warm-up steps before the cosine decay to 0.
        random_subnets: Random sub-networks per step, besides the largest and the smallest.
        mix_prob: Share of steps that mix their batch by mixup (α 0.8) or CutMix (α 1.0), half
            each, with the targets mixed alike.
        stream: How the random draws of the steps are made. ``sequential``: one generator
            for the whole run, so batches are drawn one after another in the training process.
            ``per-step``: each step's batch, resolution, sub-networks and mixing come from
            generators seeded by ``(seed, step)``, so that worker processes can draw batches
            ahead in any order and the run draws the same for any number of workers (on the
            CPU the weights are then identical).
    """

    source_classes: int = 80
    steps: int = 300
    batch_size: int = 48
    lr: float = 0.1
    weight_decay: float = 3e-5
    seed: int = 0
    source: str = "shapes-glyphs"
    warmup_steps: int = 0
    random_subnets: int = 2
    mix_prob: float = 0.0
    stream: str = "sequential"

    def __post_init__(self) -> None:
        for name in ("source_classes", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ModelError(f"pre-training {name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.random_subnets < 0:
            raise ModelError(
                f"warmup_steps and random_subnets must be >= 0, got {self.warmup_steps} and "
                f"{self.random_subnets}"
            )
        if not 0.0 <= self.mix_prob <= 1.0:
            raise ModelError(f"mix_prob must lie in [0, 1], got {self.mix_prob}")
        if self.stream not in STREAMS:
            raise ModelError(f"unknown draw stream {self.stream!r}; allowed: {', '.join(STREAMS)}")

    @property
    def digest(self) -> str:
        """Ten hex digits of the SHA-256 of the recipe's fields; fields added after the first
        version count only where they differ from their defaults, so older digests hold."""
        fields = asdict(self)
        for name, value in _LATER_FIELDS.items():
            if fields[name] == value:
                del fields[name]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_LATER_FIELDS = {
    "source": "shapes-glyphs",
    "warmup_steps": 0,
    "random_subnets": 2,
    "mix_prob": 0.0,
    "stream": "sequential",
}
STREAMS = ("sequential", "per-step")

_GLYPHS_GPU = PretrainRecipe(
    source="shapes-glyphs",
    source_classes=200,
    steps=3000,
    batch_size=256,
    lr=0.3,
    weight_decay=4e-5,
    warmup_steps=300,
    random_subnets=2,
    mix_prob=0.2,
    stream="per-step",
)
"""The shipped checkpoint's recipe (below, ``glyphs-gpu``)."""

RECIPES: dict[str, PretrainRecipe] = {
    # The default: 300 steps of 48 shape and stroke-glyph images, each step the sandwich rule
    # with the largest, the smallest and two random sub-networks, cosine LR from 0.1
    # (≈4 minutes of one core). Glyph strokes resemble characters, and on ``digits`` this
    # transfers better than an hour of ``formula-cpu`` (docs/bench/pretraining.md).
    "quick": PretrainRecipe(),
    # Formula-driven pre-training sized for under an hour of one CPU core (≈0.2M images; the
    # published FDSL recipes use 20–300M, so everything here favours fast convergence):
    # * 1,000 classes of fractals, contours, shapes and glyphs (FDSL uses ~1k classes; a
    #   harder task with more variety transfers better, Kataoka et al. 2022);
    # * batch 96 with peak LR 0.15 (linear scaling of SGD's 0.1 at 64) after a short warm-up,
    #   cosine decay to 0 so that a run's final weights are its best;
    # * the sandwich rule with the largest, the smallest and one random sub-network: the
    #   default sub-network of the search is the smallest, so it is trained every step, and
    #   the smallest costs about a sixth of the largest, so the step costs ≈1.7 largest ones
    #   (a largest-only first phase would leave the smallest sub-network undertrained in so
    #   few steps);
    # * mixup/CutMix on half the steps (the augmentations OFDB and 1p-frac found to matter),
    #   not all, since so short a run must still fit the source task.
    "formula-cpu": PretrainRecipe(
        source="formula",
        source_classes=1000,
        steps=2000,
        batch_size=96,
        lr=0.15,
        weight_decay=4e-5,
        warmup_steps=150,
        random_subnets=1,
        mix_prob=0.5,
    ),
    # The shipped checkpoint's recipe: 53 times the images of ``quick`` (0.77M), 200 classes
    # (100 shapes, 100 glyphs), batches of 256 drawn ahead by worker processes (per-step
    # draws), peak LR 0.3 after 300 warm-up steps, mixup/CutMix on a fifth of the steps. Seven
    # minutes on one H100 (docs/bench/pretraining.md); many hours on two CPU cores. On
    # ``digits`` the linear probe of the default sub-network rises from 75 % (``quick``) to 91 %
    # (validation).
    "glyphs-gpu": _GLYPHS_GPU,
    # glyphs-gpu at four times the batch (1,024) and 2.7 times the images (2.05M), peak LR 0.6
    # (square-root scaling of 0.3 at 256): 7 minutes on one H200. Kept to reproduce a measured
    # negative result: at this batch the features transfer worse to ``digits``, already at the
    # shipped run's images (``--steps 750``: linear probe 86 % against 91 % validation) and
    # more so with more (83 % at 2.05M), full fine-tuning no better (docs/bench/pretraining.md);
    # the shipped checkpoint stays ``glyphs-gpu``.
    "glyphs-gpu-xl": replace(_GLYPHS_GPU, steps=2000, batch_size=1024, lr=0.6),
}
"""Named pre-training recipes (``tinytune pretrain --recipe NAME``)."""

DEFAULT_RECIPE = "quick"
"""The recipe a supernet is pre-trained by, into the cache, when the package ships no
checkpoint of it (minutes on a CPU). The default supernet's shipped checkpoint was made by
``glyphs-gpu`` (its record says so). ``formula-cpu`` transferred worse to ``digits`` in its
one-hour CPU form (linear probe 57 % vs 76 %, full fine-tuning 79 % vs 96 % test,
validation-selected; see docs/bench/pretraining.md)."""


def get_recipe(name: str) -> PretrainRecipe:
    """The named recipe.

    Raises:
        ModelError: ``name`` is not a key of :data:`RECIPES` (the message lists them).
    """
    try:
        return RECIPES[name]
    except KeyError:
        raise ModelError(
            f"unknown pre-training recipe {name!r}; allowed: {', '.join(RECIPES)}"
        ) from None


def checkpoint_path(spec: SupernetSpec, recipe: PretrainRecipe) -> Path:
    return cache_dir() / "supernets" / f"{spec.name}-{recipe.digest}.pt"


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
    decay = [p for n, p in net.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in net.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay}],
        lr=recipe.lr,
        momentum=0.9,
        nesterov=True,
    )
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
        subnets = [default_subnet(spec, "max"), default_subnet(spec, "min")]
        subnets += [random_subnet(spec, rng, res) for _ in range(recipe.random_subnets)]
        total = torch.zeros((), device=device)
        for sub in subnets:
            set_active(net, spec, sub)
            logits = net(xt)
            loss = F.cross_entropy(logits, yt, label_smoothing=0.1)
            if perm is not None:
                loss = lam * loss + (1 - lam) * F.cross_entropy(
                    logits, yt[perm], label_smoothing=0.1
                )
            loss.backward()
            total += loss.detach()
        nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        if progress is not None:
            progress(step + 1, recipe.steps, float(total) / len(subnets))
        if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0:
            set_active(net, spec, default_subnet(spec, "max"))
            checkpoint(net, step + 1, opt.state_dict())
    set_active(net, spec, default_subnet(spec, "max"))
    return net.cpu()


@dataclass(frozen=True)
class PartialRun:
    """A pre-training run stopped after ``step`` steps: what it needs to go on."""

    recipe: PretrainRecipe
    step: int
    state_dict: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


def load_partial(spec: SupernetSpec, path: Path) -> PartialRun | None:
    """The partial run saved at ``path`` with its optimiser state, or None where the file
    holds none (a checkpoint saved before partial runs kept it).

    Raises:
        ModelError: the file cannot be read or is of another supernet.
    """
    way_out = "start over with 'tinytune pretrain --force', or remove it"
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        reason = "not a PyTorch file" if "Weights only load failed" in str(e) else text
        raise ModelError(f"cannot read the partial run {str(path)!r} ({reason}); {way_out}") from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ModelError(f"{str(path)!r} is not a partial run of tinytune's; {way_out}")
    if data.get("supernet") != spec.name:
        raise ModelError(
            f"{str(path)!r} is a partial run of supernet {data.get('supernet')}, not "
            f"{spec.name}; {way_out}"
        )
    if "optimizer" not in data or "step" not in data:
        return None
    fields = {k: v for k, v in data["recipe"].items() if k in PretrainRecipe.__dataclass_fields__}
    return PartialRun(
        PretrainRecipe(**fields), int(data["step"]), data["state_dict"], data["optimizer"]
    )


def save_supernet(
    net: nn.Module,
    spec: SupernetSpec,
    recipe: PretrainRecipe | None,
    path: Path,
    *,
    half: bool = False,
    partial: tuple[int, dict[str, Any]] | None = None,
) -> None:
    """Write a checkpoint atomically (a temporary file renamed into place).

    Args:
        half: store floating-point tensors as float16 (half the size; :func:`load_supernet`
            converts them back to float32).
        partial: ``(steps done, optimiser state)`` of a run that goes on: saved beside the
            weights so that :func:`load_partial` can resume it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        key: value.detach().cpu().half() if half and value.is_floating_point() else value.cpu()
        for key, value in net.state_dict().items()
    }
    payload = {
        "format": CHECKPOINT_FORMAT,
        "supernet": spec.name,
        "n_classes": int(net.classifier.linear.out_features),
        "recipe": asdict(recipe) if recipe is not None else {},
        "state_dict": state,
    }
    if partial is not None:
        payload["step"], payload["optimizer"] = partial
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    torch.save(payload, tmp)
    tmp.replace(path)


def _published_state(spec: SupernetSpec, path: Path) -> dict[str, torch.Tensor]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        expected = f"the weights of {spec.name}" if spec.fixed else None
        raise ModelError(_unreadable(path, "supernet weights", e, expected)) from e
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise ModelError(f"{str(path)!r} holds no state dict for {spec.name}")
    return state


_CHECKPOINTS = "a file written by 'tinytune pretrain' or a published Once-for-All checkpoint"


def _unreadable(path: Path, what: str, error: Exception, expected: str | None = None) -> str:
    """One line on a file ``torch.load`` refused: not a file of tensors, whatever torch's own
    message suggests (it proposes loading with ``weights_only=False``, which runs the file's
    code, and tinytune never does that)."""
    text = str(error)
    reason = text.splitlines()[0] if text else type(error).__name__
    if "Weights only load failed" in text:
        reason = (
            "it holds objects besides tensors, and tinytune loads only tensors"
            if "Unsupported global" in text
            else "not a PyTorch checkpoint"
        )
    return (
        f"cannot read {what} {str(path)!r}: {reason.rstrip('.')}; expected "
        f"{expected or _CHECKPOINTS}"
    )


def _reason(error: Exception) -> str:
    """The first line of a failed ``load_state_dict`` that names a tensor (torch puts a header
    line first; ofa's loader asserts without a message on a name it does not know)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Error(s) in loading")]
    return lines[0].rstrip(".") if lines else "it holds a tensor of a name the network has not"


def require_weights(spec: SupernetSpec, path: Path | None) -> None:
    """Weights a supernet can load: a published supernet's must be given (tinytune never
    downloads them; without them it cannot be pre-trained here), and given weights must be a file.

    Raises:
        ModelError: ``spec`` is published and ``path`` is None, or ``path`` is not a file.
    """
    if path is not None and path.is_file():
        return
    if path is None and spec.weights_package:
        from tinytune.models.pretrained import pretrained_weights

        pretrained_weights(spec)  # installed and intact, or one line saying how to get it
        return
    if path is None and spec.config_file:
        raise ModelError(
            f"the network of {spec.config_file!r} needs its weights, which tinytune does not "
            "download: pass the weights file downloaded with the config as "
            + flag("weights")
            + " FILE"
        )
    if path is not None and path.is_dir():
        raise ModelError(f"supernet checkpoint {str(path)!r} is a folder; name the file in it")
    missing = f"supernet checkpoint {str(path)!r} does not exist" if path is not None else ""
    if spec.published:
        raise ModelError(
            f"{missing}{'; ' if missing else ''}supernet {spec.name} needs its published "
            f"ImageNet weights, which tinytune does not download: fetch "
            f"{PUBLISHED_URL.format(name=spec.name)} and pass the file with "
            + flag("weights")
            + " FILE"
        )
    if missing:
        raise ModelError(missing)


def load_supernet(spec: SupernetSpec, path: Path) -> nn.Module:
    """Load a supernet checkpoint written by :func:`save_supernet`, a published
    Once-for-All ImageNet checkpoint (for published supernets), or a fixed network's ImageNet
    weights (a state dict named as its registry package names it)."""
    require_weights(spec, path)
    if spec.fixed:
        from tinytune.models.pretrained import lite0_state
        from tinytune.spaces.configs import read_config

        classes = 1000
        if spec.config_file:
            classes = read_config(spec.config_file)["classifier"].get("out_features", classes)
        net = build_ofa_supernet(spec, int(classes))
        state = _published_state(spec, path)
        try:  # ofa's loader keeps the tensors the state leaves out (the batch counters) and
            # renames the zoo's "mobile_inverted_conv" to "conv"; it asserts on other names
            net.load_state_dict(state if spec.config_file else lite0_state(spec, state))
        except (RuntimeError, ModelError, AssertionError, KeyError) as e:
            raise ModelError(f"{str(path)!r} does not match {spec.name}: {_reason(e)}") from e
        return net
    if spec.published:
        net = build_ofa_supernet(spec, 1000)
        state = _published_state(spec, path)
        try:
            net.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError) as e:  # ofa remaps keys and raises ValueError
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelError(f"{str(path)!r} does not match supernet {spec.name}: {detail}") from e
        return net
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelError(_unreadable(path, "supernet checkpoint", e)) from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ModelError(
            f"{str(path)!r} is not a tinytune supernet checkpoint ({CHECKPOINT_FORMAT})"
        )
    if data["supernet"] != spec.name:
        raise ModelError(f"{str(path)!r} holds supernet {data['supernet']}, not {spec.name}")
    net = build_ofa_supernet(spec, int(data["n_classes"]))
    state = {
        key: value.float() if value.is_floating_point() else value
        for key, value in data["state_dict"].items()
    }
    try:
        net.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"{str(path)!r} does not match supernet {spec.name}: {detail}") from e
    return net
