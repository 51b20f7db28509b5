"""Mutations of the front's candidates: local search where the front already is.

At a budget of about ten fine-tunes a model-based sampler has seen too few trials to model the
joint space, and the presets a study measures first teach it nothing about the joint scheme's
parameters (a preset trial has none). The candidates that extend a front, though, lie next to
the ones on it: MCUNetV3 finds its sparse schemes by an evolutionary search over the update
scheme of one sub-network (§2.3), each scheme a few layers or ratios away from another. So every
other fresh proposal (``SearchConfig.mutate``) is a mutant of a front point: its update scheme
and sub-network changed by one or two steps, each drawn at
random among

* dropping one weight-updated layer, or halving one's ratio of input channels,
* adding one inside the bias-updated tail (any ratio), or doubling one's ratio,
* shortening the bias-updated tail (never past a weight-updated layer), or lengthening it,
* the next input resolution up or down, another kernel size or expand ratio of one block (as
  Once-for-All's evolutionary search mutates its sub-networks),
* one stage a block deeper or shallower, a fixed network (EfficientNet-Lite0) cut one stage later
  or earlier, a lite residual branch more or fewer on the last blocks: the update scheme and the
  branches are carried over counted from the output (the last k biases stay the last k), which
  is where the sparse update and TinyTL's branches sit.

Under a tight SRAM budget the front may hold little besides the classifier-only update, while
the baseline presets that were over the budget hold the better schemes. So the parents include
those baselines too, and an over-budget parent is repaired rather than mutated: shrunk by random
steps (drop a weight-updated layer, halve a ratio, shorten the bias tail, remove the first lite
residual branch) until its predicted cost is within the budgets.

A front point that a baseline preset made (classifier only, bias-only, MCUNetV3's or TinyTL's
scheme) keeps its preset's rule in half of its mutants: its sub-network moves by one or two steps
and the preset's scheme is made anew for it, as a search of that one preset does
(``tinytune search --preset P``), so that the papers' recipes are carried to the sub-networks
where they cost least; the other half change the scheme itself.

The driver draws a parent by its fine-tune's exclusive share of the front's hypervolume (SMS-EMOA's
measure; the fine-tune's schedule twins count as one point), so that the points that hold the front
up are mutated most (``weights``), and of up to eight mutants drawn so it proposes the one that
would add the most hypervolume were it as accurate as its parent (:func:`screened_mutant`): the
cost of a mutant is predicted exactly before any fine-tune, its accuracy only guessed. A child
that differs from a measured candidate in its patches alone is that candidate's schedule twin,
taken already. A share of the turns (``--climb``, every
other one by default) climbs instead: the parent is the study's most accurate fine-tune within the
budgets (of equally accurate ones, the one of most work: a climb level with its parent, which the
parent dominates, carries the next climb on, a hill climb's move along a plateau), and of
several mutants that do more work than it (a longer predicted forward pass on whole images) the
one that does the most is proposed (:func:`climbing_mutant`), so that a share of the fine-tunes
goes to improving the accuracy the budgets allow, not only the front's spread; where that
fine-tune sits at a budget's edge (no mutant that does more work fits), the next most accurate
one that can climb does; where that fine-tune is at 100 % on validation no climb can improve it,
and the turn draws by the hypervolume instead.

A mutant is proposed as a joint-scheme trial (a preset trial for a preset's move) with explicit
parameters (Optuna's ``enqueue_trial``), so the sampler learns from its result like from any
other trial. Only
mutants the joint space can express are proposed (at most :data:`MAX_WEIGHT_LAYERS` weight
layers; a parent's extra ones are dropped first), never one measured before or over a budget:
its cost is predicted before it is proposed. Optuna offers no such operator for define-by-run
spaces (its NSGA-II mutates its own population of a fixed space), hence this module.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import warnings
from collections.abc import Callable, Mapping
from typing import Any

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
from tinytune.spaces.sampling import JOINT, MAX_WEIGHT_LAYERS

__all__ = [
    "CLIMB_DRAWS",
    "MAX_STEPS",
    "OPERATORS",
    "REPAIR_OPERATORS",
    "SCREEN_DRAWS",
    "STRUCTURE_OPERATORS",
    "SUBNET_OPERATORS",
    "climbing_mutant",
    "joint_params",
    "mutant",
    "mutate_scheme",
    "mutate_structure",
    "mutate_subnet",
    "operators_for",
    "preset_move",
    "propose_mutant",
    "screened_mutant",
]

OPERATORS = ("drop", "narrow", "add", "widen", "shorten", "lengthen")
SUBNET_OPERATORS = ("resolution", "kernel", "expand")
STRUCTURE_OPERATORS = ("cut", "depth", "branch")
MAX_STEPS = 2
"""A mutant is one or two operator steps from its parent (drawn with equal chance)."""
CLIMB_DRAWS = 8
"""A climbing mutant is the one of most work among up to this many drawn
(:func:`climbing_mutant`)."""
SCREEN_DRAWS = 8
"""A mutant drawn by the hypervolume is the one of most hypervolume gain among up to this many
drawn (:func:`screened_mutant`)."""
Proposal = tuple[dict[str, Any], Candidate, Candidate]
"""A mutant as :func:`propose_mutant` proposes it: its trial's parameters, its parent and
itself."""
REPAIR_OPERATORS = ("drop", "narrow", "shorten", "unbranch")
REPAIR_STEPS = 12
"""An over-budget parent is shrunk by at most this many steps, each dropping a weight-updated
layer, halving a ratio, shortening the bias tail or removing the first lite residual branch."""


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
        near = [c for c in (m - 1, m + 1) if 0 <= c < n]
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


def joint_params(
    candidate: Candidate, spec: SupernetSpec, patches: tuple[int, ...] = ()
) -> dict[str, Any] | None:
    """The joint scheme's sampler parameters that select ``candidate``, or None when the joint
    space cannot express it (more weight layers than it samples, a lite residual shape or a
    norm update it does not draw, a schedule other than a patch count asked for). Checked by
    sampling them back with Optuna's ``FixedTrial``; ``patches``: the counts the space offers
    (:func:`tinytune.spaces.suggest_candidate`)."""
    import optuna

    update, lite = candidate.update, candidate.lite_residual
    if len(update.weights) > MAX_WEIGHT_LAYERS:
        return None
    n_convs = len(conv_kinds(spec, candidate.subnet))
    params: dict[str, Any] = {"scheme": JOINT, **subnet_params(candidate.subnet, spec)}
    params["lr_blocks"] = len(lite.branches)
    if lite.branches:
        branch = lite.branches[0][1]
        params.update(
            lr_kernel=branch.kernel_size,
            lr_groups=branch.groups,
            lr_downsample=branch.downsample,
            lr_expand=branch.expand,
        )
    params["bias_last_k"] = update.bias_last_k
    params["n_weight"] = len(update.weights)
    for j, (layer, ratio) in enumerate(update.weights):
        params[f"w{j}.offset"] = n_convs - 1 - layer
        params[f"w{j}.ratio"] = ratio
    if patches:
        params["patches"] = candidate.schedule.patches
    trial = optuna.trial.FixedTrial(params)
    try:
        with warnings.catch_warnings():  # an integer out of its range: checked below
            warnings.simplefilter("ignore", UserWarning)
            again = suggest_candidate(trial, spec, patches=patches)
    except ValueError:  # a value outside a categorical parameter's choices
        return None
    within = all(
        dist._contains(dist.to_internal_repr(trial.params[name]))
        for name, dist in trial.distributions.items()
    )  # FixedTrial only warns about an integer out of its range
    return dict(trial.params) if within and again == candidate else None


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


def propose_mutant(
    parents: list[Candidate],
    baselines: list[Candidate],
    spec: SupernetSpec,
    rng: random.Random,
    fits: Callable[[Candidate], bool],
    taken: Callable[[Candidate], bool],
    cuts: tuple[int, ...] | None = None,
    rules: Mapping[str, str] | None = None,
    patches: tuple[int, ...] = (),
    weights: list[float] | None = None,
    wanted: Callable[[Candidate], bool] | None = None,
) -> Proposal | None:
    """The next mutant a run enqueues: its parameters, its parent and itself, a mutant of one of
    ``parents`` (the front's candidates) or a repair of one of the ``baselines`` that does not
    fit, which ``fits`` the budgets and is not ``taken`` (measured or in flight); None when
    none is found. ``fits`` predicts a cost, so it is asked once per candidate. ``rules``: the
    preset whose rule made a parent, by its key (:func:`mutant`). ``weights``: each parent's
    chance to be drawn (default: equal); a baseline repaired into the budget is drawn as
    often as the mean parent. ``wanted``: a further condition on the mutant, asked before
    its cost is predicted."""
    priced: dict[str, bool] = {}

    def fits_once(candidate: Candidate) -> bool:
        if candidate.key not in priced:
            priced[candidate.key] = fits(candidate)
        return priced[candidate.key]

    def accept(child: Candidate) -> bool:
        # the condition first: it may spare the prediction of a cost
        return not taken(child) and (wanted is None or wanted(child)) and fits_once(child)

    over = [p for p in baselines if p not in parents and not fits_once(p)]
    if weights is not None:
        mean = sum(weights) / len(weights) if weights else 1.0
        weights = list(weights) + [mean] * len(over)
    found = mutant(
        parents + over,
        spec,
        rng,
        accept,
        fits=fits_once,
        cuts=cuts,
        rules=rules,
        patches=patches,
        weights=weights,
    )
    return None if found is None else (found[1], found[2], found[0])


def climbing_mutant(
    top: Candidate,
    work: Callable[[Candidate], float | None],
    propose: Callable[..., Proposal | None],
    draws: int = CLIMB_DRAWS,
) -> Proposal | None:
    """Of up to ``draws`` new mutants of ``top`` that do more ``work`` than it (the predicted
    seconds of a forward pass on whole images), the one that does the most (the first drawn
    of equal ones): its parameters, ``top`` and itself; None where none does more.
    ``propose``: :func:`propose_mutant` with all but its parents, baselines and ``wanted``
    given."""
    floor = work(top)
    if floor is None:
        return None
    return _best_drawn(
        functools.partial(propose, [top], []),
        lambda found: work(found[2]) or 0.0,
        draws,
        lambda child: (work(child) or 0.0) > floor,
    )


def screened_mutant(
    gain: Callable[[Candidate, Candidate], float],
    propose: Callable[..., Proposal | None],
    draws: int = SCREEN_DRAWS,
) -> Proposal | None:
    """Of up to ``draws`` new mutants that ``propose`` draws (:func:`propose_mutant` with all
    but ``wanted`` given), the one of highest ``gain(mutant, parent)``: the first drawn where
    none gains more than another. The driver's gain is the hypervolume the mutant would add
    to the front at its parent's accuracy (:meth:`tinytune.search.run.driver.Run.
    hypervolume_gain`): its cost is predicted exactly, its accuracy only guessed."""
    return _best_drawn(propose, lambda found: gain(found[2], found[1]), draws)


def _best_drawn(
    propose: Callable[..., Proposal | None],
    score: Callable[[Proposal], float],
    draws: int,
    takes: Callable[[Candidate], bool] = lambda child: True,
) -> Proposal | None:
    """Of up to ``draws`` mutants that ``propose(wanted=...)`` draws, each one not drawn
    before in this call that ``takes`` accepts, the one of highest ``score`` (the first drawn
    of equal ones); None where none is drawn."""
    seen: set[str] = set()

    def wanted(child: Candidate) -> bool:
        if child.key in seen:  # drawn before: another one
            return False
        seen.add(child.key)
        return takes(child)

    best: tuple[float, Proposal] | None = None
    for _ in range(draws):
        found = propose(wanted=wanted)
        if found is None:
            break
        value = score(found)
        if best is None or value > best[0]:
            best = (value, found)
    return None if best is None else best[1]


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
