"""The mutation operators: a candidate changed by one or two steps, each drawn at random among

* dropping one weight-updated layer, or halving one's ratio of input channels,
* adding one inside the bias-updated tail (any ratio), or doubling one's ratio,
* shortening the bias-updated tail (never past a weight-updated layer), or lengthening it,
* the next input resolution up or down, another kernel size or expand ratio of one block (as
  Once-for-All's evolutionary search mutates its sub-networks),
* one stage a block deeper or shallower, a fixed network cut one stage later or earlier, a lite
  residual branch more or fewer on the last blocks: the update scheme and the branches are
  carried over counted from the output (the last k biases stay the last k), which is where the
  sparse update and TinyTL's branches sit,
* the next patch count up or down, where the search proposes patches.

MCUNetV3 finds its sparse schemes so, by an evolutionary search over the update scheme of one
sub-network (§2.3). A parent over a budget (a baseline preset under a tight SRAM budget) is
repaired rather than mutated: shrunk by random steps (drop a weight-updated layer, halve a
ratio, shorten the bias tail, remove the first lite residual branch) until its predicted cost
fits. A parent that a baseline preset made keeps its preset's rule in half of its mutants: its
sub-network moves by one or two steps and the preset's scheme is made anew for it
(:func:`preset_move`). Only mutants the joint space expresses are drawn
(:func:`tinytune.search.proposals.encoding.joint_params`). Optuna offers no such operator for
define-by-run spaces (its NSGA-II mutates its own population of a fixed space), hence this
module.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any

from tinytune.search.proposals.encoding import joint_params
from tinytune.spaces import (
    Candidate,
    SupernetSpec,
    block_count,
    conv_kinds,
    make_preset,
    subnet_params,
    suggest_candidate,
)
from tinytune.spaces.candidate import (
    LITE_DOWNSAMPLE,
    LITE_EXPAND,
    WEIGHT_RATIOS,
    LiteResidualBranch,
    LiteResidualConfig,
    Schedule,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
)
from tinytune.spaces.sampling import MAX_WEIGHT_LAYERS

__all__ = [
    "MAX_STEPS",
    "OPERATORS",
    "REPAIR_OPERATORS",
    "STRUCTURE_OPERATORS",
    "SUBNET_OPERATORS",
    "mutant",
    "mutate_scheme",
    "mutate_structure",
    "mutate_subnet",
    "operators_for",
    "preset_move",
]

OPERATORS = ("drop", "narrow", "add", "widen", "shorten", "lengthen")
SUBNET_OPERATORS = ("resolution", "kernel", "expand")
STRUCTURE_OPERATORS = ("cut", "depth", "branch")
MAX_STEPS = 2
"""A mutant is one or two operator steps from its parent (drawn with equal chance)."""
REPAIR_OPERATORS = ("drop", "narrow", "shorten", "unbranch")
REPAIR_STEPS = 12
"""An over-budget parent is shrunk by at most this many steps."""


def mutate_scheme(
    scheme: UpdateScheme, n_convs: int, operator: str, rng: random.Random
) -> UpdateScheme | None:
    """``scheme`` changed by one ``operator`` step (:data:`OPERATORS`); None where the operator
    does not apply (nothing to drop, a full tail to lengthen, ...)."""
    k, weights = scheme.bias_last_k, dict(scheme.weights)
    tail_start = n_convs - k  # the first bias-updated convolution
    if operator == "drop" and weights:
        del weights[rng.choice(sorted(weights))]
    elif operator == "narrow" and any(r > WEIGHT_RATIOS[0] for r in weights.values()):
        layer = rng.choice(sorted(i for i, r in weights.items() if r > WEIGHT_RATIOS[0]))
        weights[layer] = WEIGHT_RATIOS[WEIGHT_RATIOS.index(weights[layer]) - 1]
    elif operator == "widen" and any(r < WEIGHT_RATIOS[-1] for r in weights.values()):
        layer = rng.choice(sorted(i for i, r in weights.items() if r < WEIGHT_RATIOS[-1]))
        weights[layer] = WEIGHT_RATIOS[WEIGHT_RATIOS.index(weights[layer]) + 1]
    elif operator == "add" and k > len(weights) and len(weights) < MAX_WEIGHT_LAYERS:
        layer = rng.choice([i for i in range(tail_start, n_convs) if i not in weights])
        weights[layer] = rng.choice(WEIGHT_RATIOS)
    elif operator == "shorten" and k > 0:
        # never past a weight-updated layer: a trained weight lies inside the bias tail
        shortest = n_convs - min(weights) if weights else 0
        if shortest >= k:
            return None
        k = rng.randint(shortest, k - 1)
    elif operator == "lengthen" and k < n_convs:
        k = rng.randint(k + 1, min(n_convs, max(2 * k, k + 4)))
    else:
        return None
    return UpdateScheme(k, tuple(sorted(weights.items())), scheme.norm)


def mutate_subnet(
    subnet: SubnetConfig, spec: SupernetSpec, operator: str, rng: random.Random
) -> SubnetConfig | None:
    """``subnet`` changed by one ``operator`` step (:data:`SUBNET_OPERATORS`): the next input
    resolution up or down, or another kernel size or expand ratio of one active block. Depths
    stay, so the convolutions keep their indices and the update scheme stays valid. None
    where the operator does not apply."""
    if operator == "resolution":
        i = spec.resolutions.index(subnet.resolution)
        near = [spec.resolutions[j] for j in (i - 1, i + 1) if 0 <= j < len(spec.resolutions)]
        return dataclasses.replace(subnet, resolution=rng.choice(near)) if near else None
    if operator not in ("kernel", "expand"):
        return None
    s = rng.randrange(len(subnet.stages))
    stage = subnet.stages[s]
    b = rng.randrange(stage.depth)
    choices = spec.block_kernels(s, b) if operator == "kernel" else spec.block_expands(s, b)
    if len(choices) < 2:
        return None
    values = list(stage.ks if operator == "kernel" else stage.e)
    values[b] = rng.choice([v for v in choices if v != values[b]])
    field = "ks" if operator == "kernel" else "e"
    stages = list(subnet.stages)
    stages[s] = dataclasses.replace(stage, **{field: tuple(values)})
    return dataclasses.replace(subnet, stages=tuple(stages))


def _restructured(candidate: Candidate, spec: SupernetSpec, subnet: SubnetConfig) -> Candidate:
    """``candidate`` on ``subnet``, a sub-network with more or fewer blocks: its update scheme and
    lite residual branches kept where they are counted from the output (the last k biases, the
    weight-updated layer n convolutions before the last, the branches on the last m blocks),
    what falls off the front dropped."""
    n_old, n_new = len(conv_kinds(spec, candidate.subnet)), len(conv_kinds(spec, subnet))
    shift = n_new - n_old
    update = candidate.update
    weights = tuple((i + shift, r) for i, r in update.weights if i + shift >= 0)
    scheme = UpdateScheme(min(update.bias_last_k, n_new), weights, update.norm)
    moved = subnet.n_blocks - candidate.subnet.n_blocks
    branches = tuple(
        (b + moved, shape) for b, shape in candidate.lite_residual.branches if b + moved >= 1
    )
    # a patch count asked for stays asked for (the stem alone until it is scheduled)
    asked = Schedule(candidate.schedule.patches, 0) if candidate.schedule.patched else Schedule()
    return Candidate(candidate.supernet, subnet, LiteResidualConfig(branches), scheme, asked)


def _stage(spec: SupernetSpec, s: int, depth: int, rng: random.Random) -> StageConfig:
    """Stage ``s`` at ``depth`` blocks, each block's kernel and expand ratio drawn among the
    network's choices (a fixed network has one)."""
    ks = tuple(rng.choice(spec.block_kernels(s, b)) for b in range(depth))
    es = tuple(rng.choice(spec.block_expands(s, b)) for b in range(depth))
    return StageConfig(ks, es)


