"""The proxy: Eq. 5 additivity checked by hand on a made-up table, the mapping onto other
sub-networks, and Kendall's τ against scipy and a hand count."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy.stats import kendalltau

from tinytune.db import EvaluationRecord, open_store
from tinytune.search.ladder.contribution import LITE_BRANCH
from tinytune.search.ladder.contribution_table import build_table
from tinytune.search.ladder.proxy import estimate, kendall_tau, rank_correlation
from tinytune.spaces import (
    Candidate,
    LiteResidualConfig,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    conv_kinds,
)

from .fakes import SPEC, SUBNET, N, made_up_records

TABLE = build_table("t" * 64, SPEC, SUBNET, made_up_records())


def _candidate(update: UpdateScheme, blocks=(), subnet: SubnetConfig = SUBNET) -> Candidate:
    lite = LiteResidualConfig(tuple((b, LITE_BRANCH) for b in blocks))
    return Candidate(SPEC.name, subnet, lite, update)


def test_estimate_adds_the_parts_by_hand() -> None:
    # base 0.40 + biases of the last 4 (+0.10) + layer 33 at 1/2 (+0.05) + the head in full
    # (+0.03) + a lite residual on block 11 (+0.03) = 0.61
    cand = _candidate(UpdateScheme(4, ((33, 0.5), (36, 1.0))), blocks=(11,))
    est = estimate(cand, TABLE, base=0.40)
    assert (est.base, est.bias, est.weights, est.lite, est.norm) == pytest.approx(
        (0.40, 0.10, 0.08, 0.03, 0.0)
    )
    assert est.accuracy == pytest.approx(0.61)
    assert est.delta == pytest.approx(0.21)


def test_estimate_uses_the_given_base_and_clips() -> None:
    cand = _candidate(UpdateScheme(4, ((33, 0.5),)))
    assert estimate(cand, TABLE, base=0.30).accuracy == pytest.approx(0.45)
    assert estimate(cand, TABLE, base=0.95).accuracy == 1.0
    assert estimate(_candidate(UpdateScheme(0)), TABLE, base=0.0).accuracy == 0.0


def test_bias_tails_between_and_beyond_the_measured_ones() -> None:
    assert estimate(_candidate(UpdateScheme(2)), TABLE, 0.4).bias == pytest.approx(0.02 + 0.08 / 3)
    assert estimate(_candidate(UpdateScheme(N)), TABLE, 0.4).bias == pytest.approx(0.20)


def test_scales_add_their_gain_in_proportion_to_the_tail() -> None:
    full = estimate(_candidate(UpdateScheme(N, norm=True)), TABLE, 0.4)
    assert full.norm == pytest.approx(0.02)
    assert full.accuracy == pytest.approx(0.40 + 0.20 + 0.02)
    half = estimate(_candidate(UpdateScheme(4, norm=True)), TABLE, 0.4)
    assert half.norm == pytest.approx(0.02 * 4 / N)


def test_lite_residuals_interpolate_by_distance_from_the_last_block() -> None:
    # measured: block 11 (distance 0) +0.03, block 9 (distance 2) +0.01
    assert estimate(_candidate(UpdateScheme(0), (10,)), TABLE, 0.4).lite == pytest.approx(0.02)
    assert estimate(_candidate(UpdateScheme(0), (3,)), TABLE, 0.4).lite == pytest.approx(0.01)
    both = estimate(_candidate(UpdateScheme(0), (9, 10, 11)), TABLE, 0.4)
    assert both.lite == pytest.approx(0.06)


def test_unmeasured_ratio_borrows_the_nearest_measured_one() -> None:
    cand = _candidate(UpdateScheme(4, ((33, 0.25),)))
    assert estimate(cand, TABLE, 0.4).weights == pytest.approx(0.05)  # from 33 at 1/2


def test_a_deeper_subnet_maps_layers_by_kind_and_distance_from_the_output() -> None:
    stages = list(SUBNET.stages)
    stages[0] = StageConfig((3, 3, 3), (3, 3, 3))
    deeper = SubnetConfig(SUBNET.resolution, tuple(stages))
    kinds = conv_kinds(SPEC, deeper)
    n = len(kinds)
    assert n == N + 3 and kinds[n - 4] == "pw1" and kinds[n - 3] == "dw"
    # its last pw1 → layer 33 (pw1, 3 from the output); its head → 36; a dw, a kind not
    # analysed, → the analysed layer nearest in distance (33: |3 − 2| < 36: |0 − 2|)
    for weights, expected in (
        (((n - 4, 0.5),), 0.05),
        (((n - 1, 1.0),), 0.03),
        (((n - 3, 0.5),), 0.05),
    ):
        cand = _candidate(UpdateScheme(4, weights), subnet=deeper)
        assert estimate(cand, TABLE, 0.4).weights == pytest.approx(expected)
    # a tail longer than the reference network saturates at all biases
    assert estimate(_candidate(UpdateScheme(n), subnet=deeper), TABLE, 0.4).bias == pytest.approx(
        0.20
    )


def test_kendall_tau_by_hand_and_against_scipy() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [2.0, 1.0, 4.0, 3.0, 5.0]  # 8 concordant, 2 discordant pairs: (8 − 2) / 10
    got = kendall_tau(x, y)
    assert got.tau == pytest.approx(0.6) and got.n == 5
    ref = kendalltau(x, y)
    assert got.tau == pytest.approx(ref.statistic) and got.p_value == pytest.approx(ref.pvalue)
    ties = ([0.1, 0.2, 0.2, 0.5, 0.4, 0.9], [0.3, 0.1, 0.4, 0.4, 0.8, 0.7])
    assert kendall_tau(*ties).tau == pytest.approx(kendalltau(*ties).statistic)


def test_kendall_tau_is_undefined_for_too_few_or_constant_scores() -> None:
    assert kendall_tau([0.1, 0.2], [0.2, 0.3]).tau is None
    assert kendall_tau([0.1, 0.1, 0.1], [0.2, 0.3, 0.4]).tau is None
    with pytest.raises(ValueError, match="equal lengths"):
        kendall_tau([0.1], [0.1, 0.2])


def test_rank_correlation_pairs_proxy_and_measured_by_candidate(tmp_path: Path) -> None:
    proxy = {"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.8, "e": 0.9}  # e has no measurement
    measured = {"a": 0.52, "b": 0.71, "c": 0.66, "d": 0.9, "f": 0.4}  # f has no proxy
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        for fidelity, values in (("proxy", proxy), ("measured", measured)):
            for name, acc in values.items():
                key = name * 16
                store.add_candidate(key, SPEC.name, "{}")
                val = acc if fidelity == "measured" else None  # measured: chosen on validation
                store.add_evaluation(
                    EvaluationRecord(
                        "s", key, fidelity, "ok", accuracy=acc, val_accuracy=val, trial_number=0
                    )
                )
        got = rank_correlation(store, "s")
    both = ["a", "b", "c", "d"]
    assert got.n == 4
    assert got.tau == pytest.approx(
        kendalltau([proxy[k] for k in both], [measured[k] for k in both]).statistic
    )
