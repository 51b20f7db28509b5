"""Mutations of the front's update schemes (``SearchConfig.mutate``): each operator's step,
the joint parameters that express a candidate (checked against Optuna's own sampling of them),
and the driver proposing mutants of front points as joint-scheme trials."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneTask, HardwareConfig
from tinytune.search import InlineExecutor, run_search
from tinytune.search.proposals.climbing import climbing_mutant
from tinytune.search.proposals.draws import propose_mutant
from tinytune.search.proposals.encoding import joint_params
from tinytune.search.proposals.front import screened_mutant
from tinytune.search.proposals.operators import (
    mutant,
    mutate_scheme,
    mutate_structure,
    mutate_subnet,
    operators_for,
    preset_move,
)
from tinytune.search.proposals.policy import climbing_turn, mutant_turn
from tinytune.search.run.preflight import preflight
from tinytune.spaces import (
    PRESET_NAMES,
    Candidate,
    conv_kinds,
    default_subnet,
    get_supernet,
    make_preset,
    suggest_candidate,
)
from tinytune.spaces.candidate import (
    LiteResidualBranch,
    LiteResidualConfig,
    Schedule,
    UpdateScheme,
)

from .fakes import SPEC, SUBNET, FakeEvaluator, N, search_config


def _step(scheme: UpdateScheme, operator: str, seed: int = 0) -> UpdateScheme | None:
    return mutate_scheme(scheme, N, operator, random.Random(seed))


def test_each_operator_changes_one_thing_and_keeps_weights_inside_the_bias_tail() -> None:
    scheme = UpdateScheme(12, ((27, 0.5), (33, 0.125)))
    dropped = _step(scheme, "drop")
    assert dropped is not None and dropped.bias_last_k == 12 and len(dropped.weights) == 1
    assert set(dropped.weights) < set(scheme.weights)
    assert _step(scheme, "narrow") == UpdateScheme(12, ((27, 0.25), (33, 0.125)))  # 0.125: least
    widened = _step(scheme, "widen")
    assert widened in (
        UpdateScheme(12, ((27, 1.0), (33, 0.125))),
        UpdateScheme(12, ((27, 0.5), (33, 0.25))),
    )
    for seed in range(50):
        added = _step(scheme, "add", seed)
        assert added is not None and added.bias_last_k == 12 and len(added.weights) == 3
        assert all(N - 12 <= layer < N for layer, _ in added.weights)
        shorter = _step(scheme, "shorten", seed)
        # convolution 27 must stay inside the tail: k >= 37 - 27
        assert shorter is not None and N - 27 <= shorter.bias_last_k < 12
        assert shorter.weights == scheme.weights
        longer = _step(scheme, "lengthen", seed)
        assert longer is not None and 12 < longer.bias_last_k <= 24
    for seed in range(20):  # from the classifier alone: a short tail of biases
        first = _step(UpdateScheme(0), "lengthen", seed)
        assert first is not None and 1 <= first.bias_last_k <= 4 and not first.weights


def test_an_operator_that_does_not_apply_gives_none() -> None:
    classifier, tail = UpdateScheme(0), UpdateScheme(N - 27, ((27, 1.0),))
    assert _step(classifier, "drop") is None and _step(classifier, "narrow") is None
    assert _step(classifier, "add") is None and _step(classifier, "shorten") is None
    assert _step(tail, "widen") is None  # every ratio is whole already
    assert _step(tail, "shorten") is None  # the tail ends at the weight-updated layer
    assert _step(UpdateScheme(N), "lengthen") is None
    assert _step(UpdateScheme(1, ((N - 1, 0.125),)), "add") is None  # no free layer in the tail
    assert _step(tail, "no-such-operator") is None


def test_a_subnet_step_moves_one_resolution_kernel_or_expand_ratio() -> None:
    assert SPEC.resolutions.index(SUBNET.resolution) not in (0, len(SPEC.resolutions) - 1)
    for seed in range(30):
        moved = mutate_subnet(SUBNET, SPEC, "resolution", random.Random(seed))
        assert moved is not None and moved.stages == SUBNET.stages
        i, j = SPEC.resolutions.index(SUBNET.resolution), SPEC.resolutions.index(moved.resolution)
        assert abs(i - j) == 1
        for operator, field, choices in (
            ("kernel", "ks", SPEC.ks_choices),
            ("expand", "e", SPEC.expand_choices),
        ):
            net = mutate_subnet(SUBNET, SPEC, operator, random.Random(seed))
            assert net is not None and net.resolution == SUBNET.resolution
            assert net.depths == SUBNET.depths
            before = [v for st in SUBNET.stages for v in getattr(st, field)]
            after = [v for st in net.stages for v in getattr(st, field)]
            changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
            assert len(changed) == 1 and changed[0][1] in choices
            other = "e" if field == "ks" else "ks"
            assert [getattr(st, other) for st in net.stages] == [
                getattr(st, other) for st in SUBNET.stages
            ]
    assert mutate_subnet(SUBNET, SPEC, "depth", random.Random(0)) is None


LITE0 = get_supernet("efficientnet-lite0")


def test_each_network_gets_the_operators_its_choices_offer() -> None:
    # a supernet: kernels, expand ratios and depths; a fixed network: its depths and its cut
    supernet, fixed = set(operators_for(SPEC)), set(operators_for(LITE0))
    assert {"kernel", "expand", "depth", "resolution", "branch"} <= supernet
    assert "cut" not in supernet
    assert {"cut", "depth", "resolution", "branch"} <= fixed
    assert not {"kernel", "expand"} & fixed
    assert "cut" not in operators_for(LITE0, cuts=(4,))  # one allowed cut: nothing to move


def test_a_cut_carries_the_scheme_and_branches_over_from_the_output() -> None:
    subnet = default_subnet(LITE0)  # cut after 3 stages: 8 blocks, 24 convolutions
    n = len(conv_kinds(LITE0, subnet))
    branch = LiteResidualBranch(kernel_size=5, groups=2, downsample=2, expand=0.5)
    parent = Candidate(
        LITE0.name,
        subnet,
        LiteResidualConfig(((subnet.n_blocks - 1, branch),)),
        UpdateScheme(6, ((n - 3, 0.5), (n - 1, 1.0))),
    )
    for seed in range(10):
        child = mutate_structure(parent, LITE0, "cut", random.Random(seed), cuts=(3, 4))
        assert child is not None and len(child.subnet.stages) == 4
        m = len(conv_kinds(LITE0, child.subnet))
        assert m > n
        # the same layers counted from the output, the branch still on the last block
        assert child.update == UpdateScheme(6, ((m - 3, 0.5), (m - 1, 1.0)))
        assert child.lite_residual.blocks == (child.subnet.n_blocks - 1,)

        back = mutate_structure(child, LITE0, "cut", random.Random(seed), cuts=(3, 4))
        assert back == parent  # and back again
    assert mutate_structure(parent, LITE0, "cut", random.Random(0), cuts=(3,)) is None


def test_a_depth_step_adds_or_drops_one_block_and_keeps_the_tail() -> None:
    parent = make_preset("mcunetv3", SPEC, SUBNET)
    n = len(conv_kinds(SPEC, SUBNET))
    for seed in range(30):
        child = mutate_structure(parent, SPEC, "depth", random.Random(seed))
        assert child is not None
        diffs = [a - b for a, b in zip(child.subnet.depths, SUBNET.depths, strict=True)]
        assert sorted(diffs)[0] >= -1 and sorted(diffs)[-1] <= 1 and sum(map(abs, diffs)) == 1
        shift = len(conv_kinds(SPEC, child.subnet)) - n
        assert child.update.bias_last_k == parent.update.bias_last_k
        assert child.update.weights == tuple((i + shift, r) for i, r in parent.update.weights)


def test_a_branch_step_adds_or_removes_one_lite_residual_on_the_last_blocks() -> None:
    parent = make_preset("bias-only", SPEC, SUBNET)
    assert not parent.lite_residual.branches
    grown = mutate_structure(parent, SPEC, "branch", random.Random(0))
    assert grown is not None and grown.lite_residual.blocks == (SUBNET.n_blocks - 1,)
    assert grown.update == parent.update and grown.subnet == parent.subnet
    assert joint_params(grown, SPEC) is not None  # the joint space expresses it
    for seed in range(10):
        step = mutate_structure(grown, SPEC, "branch", random.Random(seed))
        assert step is not None and len(step.lite_residual.branches) in (0, 2)
        if step.lite_residual.branches:  # the same shape, on the last two blocks
            assert {b for _, b in step.lite_residual.branches} == {
                grown.lite_residual.branches[0][1]
            }
            assert step.lite_residual.blocks == (SUBNET.n_blocks - 2, SUBNET.n_blocks - 1)


def test_a_network_of_one_block_has_no_branch_step(tmp_path: Path) -> None:
    """A user's network whose one block after the stem can carry no branch but none: the
    branch operator proposes nothing (it drew from no counts before)."""
    import torch
    from torch import nn

    from tinytune.models import save_module
    from tinytune.spaces.candidate import block_count

    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3),
    )  # fmt: skip
    spec = get_supernet(str(save_module(net, torch.zeros(1, 1, 20, 16), tmp_path)))
    parent = make_preset("bias-only", spec, default_subnet(spec))
    assert block_count(spec, parent.subnet) == 1
    assert mutate_structure(parent, spec, "branch", random.Random(0)) is None


def test_joint_params_select_the_candidate_when_the_joint_space_can_express_it() -> None:
    expressible = {"last", "bias-only", "tinytl"}
    for name in PRESET_NAMES:
        candidate = make_preset(name, SPEC, SUBNET)
        params = joint_params(candidate, SPEC)
        if name not in expressible:  # full: 37 weights, mcunetv3: 6, bn+last: a norm update
            assert params is None, name
            continue
        assert params is not None and params["scheme"] == "joint", name
        assert suggest_candidate(optuna.trial.FixedTrial(params), SPEC) == candidate
    # a lite residual shape that the joint space never draws (groups 1)
    odd = LiteResidualConfig(((SUBNET.n_blocks - 1, LiteResidualBranch(groups=1)),))
    base = make_preset("last", SPEC, SUBNET)
    assert joint_params(Candidate(base.supernet, base.subnet, odd, base.update), SPEC) is None


def test_mutants_keep_their_parents_network_and_honour_accept() -> None:
    parents = [make_preset(name, SPEC, SUBNET) for name in ("last", "bias-only", "mcunetv3")]
    rng = random.Random(1)
    seen = set()
    for _ in range(30):
        found = mutant(parents, SPEC, rng, lambda child: True)
        assert found is not None
        child, params, parent = found
        assert parent in parents and child != parent and child.supernet == parent.supernet
        # one or two steps: at most two branches and two blocks more or fewer
        assert abs(len(child.lite_residual.branches) - len(parent.lite_residual.branches)) <= 2
        depths = zip(child.subnet.depths, parent.subnet.depths, strict=True)
        assert sum(abs(a - b) for a, b in depths) <= 2
        assert suggest_candidate(optuna.trial.FixedTrial(params), SPEC) == child
        assert len(child.update.weights) <= 4
        seen.add(child.key)
    assert len(seen) > 20  # they spread
    assert mutant(parents, SPEC, random.Random(1), lambda child: False) is None
    again = [mutant(parents, SPEC, random.Random(7), lambda c: True) for _ in range(2)]
    assert again[0] == again[1]  # a seeded draw


def test_a_parent_over_the_budget_is_shrunk_until_it_fits() -> None:
    bias_only, sparse = (
        make_preset("bias-only", SPEC, SUBNET),
        make_preset("mcunetv3", SPEC, SUBNET),
    )
    tinytl = make_preset("tinytl", SPEC, SUBNET)

    def small(c: Candidate) -> bool:  # a made-up budget: few biases, weights, branches
        weights = sum(ratio for _, ratio in c.update.weights)
        return c.update.bias_last_k + 8 * weights + len(c.lite_residual.branches) <= 20

    rng = random.Random(0)
    for _ in range(40):
        found = mutant([bias_only, sparse, tinytl], SPEC, rng, lambda c: True, fits=small)
        assert found is not None
        child, params, parent = found
        assert small(child) and not small(parent)
        assert child.subnet == parent.subnet  # repairs shrink the scheme only
        assert child.update.bias_last_k <= parent.update.bias_last_k
        assert dict(child.update.weights).keys() <= dict(parent.update.weights).keys()
        assert set(child.lite_residual.blocks) <= set(parent.lite_residual.blocks)
        assert suggest_candidate(optuna.trial.FixedTrial(params), SPEC) == child
    # a parent that fits is mutated as before, with or without ``fits``
    last = make_preset("last", SPEC, SUBNET)
    with_fits = mutant([last], SPEC, random.Random(3), lambda c: True, fits=lambda c: True)
    assert with_fits == mutant([last], SPEC, random.Random(3), lambda c: True)
    assert mutant([sparse], SPEC, random.Random(0), lambda c: True, fits=lambda c: False) is None


def test_the_proposed_mutant_repairs_the_baselines_over_the_budget_and_prices_each_once() -> None:
    front = [make_preset("last", SPEC, SUBNET)]
    baselines = [make_preset(name, SPEC, SUBNET) for name in ("last", "bias-only", "tinytl")]
    priced: list[str] = []

    def small(c: Candidate) -> bool:  # the made-up budget above
        weights = sum(ratio for _, ratio in c.update.weights)
        return c.update.bias_last_k + 8 * weights + len(c.lite_residual.branches) <= 20

    def fits(c: Candidate) -> bool:
        priced.append(c.key)
        return small(c)

    taken = {front[0].key}
    for seed in range(10):
        priced.clear()
        found = propose_mutant(
            front, baselines, SPEC, random.Random(seed), fits, taken.__contains__
        )
        # what mutant() draws from the front and the baselines over the budget ("last" is on
        # the front already, "bias-only" fits), accepting what fits and is not taken
        over = [b for b in baselines[1:] if not small(b)]
        expected = mutant(
            front + over,
            SPEC,
            random.Random(seed),
            lambda c: c.key not in taken and small(c),
            fits=small,
        )
        assert expected is not None and found == (expected[1], expected[2], expected[0])
        assert len(priced) == len(set(priced))  # each candidate's cost predicted once
    everything = propose_mutant(front, baselines, SPEC, random.Random(0), fits, lambda c: True)
    assert everything is None  # every mutant measured or in flight


def test_with_a_preset_nothing_is_mutated_and_the_log_names_the_option(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A preset fixes the update scheme that mutants change: ``mutate`` is off for the run,
    and the warning names it as a Python caller names it (the command line's log handler
    words it ``--mutate``: tests/cli/test_cli.py)."""
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(
        ckpt, trials=3, mutate=0.5, climb=1.0, preset="bias-only", baselines=False
    )
    with open_store(url) as store, caplog.at_level("WARNING", logger="tinytune.search.run.driver"):
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert result.counts.measured == 3
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert not any("mutant_of" in t.user_attrs for t in trials)
    assert "mutate=0.5 changes update schemes; it is off with a preset" in caplog.messages
    assert "climb=1.0 shares out the mutants; this run makes none" in caplog.messages
    # the default share, which nobody asked for, and mutate=0, which asks for what a preset
    # does, are off with a preset without a word
    for name, asked in (("q", {}), ("off", {"mutate": 0.0})):
        caplog.clear()
        quiet = search_config(
            ckpt, trials=3, preset="bias-only", baselines=False, study_name=name, **asked
        )
        logger = "tinytune.search.run.driver"
        with open_store(url) as store, caplog.at_level("WARNING", logger=logger):
            run_search(quiet, store, InlineExecutor(FakeEvaluator()))
        assert not [m for m in caplog.messages if "mutate" in m or "climb" in m]