def mutate_structure(
    candidate: Candidate,
    spec: SupernetSpec,
    operator: str,
    rng: random.Random,
    cuts: tuple[int, ...] | None = None,
) -> Candidate | None:
    """``candidate`` changed by one ``operator`` step (:data:`STRUCTURE_OPERATORS`), its scheme
    and branches carried over from the output end (:func:`_restructured`):

    * ``cut``: a fixed network cut one allowed stage count later or earlier (``cuts``, default
      every cut the network allows);
    * ``depth``: one stage a block deeper or shallower (its last block dropped, or one added);
    * ``branch``: a lite residual branch more or fewer on the last blocks (a new one in the
      shape of the others, or drawn among the joint space's shapes).

    None where the operator does not apply."""
    subnet = candidate.subnet
    if operator == "cut":
        counts = sorted(cuts or spec.stage_counts)
        n = len(subnet.stages)
        if n not in counts or len(counts) < 2:
            return None
        i = counts.index(n)
        near = [counts[j] for j in (i - 1, i + 1) if 0 <= j < len(counts)]
        m = rng.choice(near)
        stages = subnet.stages[:m] + tuple(
            _stage(spec, s, max(spec.stage_depths(s)), rng) for s in range(n, m)
        )
        return _restructured(candidate, spec, dataclasses.replace(subnet, stages=stages))
    if operator == "depth":
        near = {
            s: [d for d in spec.stage_depths(s) if abs(d - stage.depth) == 1]
            for s, stage in enumerate(subnet.stages)
        }
        movable = [s for s, depths in near.items() if depths]
        if not movable:
            return None
        s = rng.choice(movable)
        stage, depth = subnet.stages[s], rng.choice(near[s])
        grown = _stage(spec, s, depth, rng)
        changed = StageConfig(
            (stage.ks + grown.ks[stage.depth :])[:depth],
            (stage.e + grown.e[stage.depth :])[:depth],
        )
        stages = (*subnet.stages[:s], changed, *subnet.stages[s + 1 :])
        return _restructured(candidate, spec, dataclasses.replace(subnet, stages=stages))
    if operator == "branch":
        lite = candidate.lite_residual
        m = len(lite.branches)
        n = block_count(spec, subnet)
        if not (near := [c for c in (m - 1, m + 1) if 0 <= c < n]):
            return None  # a network of one block: no other count of branches
        count = rng.choice(near)
        shape = (
            lite.branches[0][1]
            if lite.branches
            else LiteResidualBranch(
                kernel_size=rng.choice((3, 5)),
                groups=rng.choice((2, 4)),
                downsample=rng.choice([d for d in LITE_DOWNSAMPLE if d > 1]),
                expand=rng.choice([e for e in LITE_EXPAND if e <= 1.0]),
            )
        )
        branches = tuple((b, shape) for b in range(n - count, n))
        return dataclasses.replace(candidate, lite_residual=LiteResidualConfig(branches))
    return None


