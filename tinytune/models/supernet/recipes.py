"""Named recipes of pre-training a supernet (:class:`PretrainRecipe`), and the one a supernet is
pre-trained by when the package ships no checkpoint of it (:data:`DEFAULT_RECIPE`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

from tinytune.errors import ModelError

__all__ = ["DEFAULT_RECIPE", "RECIPES", "PretrainRecipe", "get_recipe"]


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
