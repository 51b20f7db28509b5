"""Supernet weights: pre-training on the source task, the checkpoint cache, published weights.

A supernet that tinytune pre-trains itself is trained with the sandwich rule (Yu et al.,
"Universally Slimmable Networks", §3.3, as used by BigNAS and Once-for-All's progressive
shrinking): each step accumulates the gradients of the largest, the smallest and two random
sub-networks on one batch at one resolution drawn from the supernet's resolutions. Checkpoints
are plain dicts of tensors and primitives, so loading uses ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinytune.errors import ModelError
from tinytune.models.ofa_adapter import build_ofa_supernet, set_active
from tinytune.spaces import StageConfig, SubnetConfig, SupernetSpec, default_subnet

__all__ = [
    "CHECKPOINT_FORMAT",
    "PretrainRecipe",
    "cache_dir",
    "checkpoint_path",
    "load_supernet",
    "pretrain_supernet",
    "random_subnet",
    "save_supernet",
]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "tinytune-supernet/1"
PUBLISHED_URL = "https://raw.githubusercontent.com/han-cai/files/master/ofa/ofa_nets/{name}"

BatchFn = Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PretrainRecipe:
    """How a supernet is pre-trained on the procedural source task."""

    source_classes: int = 80
    steps: int = 300
    batch_size: int = 48
    lr: float = 0.1
    weight_decay: float = 3e-5
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("source_classes", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ModelError(f"pre-training {name} must be >= 1, got {getattr(self, name)}")

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


def cache_dir() -> Path:
    """``$TINYTUNE_CACHE``, else ``$XDG_CACHE_HOME/tinytune``, else ``~/.cache/tinytune``."""
    if os.environ.get("TINYTUNE_CACHE"):
        return Path(os.environ["TINYTUNE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinytune"


def checkpoint_path(spec: SupernetSpec, recipe: PretrainRecipe) -> Path:
    return cache_dir() / "supernets" / f"{spec.name}-{recipe.digest}.pt"


def random_subnet(spec: SupernetSpec, rng: random.Random, resolution: int) -> SubnetConfig:
    """A uniformly random sub-network at a given resolution."""
    stages = []
    for i in range(spec.n_stages):
        depth = rng.choice(spec.stage_depths(i))
        stages.append(
            StageConfig(
                tuple(rng.choice(spec.ks_choices) for _ in range(depth)),
                tuple(rng.choice(spec.expand_choices) for _ in range(depth)),
            )
        )
    return SubnetConfig(resolution, tuple(stages))


def pretrain_supernet(
    spec: SupernetSpec,
    recipe: PretrainRecipe,
    batch_fn: BatchFn,
    progress: Callable[[int, int, float], None] | None = None,
) -> nn.Module:
    """Pre-train a supernet from scratch with the sandwich rule.

    Args:
        spec: the supernet.
        recipe: steps, batch size, learning rate, seed.
        batch_fn: ``(n, resolution, rng) -> (x, y)`` drawing source-task images.
        progress: called after each step with (step, steps, loss).
    """
    if spec.published:
        raise ModelError(f"{spec.name} is a published supernet: load its weights, do not train it")
    rng = random.Random(recipe.seed)
    np_rng = np.random.default_rng(recipe.seed)
    net = build_ofa_supernet(spec, recipe.source_classes, seed=recipe.seed)
    decay = [p for n, p in net.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in net.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay}],
        lr=recipe.lr,
        momentum=0.9,
        nesterov=True,
    )
    net.train()
    for step in range(recipe.steps):
        lr = 0.5 * recipe.lr * (1 + math.cos(math.pi * step / recipe.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        res = rng.choice(spec.resolutions)
        x, y = batch_fn(recipe.batch_size, res, np_rng)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        opt.zero_grad(set_to_none=True)
        subnets = [
            default_subnet(spec, "max"),
            default_subnet(spec, "min"),
            random_subnet(spec, rng, res),
            random_subnet(spec, rng, res),
        ]
        total = 0.0
        for sub in subnets:
            set_active(net, spec, sub)
            loss = F.cross_entropy(net(xt), yt, label_smoothing=0.1)
            loss.backward()
            total += float(loss.detach())
        nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        if progress is not None:
            progress(step + 1, recipe.steps, total / len(subnets))
    set_active(net, spec, default_subnet(spec, "max"))
    return net


def save_supernet(
    net: nn.Module, spec: SupernetSpec, recipe: PretrainRecipe | None, path: Path
) -> None:
    """Write a checkpoint atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "supernet": spec.name,
        "n_classes": int(net.classifier.linear.out_features),
        "recipe": asdict(recipe) if recipe is not None else {},
        "state_dict": net.state_dict(),
    }
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    torch.save(payload, tmp)
    tmp.replace(path)


def _published_state(spec: SupernetSpec, path: Path) -> dict[str, torch.Tensor]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelError(f"cannot read supernet weights {str(path)!r}: {e}".splitlines()[0]) from e
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise ModelError(f"{str(path)!r} holds no state dict for {spec.name}")
    return state


def load_supernet(spec: SupernetSpec, path: Path) -> nn.Module:
    """Load a supernet checkpoint written by :func:`save_supernet`, or a published
    Once-for-All ImageNet checkpoint (for published supernets)."""
    if not path.is_file():
        if spec.published:
            raise ModelError(
                f"supernet {spec.name} needs its published ImageNet weights, which tinytune does "
                f"not download: fetch {PUBLISHED_URL.format(name=spec.name)} and pass the file "
                "with --weights FILE"
            )
        raise ModelError(f"supernet checkpoint {str(path)!r} does not exist")
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
        raise ModelError(
            f"cannot read supernet checkpoint {str(path)!r}: {e}".splitlines()[0]
        ) from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ModelError(
            f"{str(path)!r} is not a tinytune supernet checkpoint ({CHECKPOINT_FORMAT})"
        )
    if data["supernet"] != spec.name:
        raise ModelError(f"{str(path)!r} holds supernet {data['supernet']}, not {spec.name}")
    net = build_ofa_supernet(spec, int(data["n_classes"]))
    try:
        net.load_state_dict(data["state_dict"])
    except (RuntimeError, ValueError, KeyError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"{str(path)!r} does not match supernet {spec.name}: {detail}") from e
    return net