def _asked(candidate: Candidate, patches: tuple[int, ...]) -> Schedule:
    """The schedule a mutant of ``candidate`` asks for: its patches per side (the largest of
    ``patches`` up to them), over the stem alone until the hardware model schedules it; whole
    images where the search proposes no patches."""
    n = max((p for p in patches if p <= candidate.schedule.patches), default=1)
    return Schedule(n, 0) if n > 1 else Schedule()


def _repatch(candidate: Candidate, patches: tuple[int, ...], rng: random.Random) -> Candidate:
    """``candidate`` asking for the next patch count of ``patches`` up or down."""
    i = patches.index(candidate.schedule.patches)
    n = rng.choice([patches[j] for j in (i - 1, i + 1) if 0 <= j < len(patches)])
    return dataclasses.replace(candidate, schedule=Schedule(n, 0) if n > 1 else Schedule())


def _shrink(
    candidate: Candidate, n_convs: int, rng: random.Random, fits: Callable[[Candidate], bool]
) -> Candidate | None:
    """``candidate`` shrunk by random :data:`REPAIR_OPERATORS` steps until ``fits`` takes it,
    or None after :data:`REPAIR_STEPS` steps."""
    for _ in range(REPAIR_STEPS):
        operator = rng.choice(REPAIR_OPERATORS)
        if operator == "unbranch":
            if not candidate.lite_residual.branches:
                continue
            lite = LiteResidualConfig(candidate.lite_residual.branches[1:])
            candidate = dataclasses.replace(candidate, lite_residual=lite)
        else:
            scheme = mutate_scheme(candidate.update, n_convs, operator, rng)
            if scheme is None:
                continue
            candidate = dataclasses.replace(candidate, update=scheme)
        if fits(candidate):
            return candidate
    return None


def preset_move(
    parent: Candidate,
    preset: str,
    spec: SupernetSpec,
    rng: random.Random,
    cuts: tuple[int, ...] | None = None,
) -> tuple[Candidate, dict[str, Any]] | None:
    """``preset`` made anew on ``parent``'s sub-network moved by one or two steps (resolution,
    kernel size, expand ratio, depth, cut): the candidate and the preset trial's parameters
    that select it; None when a step does not apply or nothing changed."""
    moves = [o for o in operators_for(spec, cuts) if o in (*SUBNET_OPERATORS, "depth", "cut")]
    if not moves:  # a network of one sub-network at one resolution
        return None
    child: Candidate | None = dataclasses.replace(parent, schedule=Schedule())
    for _ in range(rng.randint(1, MAX_STEPS)):
        assert child is not None
        child = _step(child, spec, rng.choice(moves), rng, cuts)
        if child is None:
            return None
    assert child is not None
    moved = make_preset(preset, spec, child.subnet)
    if moved.subnet == parent.subnet:
        return None
    params: dict[str, Any] = {"scheme": preset, **subnet_params(moved.subnet, spec)}
    import optuna

    again = suggest_candidate(optuna.trial.FixedTrial(params), spec, cuts=cuts)
    return (moved, params) if again == moved else None


