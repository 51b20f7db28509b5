"""The fidelity ladder: the promotion rule by hand, and the driver promoting proxy-scored
candidates while Optuna, the front and the hypervolume see measured results only."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tinytune.db import open_store
from tinytune.search import InlineExecutor, SearchConfig, run_search
from tinytune.search.front.pareto import hypervolume_gain, reference
from tinytune.search.ladder.contribution import ContributionPlan
from tinytune.search.ladder.promotion import calibration_offset, choose_promotion
from tinytune.search.study.attrs import Attr

from .dashboard import dashboard_api
from .fakes import FakeEvaluator, N, search_config

REF = (0.0, 100.0, 1.0)
FRONT = [(0.5, 50.0, 0.5)]  # normalised: (−0.5, 0.5, 0.5), a box of 0.5 · 0.5 · 0.5


def test_hypervolume_gain_by_hand() -> None:
    # (0.8, 80, 0.5) adds a box 0.8 · 0.2 · 0.5 = 0.08, of which 0.5 · 0.2 · 0.5 = 0.05 is
    # already dominated by the front
    assert hypervolume_gain([(0.8, 80.0, 0.5)], FRONT, REF) == pytest.approx(0.03)
    assert hypervolume_gain([(0.4, 60.0, 0.6)], FRONT, REF) == 0.0  # dominated
    assert hypervolume_gain([(0.5, 50.0, 0.5)], [], REF) == pytest.approx(0.125)
    # points add their union: the same point twice adds it once; (0.5, 50, 0.2) holds the
    # front's box in its 0.5 · 0.5 · 0.8 = 0.2 and shares 0.5 · 0.2 · 0.5 = 0.05 with the
    # first point's 0.08, so the two make 0.08 + 0.2 − 0.05 = 0.23 where the front made 0.125
    assert hypervolume_gain([(0.8, 80.0, 0.5)] * 2, FRONT, REF) == pytest.approx(0.03)
    two = [(0.8, 80.0, 0.5), (0.5, 50.0, 0.2)]
    assert hypervolume_gain(two, FRONT, REF) == pytest.approx(0.23 - 0.125)


def test_promotion_prefers_the_largest_gain_then_the_highest_proxy() -> None:
    assert choose_promotion([(0.4, 60.0, 0.6), (0.8, 80.0, 0.5)], FRONT, REF) == 1
    assert choose_promotion([(0.45, 70.0, 0.7), (0.4, 60.0, 0.6)], FRONT, REF) == 0
    # as estimated: 0.05 · 0.9 · 0.5 − 0.05 · 0.5 · 0.5 = 0.01 against 0.8 · 0.1 · 0.5 − 0.5 ·
    # 0.1 · 0.5 = 0.015; shifted up by 0.15, the low-memory contender gains 0.04 against 0.0225
    contenders = [(0.05, 10.0, 0.5), (0.8, 90.0, 0.5)]
    assert choose_promotion(contenders, FRONT, REF, offset=0.0) == 1
    assert choose_promotion(contenders, FRONT, REF, offset=0.15) == 0
    with pytest.raises(ValueError, match="at least one"):
        choose_promotion([], FRONT, REF)


def test_reference_and_calibration_offset() -> None:
    assert reference([(0.5, 10.0, 0.2), (0.6, 20.0, 0.1)], 64.0, None) == pytest.approx(
        (0.0, 64.0, 0.22)
    )
    assert calibration_offset([(0.5, 0.6), (0.4, 0.45), (0.7, 0.6)]) == pytest.approx(0.05)
    assert calibration_offset([]) == 0.0


PLAN = ContributionPlan(
    weight_layers=(N - 4, N - 1), ratios=(0.5, 1.0), bias_ks=(), lite_offsets=(0,), norm=False
)


def _config(ckpt: Path, **kw: object) -> SearchConfig:
    """The proxy ladder in brackets of 3, over the hand-written contribution plan."""
    fields: dict[str, object] = {
        "trials": 3,
        "baselines": False,
        "proxy": True,
        "proxy_eta": 3,
        "contribution_plan": PLAN,
    }
    return search_config(ckpt, **{**fields, **kw})


def test_ladder_promotes_and_tells_optuna_measured_values_only(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    fake = FakeEvaluator()
    with open_store(url) as store:
        result = run_search(_config(ckpt, trials=2), store, InlineExecutor(fake))
        measured = {e.candidate_key: e for e in store.evaluations("s", fidelity="measured")}
        proxy = {e.candidate_key: e for e in store.evaluations("s", fidelity="proxy")}
        snapshots = store.pareto_snapshots("s")
    contribution = len(PLAN.entries(*_ref()))
    assert result.contribution_tasks == contribution == 9
    assert len(fake.candidates) == contribution + result.counts.base_tasks + result.counts.measured
    assert result.counts.measured == 2 and result.counts.promoted == 2
    assert result.counts.proxy_scored > result.counts.promoted  # more scored than trained

    study = optuna.load_study(study_name="s", storage=url)
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    # the schedule twins of the measured candidates are told their fine-tunes' results, and
    # a candidate proposed again the result it has (the sampler may draw one twice)
    again = [t for t in finished if Attr.REUSED_FROM in t.user_attrs]
    for t in again:
        first = study.trials[t.user_attrs[Attr.REUSED_FROM]]
        assert (
            t.values == first.values
            and t.user_attrs["candidate_key"] == first.user_attrs["candidate_key"]
        )
    complete = [t for t in finished if "twin_of" not in t.user_attrs and t not in again]
    assert len(complete) == 2 and len(finished) == 2 + result.counts.twins + len(again)
    for t in complete:  # Optuna's values are the measurements
        assert t.user_attrs["fidelity"] == "measured" and t.user_attrs["promoted"]
        assert t.values[0] == measured[t.user_attrs["candidate_key"]].val_accuracy
        assert "hypervolume" in t.user_attrs
    not_promoted = [
        t
        for t in study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
        if t.user_attrs.get("fidelity") == "proxy"
    ]
    assert len(not_promoted) == result.counts.proxy_scored - result.counts.promoted
    for t in not_promoted:
        assert t.values is None and "proxy_accuracy" in t.user_attrs
        assert t.user_attrs["pruned_reason"].startswith("proxy: not promoted")
        assert t.user_attrs["candidate_key"] in proxy
        assert t.user_attrs["candidate_key"] not in measured
    # the front and every snapshot hold measured candidates only
    assert result.front and {p.candidate_key for p in result.front} <= set(measured)
    for snap in snapshots:
        assert {p["candidate_key"] for p in snap.points} <= set(measured)
    # every fine-tuned candidate also has its proxy estimate: τ over all of them (a schedule
    # twin shares a fine-tune; it is no second pair)
    tuned = {k for k, e in measured.items() if "twin_of" not in (e.details or {})}
    assert tuned <= set(proxy) and result.proxy_pairs == 2 == len(tuned)
    # the hypervolume history reaches optuna-dashboard's study page
    detail = dashboard_api(url, f"/api/studies/{study._study_id}")
    assert [g["id"] for g in detail["plotly_graph_objects"]] == [Attr.HYPERVOLUME_GRAPH]


def _ref():
    from .fakes import SPEC, SUBNET

    return SPEC, SUBNET


def test_a_second_run_reuses_the_contribution_table(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(_config(ckpt, trials=1), store, InlineExecutor(FakeEvaluator()))
    fake = FakeEvaluator()
    with open_store(url) as store:
        again = run_search(_config(ckpt, trials=2, resume=True), store, InlineExecutor(fake))
    assert again.contribution_tasks == 0
    assert len(fake.candidates) == again.counts.base_tasks + again.counts.measured
    assert again.counts.measured == 1


def test_the_proposal_budget_stops_proposing(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        result = run_search(
            _config(ckpt, trials=10, max_proposals=4), store, InlineExecutor(FakeEvaluator())
        )
    assert result.proposals == 4 and result.stopped_by == "proposals"
    assert 1 <= result.counts.measured <= 2  # one promotion per (possibly unfinished) bracket
    states = {t.state for t in optuna.load_study(study_name="s", storage=url).trials}
    assert optuna.trial.TrialState.RUNNING not in states


@pytest.mark.slow
def test_ladder_with_real_fine_tunes(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The contribution table and the bases come from real fine-tunes scored on the validation
    split; the measured candidates keep their test accuracy."""
    from tinytune.evaluators import run_evaluation
    from tinytune.search.ladder.contribution import TableIdentity, file_sha256

    from .fakes import SPEC, SUBNET

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = _config(tiny_checkpoint, trials=2, baselines=True)
    identity = TableIdentity(
        SPEC.name,
        str(tiny_checkpoint),
        file_sha256(tiny_checkpoint),
        "digits",
        0,
        config.finetune,
        SUBNET,
    )
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(run_evaluation))
        contributions = store.contributions(identity.key)
        measured = store.evaluations("s", fidelity="measured", status="ok")
    assert result.contribution_tasks == len(contributions) == 9 and result.counts.measured == 2
    for r in contributions:
        assert r.status == "ok" and r.accuracy is not None and r.test_accuracy is not None
        assert r.checkpoint_sha256 == identity.checkpoint_sha256
    assert [e.details["scheme"] for e in measured] == ["last", "bias-only"]  # baselines first
    assert result.proxy_pairs == 2  # the baselines are on the reference sub-network


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--sampler", "cmaes"],
            "--sampler must be one of tpe, tpe-early, gp, random, nsga2, got 'cmaes'",
        ),
        (["--proxy", "--proxy-eta", "1"], "--proxy-eta must be >= 2"),
        (["--proposals", "0"], "--proposals must be >= 1"),
    ],
)
def test_bad_ladder_options_are_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tinytune.cli.main import main

    code = main(["search", "--storage", f"sqlite:///{tmp_path / 'db.sqlite'}", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err
