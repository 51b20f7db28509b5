"""The latency model: hand-computed predictions, and coefficients recovered by the fit."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import torch

from tinytune.errors import ConfigError
from tinytune.hwmodels.latency import (
    FEATURES,
    LatencyCoefficients,
    fit_coefficients,
    op_class,
    phase_features,
    predict_latency,
)
from tinytune.hwmodels.profiler import measure_step
from tinytune.ir import trace
from tinytune.models import build_candidate
from tinytune.models.layers import Classifier, ConvUnit, GlobalAvgPool
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import get_supernet, suggest_candidate


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = ConvUnit(torch.randn(4, 2, 1, 1), torch.zeros(4), act="relu", index=0)
        self.pool = GlobalAvgPool()
        self.fc = Classifier(4, 3, torch.Generator().manual_seed(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)))


def test_prediction_by_hand() -> None:
    graph = trace(_Tiny(), torch.zeros(1, 2, 3, 3))  # conv frozen; classifier trained
    coef = LatencyCoefficients(
        {
            "conv_pw": {"forward": (1.0, 0.0, 0.0, 10.0)},
            "linear": {"forward": (2.0, 0.0, 0.0, 0.0), "update": (0.0, 0.0, 1.0, 0.0)},
        }
    )
    report = predict_latency(graph, coef)
    conv_macs = 4 * 9 * 2  # output elements × input channels
    fc_macs = 3 * 4
    assert report.inference_s == pytest.approx(conv_macs + 10 + 2 * fc_macs)
    assert report.train_step_s == pytest.approx(report.inference_s + 3 * 4 + 3)  # + update
    assert [op_class(op) for op in graph.ops] == ["conv_pw", "elementwise", "linear"]
    assert "grad_input" not in phase_features(graph.ops[0], graph)  # nothing flows into x


def test_fit_recovers_predictions_of_the_model_class() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = get_supernet("ofa-proxyless-w0.35")
    supernet = build_ofa_supernet(spec, 10)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    graphs = []
    for _ in range(24):
        c = suggest_candidate(study.ask(), spec)
        r = c.subnet.resolution
        graphs.append(trace(build_candidate(c, supernet, 10, []), torch.zeros(1, 3, r, r)))
    rng = np.random.default_rng(0)
    truth = LatencyCoefficients(
        {
            cls: {ph: tuple(float(v) for v in rng.uniform(0, 1e-8, len(FEATURES))) for ph in (
                "forward", "grad_input", "grad_weight", "update")}
            for cls in ("conv_pw", "conv_dw", "conv_kxk", "linear", "elementwise")
        }
    )  # fmt: skip
    seconds = [predict_latency(g, truth).train_step_s for g in graphs]
    fitted = fit_coefficients(graphs[:18], seconds[:18])
    for g, s in zip(graphs[18:], seconds[18:], strict=True):
        assert predict_latency(g, fitted).train_step_s == pytest.approx(s, rel=0.05)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError):
        LatencyCoefficients({"conv_pw": {"forward": (1.0, -1.0, 0.0, 0.0)}})
    with pytest.raises(ConfigError):
        LatencyCoefficients({"conv9": {}})
    graph = trace(_Tiny(), torch.zeros(1, 2, 3, 3))
    with pytest.raises(ConfigError):
        fit_coefficients([graph], [0.0])
    with pytest.raises(ConfigError):
        fit_coefficients([graph, graph], [1.0])


def test_coefficients_round_trip() -> None:
    coef = LatencyCoefficients({"linear": {"update": (0.0, 1e-9, 2e-9, 3e-6)}})
    assert LatencyCoefficients.from_dict(coef.to_dict()) == coef


def test_measure_step_leaves_the_module_unchanged() -> None:
    net = _Tiny()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    timing = measure_step(net, torch.randn(2, 2, 3, 3), warmup=1, repeats=3)
    assert len(timing.samples) == 3 and timing.train_step_s > 0 and timing.inference_s > 0
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