def operators_for(spec: SupernetSpec, cuts: tuple[int, ...] | None = None) -> tuple[str, ...]:
    """The operators that can change a candidate of ``spec``: every scheme operator, the
    resolution and the lite residual branches, and those of the network's own choices (kernel
    sizes and expand ratios of a supernet, depths where a stage offers several, the cut of a
    fixed network with more than one allowed)."""
    stages = range(spec.n_stages)
    offered = {
        "resolution": len(spec.resolutions) > 1,
        "kernel": not spec.fixed and len(spec.ks_choices) > 1,
        "expand": not spec.fixed and len(spec.expand_choices) > 1,
        "depth": any(len(spec.stage_depths(s)) > 1 for s in stages),
        "cut": spec.fixed and len(cuts or spec.stage_counts) > 1,
        "branch": True,
    }
    return OPERATORS + tuple(o for o in SUBNET_OPERATORS + STRUCTURE_OPERATORS if offered[o])


def _step(
    candidate: Candidate,
    spec: SupernetSpec,
    operator: str,
    rng: random.Random,
    cuts: tuple[int, ...] | None,
) -> Candidate | None:
    """``candidate`` changed by one step of any operator; None where it does not apply."""
    if operator in OPERATORS:
        n_convs = len(conv_kinds(spec, candidate.subnet))
        scheme = mutate_scheme(candidate.update, n_convs, operator, rng)
        return None if scheme is None else dataclasses.replace(candidate, update=scheme)
    if operator in SUBNET_OPERATORS:
        subnet = mutate_subnet(candidate.subnet, spec, operator, rng)
        return None if subnet is None else dataclasses.replace(candidate, subnet=subnet)
    return mutate_structure(candidate, spec, operator, rng, cuts)


def mutant(
    parents: list[Candidate],
    spec: SupernetSpec,
    rng: random.Random,
    accept: Callable[[Candidate], bool],
    tries: int = 64,
    fits: Callable[[Candidate], bool] | None = None,
    cuts: tuple[int, ...] | None = None,
    rules: Mapping[str, str] | None = None,
    patches: tuple[int, ...] = (),
    weights: list[float] | None = None,
) -> tuple[Candidate, dict[str, Any], Candidate] | None:
    """A mutant of one of ``parents`` that the search space expresses and ``accept`` takes (not
    measured, within the budgets): ``(mutant, its parameters, its parent)``, or None after
    ``tries`` draws. With ``fits`` (within the budgets), a parent that does not fit is repaired
    instead of mutated: shrunk step by step until it fits. ``cuts``: the stage counts a fixed
    network may be cut after (default: all it allows). ``rules``: the preset that made a parent
    (by its key), whose rule half of its mutants keep: the parent's sub-network moved by one or
    two steps and the preset's scheme made anew for it (:func:`preset_move`), as a search of
    that one preset would; the other half change the scheme itself. ``patches``: the patches
    per side the search proposes for a joint scheme's frozen prefix (``patches`` operator: the
    next count up or down; a mutant asks for its parent's count). ``weights``: each parent's
    chance to be drawn (default: equal)."""
    operators = operators_for(spec, cuts) + (("patches",) if patches else ())
    rules = rules or {}
    for _ in range(tries):
        parent = rng.choices(parents, weights)[0] if weights else rng.choice(parents)
        rule = rules.get(parent.key)
        if rule is not None and (fits is None or fits(parent)) and rng.random() < 0.5:
            moved = preset_move(parent, rule, spec, rng, cuts)
            if moved is not None and accept(moved[0]):
                return moved[0], moved[1], parent
            continue
        n_convs = len(conv_kinds(spec, parent.subnet))
        scheme = parent.update
        while len(scheme.weights) > MAX_WEIGHT_LAYERS:  # what the joint space can hold
            scheme = mutate_scheme(scheme, n_convs, "drop", rng) or scheme
        if fits is not None and not fits(parent):
            start = dataclasses.replace(parent, update=scheme, schedule=_asked(parent, patches))
            repaired = start if fits(start) else _shrink(start, n_convs, rng, fits)
            if repaired is None:
                continue
            params = joint_params(repaired, spec, patches)
            if params is not None and accept(repaired):
                return repaired, params, parent
            continue
        # the child asks for its parent's patch count; the hardware model schedules it anew
        asked = _asked(parent, patches)
        child, applies = dataclasses.replace(parent, update=scheme, schedule=asked), True
        for _ in range(rng.randint(1, MAX_STEPS)):
            operator = rng.choice(operators)
            if operator == "patches":
                step = _repatch(child, patches, rng)
            else:
                step = _step(child, spec, operator, rng, cuts)
            applies = applies and step is not None
            child = step or child
        if not applies:
            continue
        if child == parent:
            continue
        params = joint_params(child, spec, patches)
        if params is not None and accept(child):
            return child, params, parent
    return None