def test_every_other_fresh_proposal_is_a_mutant_of_a_front_point(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(ckpt, trials=10, mutate=0.5)  # 4 baselines, then 6 proposals
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert result.counts.measured == 10
    trials = optuna.load_study(study_name="s", storage=url).trials
    keys = [t.user_attrs["candidate_key"] for t in trials]
    assert len(set(keys)) == len(keys)  # never one measured before
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    # the sampler's proposals in between, pruned ones (over the budget) included; the
    # schedule twins of measured candidates are no proposals (tests/search/test_twins.py)
    fresh = [t.number for t in trials[4:] if "twin_of" not in t.user_attrs]
    assert len(mutants) >= 3 and [t.number for t in mutants] == fresh[::2]
    # what the budget bought, by origin
    c = result.counts
    assert (c.presets, c.mutants, c.sampled) == (4, len(mutants), 10 - 4 - len(mutants))
    for t in mutants:
        assert t.state == optuna.trial.TrialState.COMPLETE
        child = Candidate.from_json(t.user_attrs["candidate"])
        parent_trial = keys.index(t.user_attrs["mutant_of"])
        assert parent_trial < t.number  # measured before it, on the front then
        parent = Candidate.from_json(trials[parent_trial].user_attrs["candidate"])
        assert child != parent and child.supernet == parent.supernet
        depths = zip(child.subnet.depths, parent.subnet.depths, strict=True)
        moved = sum(abs(a - b) for a, b in depths)
        if t.params["scheme"] == "joint":
            gained = len(child.lite_residual.branches) - len(parent.lite_residual.branches)
            assert abs(gained) + moved <= 2  # one or two steps
        else:  # a preset's rule carried to a nearby sub-network
            assert t.params["scheme"] == trials[parent_trial].params["scheme"]
            assert child == make_preset(t.params["scheme"], SPEC, child.subnet) and moved <= 2
        assert t.user_attrs["memory_bytes"] <= config.sram_budget_bytes
        # the schedule as the hardware model made it from the patch count asked for
        again = suggest_candidate(optuna.trial.FixedTrial(t.params), SPEC)
        assert again.training == child.training


def test_a_climbing_mutant_is_the_one_of_most_work_among_those_drawn_that_do_more() -> None:
    top = make_preset("mcunetv3", SPEC, SUBNET)
    children = [make_preset(name, SPEC, SUBNET) for name in ("last", "bias-only", "tinytl")]
    work = dict(zip([top.key, *(c.key for c in children)], [1.0, 0.5, 3.0, 2.0], strict=True))

    def propose(parents: list[Candidate], baselines: list[Candidate], wanted: Any) -> Any:
        # propose_mutant's part: the first child drawn that the condition takes
        assert (parents, baselines) == ([top], [])
        return next((({"key": c.key}, top, c) for c in children if wanted(c)), None)

    # less work than the parent is passed over; of 3.0 and 2.0, the first drawn is the most
    best = climbing_mutant(top, lambda c: work[c.key], propose)
    assert best == ({"key": children[1].key}, top, children[1])
    assert climbing_mutant(top, lambda c: 1.0 if c == top else 0.5, propose) is None
    assert climbing_mutant(top, lambda c: None, propose) is None  # no latency model


def test_a_screened_mutant_is_the_one_of_most_gain_among_those_drawn() -> None:
    parent = make_preset("mcunetv3", SPEC, SUBNET)
    children = [make_preset(name, SPEC, SUBNET) for name in ("last", "bias-only", "tinytl")]
    asked: list[str] = []

    def propose(wanted: Any) -> Any:
        # propose_mutant's part: the first child drawn that the condition takes
        child = next((c for c in children if wanted(c)), None)
        if child is not None:
            asked.append(child.key)
        return None if child is None else ({"key": child.key}, parent, child)

    def gain_of(*values: float) -> Any:
        gains = dict(zip((c.key for c in children), values, strict=True))
        return lambda child, of: gains[child.key] if of == parent else -1.0

    best = screened_mutant(gain_of(0.1, 0.3, 0.2), propose)
    assert best == ({"key": children[1].key}, parent, children[1])
    assert asked == [c.key for c in children]  # each drawn once, then none is left
    assert screened_mutant(gain_of(0.0, 0.0, 0.0), propose)[2] == children[0]  # the first
    asked.clear()
    assert screened_mutant(gain_of(0.1, 0.3, 0.2), propose, draws=1)[2] == children[0]
    assert asked == [children[0].key]
    assert screened_mutant(gain_of(0.1, 0.3, 0.2), lambda wanted: None) is None


def test_a_mutant_drawn_by_the_hypervolume_adds_the_most_of_it_at_its_parents_accuracy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turns that do not climb draw up to eight mutants and propose the one that would
    add the most hypervolume were it as accurate as its parent, under every schedule its
    fine-tune is priced at; its gain is recomputed here from the front of the moment, the
    parent's measured accuracy and the hardware model's cost at each patch count."""
    from tinytune.search.front.pareto import hypervolume_gain, reference
    from tinytune.search.proposals import front as front_draw

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(ckpt, trials=10, climb=0.0)  # 4 baselines, then 6 mutants
    hardware = preflight(config, None).hardware
    screened: list[tuple[list[tuple[Candidate, float]], Candidate]] = []
    original = front_draw.screened_mutant

    def spy(gain: Any, propose: Any, draws: int = 8) -> Any:
        drawn: list[tuple[Candidate, float]] = []

        def noted(child: Candidate, parent: Candidate) -> float:
            value = gain(child, parent)
            front = gain.__self__.context.front()
            points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s) for p in front]
            at = {p.candidate_key: p.val_accuracy for p in front}[parent.key]
            ref = reference(points, config.sram_budget_bytes, None)
            costs = set()
            for n in hardware.patch_choices:  # as the hardware model schedules each count
                asked = replace(child, schedule=Schedule(n, 0) if n > 1 else Schedule())
                priced = hardware(hardware.schedule(asked))
                if priced.sram_bytes <= config.sram_budget_bytes:
                    costs.add((at, float(priced.sram_bytes), priced.latency_s))
            assert value == pytest.approx(hypervolume_gain(sorted(costs), points, ref))
            drawn.append((child, value))
            return value

        found = original(noted, propose, draws)
        screened.append((drawn, found[2]))
        return found

    monkeypatch.setattr(front_draw, "screened_mutant", spy)
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert len(screened) == 6 and all(len(drawn) == 8 for drawn, _ in screened)
    for drawn, chosen in screened:
        best = max(value for _, value in drawn)
        assert chosen == next(c for c, value in drawn if value == best)
    assert all(value >= 0 for drawn, _ in screened for _, value in drawn)
    assert any(value > 0 for drawn, _ in screened for _, value in drawn)
    trials = optuna.load_study(study_name="s", storage=url).trials
    proposed = [t.user_attrs["candidate_key"] for t in trials if "mutant_of" in t.user_attrs]
    assert len(proposed) == 6


def test_every_other_mutant_climbs_from_the_most_accurate_fine_tune(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(ckpt, trials=12)  # 4 baselines, then 8 mutants
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(FakeEvaluator()))
    trials = optuna.load_study(study_name="s", storage=url).trials
    by_key = {t.user_attrs["candidate_key"]: t for t in trials if "candidate_key" in t.user_attrs}
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert len(mutants) == 8
    climbing = [t for t in mutants if t.user_attrs.get("climb")]
    assert climbing == mutants[1::2]  # every other turn, each finding a mutant that climbs
    done = optuna.trial.TrialState.COMPLETE

    def best_before(number: int) -> float:  # of the fine-tunes within the budgets
        return max(
            t.values[0]
            for t in trials[:number]
            if t.state == done and t.user_attrs["memory_bytes"] <= config.sram_budget_bytes
        )

    parents = [by_key[t.user_attrs["mutant_of"]] for t in mutants]
    assert [p.values[0] for p in parents[1::2]] == [best_before(t.number) for t in climbing]
    # each climbing mutant does more work than its parent: a longer forward pass on whole images
    hardware = preflight(config, None).hardware

    def work(trial: optuna.trial.FrozenTrial) -> float:
        whole = replace(Candidate.from_json(trial.user_attrs["candidate"]), schedule=Schedule())
        latency = hardware(whole).latency
        assert latency is not None
        return latency.inference_s

    assert all(work(t) > work(p) for t, p in zip(climbing, parents[1::2], strict=True))
    # the other turns draw by the share of the hypervolume: not only the most accurate
    assert any(
        p.values[0] < best_before(t.number)
        for p, t in zip(parents[::2], mutants[::2], strict=True)
    )


@pytest.mark.parametrize(
    ("share", "climbs"),
    [
        (0.5, [1, 3, 5, 7]),  # the default: every other turn from the second
        (0.0, []),
        (1.0, [0, 1, 2, 3, 4, 5, 6, 7]),
        (0.25, [3, 7]),
        (0.75, [1, 2, 3, 5, 6, 7]),
    ],
)
def test_a_share_of_the_mutant_turns_climbs_spread_evenly(share: float, climbs: list[int]) -> None:
    assert [turn for turn in range(8) if climbing_turn(turn, share)] == climbs


def _run_inline(
    tmp_path: Path, evaluator: FakeEvaluator, **options: Any
) -> list[optuna.trial.FrozenTrial]:
    """The trials of study ``s`` (:func:`search_config` with ``options``) run in-process with
    ``evaluator``."""
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(ckpt, **options), store, InlineExecutor(evaluator))
    return optuna.load_study(study_name="s", storage=url).trials


def test_with_climb_0_no_mutant_climbs(tmp_path: Path) -> None:
    trials = _run_inline(tmp_path, FakeEvaluator(), trials=8, climb=0.0)
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert len(mutants) == 4 and not any(t.user_attrs.get("climb") for t in mutants)


def test_no_mutant_climbs_from_a_fine_tune_right_on_every_validation_image(tmp_path: Path) -> None:
    """A climb looks for a more accurate point than the front's most accurate one: where that
    one is at 100 % on validation, there is none, and the climbing turns draw by the
    hypervolume instead."""

    class Perfect(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            result = super().__call__(task)
            perfect = (
                Candidate.from_json(task.candidate).update
                == make_preset("bias-only", SPEC, SUBNET).update
            )  # the bias-only preset: right on every validation image
            return result.replace(val_accuracy=1.0) if perfect else result

    trials = _run_inline(tmp_path, Perfect(), trials=8, climb=1.0)
    assert max(t.values[0] for t in trials if t.values is not None) == 1.0
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert len(mutants) == 4 and not any(t.user_attrs.get("climb") for t in mutants)


def test_a_climb_starts_from_the_next_most_accurate_fine_tune_where_the_first_cannot_climb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The most accurate fine-tune may sit at a budget's edge, where no mutant that does more
    work fits: the climb then starts from the next most accurate fine-tune that can climb, not
    from a sideways mutant of the first."""
    from tinytune.search.proposals.climbing import Climb

    bias_only = make_preset("bias-only", SPEC, SUBNET).update

    class BiasOnlyBest(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            result = super().__call__(task)
            best = Candidate.from_json(task.candidate).update == bias_only
            return result.replace(val_accuracy=0.99) if best else result

    work = Climb.work

    def capped(self: Climb, candidate: Candidate) -> float | None:
        # the bias-only preset's schemes at the edge: no mutant of one does more work
        return float("inf") if candidate.update == bias_only else work(self, candidate)

    monkeypatch.setattr(Climb, "work", capped)
    trials = _run_inline(tmp_path, BiasOnlyBest(), trials=8, climb=1.0)
    by_key = {t.user_attrs["candidate_key"]: t for t in trials if "candidate_key" in t.user_attrs}
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert len(mutants) == 4 and all(t.user_attrs.get("climb") for t in mutants)
    top = max((t for t in trials if t.values is not None), key=lambda t: t.values[0])
    assert Candidate.from_json(top.user_attrs["candidate"]).update == bias_only
    for t in mutants:  # each from a fine-tune less accurate than the bias-only preset's
        parent = by_key[t.user_attrs["mutant_of"]]
        assert Candidate.from_json(parent.user_attrs["candidate"]).update != bias_only
        assert parent.values[0] < top.values[0]


def test_a_climb_level_with_its_parent_carries_the_next_climb_on(tmp_path: Path) -> None:
    """On a plateau (every fine-tune equally accurate), each climb starts from the fine-tune of
    most work among the most accurate: the climb before it, which its parent dominates (as
    accurate at less cost), not the cheapest of them again."""

    class Plateau(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            return super().__call__(task).replace(val_accuracy=0.9)

    trials = _run_inline(tmp_path, Plateau(), trials=7, climb=1.0)
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert len(mutants) == 3 and all(t.user_attrs.get("climb") for t in mutants)
    by_key = {t.user_attrs["candidate_key"]: t for t in trials if "candidate_key" in t.user_attrs}

    def whole(trial: optuna.trial.FrozenTrial) -> str:
        return Candidate.from_json(trial.user_attrs["candidate"]).training.key

    parents = [by_key[t.user_attrs["mutant_of"]] for t in mutants]
    assert [whole(p) for p in parents[1:]] == [whole(t) for t in mutants[:-1]]


@pytest.mark.slow
def test_the_cli_proposes_mutants_with_mutate(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tinytune.cli.main import main

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["search", "--storage", url, "--trials", "6", "--inline", "--epochs", "1"]
    argv += ["--lr", "0.05", "--weights", str(tiny_checkpoint), "--mutate", "0.5"]
    assert main(argv) == 0
    # what the budget bought: the reference is beside it
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "the measured fine-tunes: 4 baseline presets on the default sub-network, 1 mutant " in said
    )
    # and what they bought over the best of the presets alone, within the budgets
    import tinytune
    from tinytune.spaces import default_subnet, get_supernet

    view = tinytune.load(storage=url)
    spec = get_supernet("ofa-proxyless-w0.35")
    with open_store(url) as store:
        hand = [
            e
            for e in store.evaluations("tinytune", fidelity="measured", status="ok")
            if (e.details or {}).get("scheme") in ("last", "bias-only", "mcunetv3", "tinytl")
            and e.memory_bytes <= 256 * 1024
            and Candidate.from_json(store.get_candidate(e.candidate_key).payload).subnet
            == default_subnet(spec)
        ]
    recipe = max(hand, key=lambda e: (e.val_accuracy, -e.memory_bytes))
    best = max(view.front, key=lambda p: (p.val_accuracy, -p.memory_bytes))
    preset = (
        f"`{recipe.details['scheme']}` on the default sub-network "
        f"({100 * recipe.val_accuracy:.1f}% val, {100 * recipe.accuracy:.1f}% test)"
    )
    line = (
        (
            f"against the papers' recipes: the front's most accurate point, `{best.scheme}` "
            f"({100 * best.val_accuracy:.1f}% val, {100 * best.test_accuracy:.1f}% test), is "
            f"{100 * (best.val_accuracy - recipe.val_accuracy):.1f} points above the best "
            f"hand-written preset, {preset}"
        )
        if best.val_accuracy > recipe.val_accuracy
        else (
            "against the papers' recipes: no point more accurate on validation than the best "
            f"hand-written preset, {preset}"
        )
    )
    assert line in said
    # the stored study says the same, read back later (the Python API and `tinytune pareto`)
    assert view.recipe is not None and view.recipe.candidate_key == recipe.candidate_key
    assert main(["pareto", "--storage", url]) == 0
    assert line in " ".join(capsys.readouterr().out.split())
    trials = optuna.load_study(study_name="tinytune", storage=url).trials
    # the reference and the 4 baselines, then a mutant and the sampler's proposals in turn,
    # the schedule twins of measured candidates between them
    fresh = [t.number for t in trials[5:] if "twin_of" not in t.user_attrs]
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    assert fresh and [t.number for t in mutants] == fresh[::2]
    assert mutants[0].state == optuna.trial.TrialState.COMPLETE


def test_under_a_tight_budget_the_baselines_over_it_are_repaired_into_it(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    budget = 48 * 1024  # classifier-only fits (35.5 KB); bias-only, mcunetv3, tinytl do not
    # on whole images: patch by patch (the default) fits some of them into the budget unrepaired
    whole = HardwareConfig(patches="none")
    config = search_config(ckpt, trials=7, mutate=0.5, sram_budget_bytes=budget, hardware=whole)
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(FakeEvaluator()))
    trials = optuna.load_study(study_name="s", storage=url).trials
    over = {make_preset(n, SPEC, SUBNET).key for n in ("bias-only", "mcunetv3", "tinytl")}
    assert {t.user_attrs["candidate_key"] for t in trials if t.number < 4} >= over
    mutants = [t for t in trials if "mutant_of" in t.user_attrs]
    repaired = [t for t in mutants if t.user_attrs["mutant_of"] in over]
    assert repaired, "no baseline over the budget was repaired"
    for t in mutants:
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.user_attrs["memory_bytes"] <= budget


@pytest.mark.parametrize(
    ("share", "pattern"),
    [
        (0.0, "...."),
        (0.5, "M.M.M."),
        (0.75, "MMM.MMM."),
        (1.0, "MMMMMM"),
        (0.25, "M...M..."),
    ],
)
def test_the_share_of_mutants_is_spread_evenly_from_the_first_proposal(
    share: float, pattern: str
) -> None:
    turns = "".join("M" if mutant_turn(n, share) else "." for n in range(len(pattern)))
    assert turns == pattern


def test_a_preset_move_makes_the_preset_anew_on_a_nearby_sub_network() -> None:
    for preset in ("last", "bias-only", "mcunetv3", "tinytl"):
        parent = make_preset(preset, LITE0)
        for seed in range(10):
            moved = preset_move(parent, preset, LITE0, random.Random(seed), cuts=(3, 4))
            if moved is None:  # a step that does not apply
                continue
            child, params = moved
            assert child != parent and child == make_preset(preset, LITE0, child.subnet)
            assert params["scheme"] == preset
            assert suggest_candidate(optuna.trial.FixedTrial(params), LITE0) == child
            gap = abs(len(child.subnet.stages) - len(parent.subnet.stages))
            depths = zip(child.subnet.depths, parent.subnet.depths, strict=False)
            steps = int(child.subnet.resolution != parent.subnet.resolution)
            assert gap + steps + sum(abs(a - b) for a, b in depths) <= 2 + 4 * gap


def test_a_front_point_a_preset_made_keeps_its_rule_in_half_of_its_mutants() -> None:
    parent = make_preset("mcunetv3", LITE0)
    rng, kinds = random.Random(3), []
    for _ in range(40):
        found = mutant([parent], LITE0, rng, lambda c: True, rules={parent.key: "mcunetv3"})
        assert found is not None
        child, params, _ = found
        kinds.append(params["scheme"])
        if params["scheme"] == "mcunetv3":
            assert child == make_preset("mcunetv3", LITE0, child.subnet)
    assert 10 <= kinds.count("mcunetv3") <= 30 and 10 <= kinds.count("joint") <= 30
    # without a rule, every mutant changes the scheme in the joint space
    plain = [mutant([parent], LITE0, rng, lambda c: True) for _ in range(10)]
    assert all(f is not None and f[1]["scheme"] == "joint" for f in plain)


def test_a_joint_trial_asks_for_a_patch_count_where_the_search_chooses_the_schedule() -> None:
    parent = make_preset("bias-only", LITE0)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    asked = set()
    for _ in range(150):
        trial = study.ask()
        candidate = suggest_candidate(trial, LITE0, patches=(1, 2, 3, 4))
        if trial.params["scheme"] == "joint":
            n = trial.params["patches"]
            asked.add(n)
            assert candidate.schedule == (Schedule(n, 0) if n > 1 else Schedule())
        else:  # a preset keeps the hardware model's own schedule
            assert "patches" not in trial.params and not candidate.schedule.patched
    assert asked == {1, 2, 3, 4}
    plain = suggest_candidate(optuna.trial.FixedTrial(joint_params(parent, LITE0) or {}), LITE0)
    assert not plain.schedule.patched  # no patch count without the choice


def test_mutants_ask_for_their_parents_patch_count_or_the_next_one() -> None:
    parent = make_preset("bias-only", LITE0)
    patched = replace(parent, schedule=Schedule(3, 4))  # as the hardware model scheduled it
    rng, counts = random.Random(0), set()
    for _ in range(60):
        found = mutant([patched], LITE0, rng, lambda c: True, patches=(1, 2, 3, 4))
        assert found is not None
        child, params, _ = found
        assert params["patches"] == child.schedule.patches in (2, 3, 4)
        assert child.schedule.blocks == 0  # asked for; the hardware model chooses the blocks
        again = suggest_candidate(optuna.trial.FixedTrial(params), LITE0, patches=(1, 2, 3, 4))
        assert again == child
        counts.add(child.schedule.patches)
    assert counts == {2, 3, 4}
    # a parent patched beyond the counts a search asks for asks for the largest of them
    found = mutant(
        [replace(parent, schedule=Schedule(6, 4))], LITE0, rng, lambda c: True, patches=(1, 2)
    )
    assert found is not None and found[0].schedule.patches in (1, 2)


def test_a_search_measures_the_patch_count_its_joint_trials_ask_for(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(ckpt, trials=16, mutate=0.5)
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(FakeEvaluator()))
    trials = optuna.load_study(study_name="s", storage=url).trials
    joint = [
        t for t in trials if t.params.get("scheme") == "joint" and "candidate" in t.user_attrs
    ]
    assert joint and all("patches" in t.params for t in joint)
    patched = 0
    for t in joint:
        candidate = Candidate.from_json(t.user_attrs["candidate"])
        # the count asked for, over the blocks the hardware model chose; whole images where
        # the candidate has no frozen prefix to patch (biases trained from the first layer)
        assert candidate.schedule.patches in (t.params["patches"], 1)
        patched += candidate.schedule.patched
    assert patched  # some asked for patches, and got them


def test_the_result_names_the_best_hand_written_preset_within_the_budgets(tmp_path: Path) -> None:
    """``SearchResult.recipe``: of the presets on the default sub-network (whole images or
    patch by patch) within the budgets, the most accurate on validation; a preset's rule
    carried to another sub-network is a mutant, not a recipe."""
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(ckpt, trials=10, mutate=1.0)
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
        stored = store.evaluations("s", fidelity="measured", status="ok")
        subnets = {
            e.candidate_key: Candidate.from_json(store.get_candidate(e.candidate_key).payload)
            for e in stored
        }
    presets = [
        e
        for e in stored
        if e.details["scheme"] != "joint" and e.memory_bytes <= config.sram_budget_bytes
    ]
    moved = [e for e in presets if subnets[e.candidate_key].subnet != SUBNET]
    assert moved  # mutants that kept a preset's rule on another sub-network
    hand = [e for e in presets if e not in moved]
    best = max(hand, key=lambda e: (e.val_accuracy, -e.memory_bytes))
    recipe = result.recipe
    assert recipe is not None
    assert (recipe.candidate_key, recipe.val_accuracy, recipe.test_accuracy) == (
        best.candidate_key,
        best.val_accuracy,
        best.accuracy,
    )
    assert recipe.scheme == best.details["scheme"] and recipe.memory_bytes == best.memory_bytes
