"""The proposal policy apart from the loop: its registry, its turns, and a strategy added from
outside the package, as a contributor adds one (``docs/trial.md``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

from tinytune.db import open_store
from tinytune.search import InlineExecutor, run_search
from tinytune.search.proposals import STRATEGIES, Proposal, Strategy, Turn, joint_params, registry
from tinytune.search.proposals import policy as policy_module
from tinytune.spaces import make_preset

from .fakes import SPEC, SUBNET, FakeEvaluator, search_config


def test_the_registry_names_each_strategy_by_its_own_name() -> None:
    assert set(STRATEGIES) == {"climb", "front", "twins"}
    for name, strategy in STRATEGIES.items():
        assert issubclass(strategy, Strategy) and strategy.name == name
    turns = policy_module.CLIMBING_TURN + policy_module.MUTANT_TURN + policy_module.AFTER_MEASURED
    assert set(turns) == set(STRATEGIES)  # each one is tried somewhere


def _trials(tmp_path: Path, **options: Any) -> list[optuna.trial.FrozenTrial]:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(ckpt, **options), store, InlineExecutor(FakeEvaluator()))
    return optuna.load_study(study_name="s", storage=url).trials


def test_a_strategy_added_to_the_registry_and_a_turn_proposes_the_runs_fresh_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strategy that proposes the bias-only preset's neighbours in bias tail length, longest
    first: each fresh turn tries it before the front's draw, and each of its proposals is
    measured as a trial with its attribute."""
    bias_only = make_preset("bias-only", SPEC, SUBNET)
    calls: list[int] = []

    class LongerTail(Strategy):
        name = "longer-tail"

        def propose(self, turn: Turn) -> Proposal | None:
            calls.append(len(self.context.front()))
            k = bias_only.update.bias_last_k - len(calls)
            update = dataclasses.replace(bias_only.update, bias_last_k=k)
            candidate = dataclasses.replace(bias_only, update=update)
            params = joint_params(candidate, self.context.spec)
            assert params is not None
            return Proposal(params, {"longer_tail": k})

    monkeypatch.setitem(registry.STRATEGIES, LongerTail.name, LongerTail)
    monkeypatch.setattr(policy_module, "MUTANT_TURN", ("longer-tail", "front"))
    trials = _trials(tmp_path, trials=7, climb=0.0)  # 4 baselines, then 3 fresh turns
    ours = [t for t in trials if "longer_tail" in t.user_attrs]
    assert [t.user_attrs["longer_tail"] for t in ours] == [
        bias_only.update.bias_last_k - i for i in (1, 2, 3)
    ]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in ours)
    assert calls and all(n > 0 for n in calls)  # a turn is taken once the front holds a point
    assert not any("mutant_of" in t.user_attrs for t in trials)  # the front's draw not reached


def test_a_turn_passes_to_the_next_strategy_where_one_proposes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Nothing(Strategy):
        name = "nothing"

    monkeypatch.setitem(registry.STRATEGIES, Nothing.name, Nothing)
    monkeypatch.setattr(policy_module, "MUTANT_TURN", ("nothing", "front"))
    trials = _trials(tmp_path, trials=6, climb=0.0)
    assert sum("mutant_of" in t.user_attrs for t in trials) == 2
