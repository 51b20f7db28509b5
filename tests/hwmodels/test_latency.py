"""The latency model: hand-computed predictions, and coefficients recovered by the fit."""

from __future__ import annotations

import time

import numpy as np
import optuna
import pytest
import torch

from tinytune.errors import ConfigError
from tinytune.hwmodels.latency import (
    COST_CLASSES,
    EAGER_CLASSES,
    FEATURES,
    KERNEL_PHASES,
    OP_CLASSES,
    PHASES,
    LatencyCoefficients,
    call_rows,
    cost_class,
    op_class,
    op_rows,
    op_terms,
    phase_features,
    predict_latency,
)
from tinytune.hwmodels.latency_fit import ModelForm, coefficients_from_vector, fit_coefficients
from tinytune.hwmodels.profiler import clock, clock_name, measure_step
from tinytune.ir import Graph, trace
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


def test_eager_terms_by_hand() -> None:
    """The work PyTorch runs around a convolution as kernels of its own, on the output's 36
    elements of 4 bytes: the ReLU, its mask (the output needs a gradient: the bias and the
    scale are trained), the scale's multiply-add and the bias's gradient."""
    net = _Tiny()
    net.conv.set_scale_update(True)
    net.conv.set_bias_update(True)
    graph = trace(net, torch.zeros(1, 2, 3, 3))
    terms = [(c, p, f.tolist()) for c, p, f in op_terms(graph.ops[0], graph)]
    assert terms == [
        ("conv_pw_few", "forward", [72.0, 248.0, 36.0, 1.0]),
        ("conv_pw_few", "update", [0.0, 32.0, 8.0, 1.0]),  # 4 biases and 4 scales
        ("act", "forward", [0.0, 288.0, 36.0, 1.0]),
        ("act_saved", "forward", [0.0, 144.0, 36.0, 1.0]),
        ("act_saved", "grad_input", [0.0, 144.0, 36.0, 1.0]),
        ("scale", "forward", [0.0, 432.0, 36.0, 1.0]),
        ("scale", "grad_input", [0.0, 432.0, 36.0, 1.0]),
        ("bias_grad", "grad_weight", [0.0, 144.0, 36.0, 1.0]),
    ]
    assert [c for c, _, _ in op_terms(graph.ops[1], graph)] == ["elementwise"] * 2  # pooling
    # a profile prices each term with its class's coefficients; one without them, at 0
    eager = {"forward": (0.0, 0.0, 1.0, 0.0), "grad_input": (0.0, 0.0, 0.0, 1000.0)}
    coef = LatencyCoefficients({"act": eager, "scale": eager})
    report = predict_latency(graph, coef)
    conv = dict(report.per_op)["conv"]
    assert conv == {"forward": 72.0, "update": 0.0, "grad_input": 1000.0, "grad_weight": 0.0}
    # the mask is packed in a training step's forward pass, not in inference
    kept = LatencyCoefficients({"act_saved": eager})
    assert dict(predict_latency(graph, kept).per_op)["conv"]["forward"] == 36.0
    assert predict_latency(graph, kept).inference_s == 0.0
    assert report.inference_s == 72.0  # the ReLU's 36 and the scale's 36


def test_a_grouped_convolution_has_a_class_of_its_own() -> None:
    """A grouped (not depthwise) convolution is priced by ``conv_group``, or by ``conv_kxk``
    in a profile without it."""
    grouped = ConvUnit(torch.randn(4, 2, 1, 1), torch.zeros(4), act="none", groups=2, index=0)
    grouped.set_weight_update(1.0)  # as a lite residual's: trained whole
    net = torch.nn.Sequential(grouped, GlobalAvgPool(), Classifier(4, 2, torch.Generator()))
    graph = trace(net, torch.zeros(1, 4, 5, 5))
    assert (op_class(graph.ops[0]), cost_class(graph.ops[0])) == ("conv_kxk", "conv_group")
    kxk = LatencyCoefficients({"conv_kxk": {"forward": (1.0, 0.0, 0.0, 0.0)}})
    assert dict(predict_latency(graph, kxk).per_op)["0"]["forward"] == 4 * 25 * 2
    own = LatencyCoefficients({**kxk.values, "conv_group": {"forward": (0.0, 0.0, 0.0, 3.0)}})
    assert dict(predict_latency(graph, own).per_op)["0"]["forward"] == 3.0


def _sampled_graphs(n: int, seed: int) -> list[Graph]:
    """Traced training graphs of ``n`` candidates drawn at random from the joint space."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = get_supernet("ofa-proxyless-w0.35")
    supernet = build_ofa_supernet(spec, 10)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    graphs = []
    for _ in range(n):
        c = suggest_candidate(study.ask(), spec)
        r = c.subnet.resolution
        graphs.append(trace(build_candidate(c, supernet, 10, []), torch.zeros(1, 3, r, r)))
    return graphs


def test_fit_recovers_predictions_of_the_model_class() -> None:
    graphs = _sampled_graphs(48, seed=1)
    rng = np.random.default_rng(0)
    truth = LatencyCoefficients(
        {
            cls: {ph: tuple(float(v) for v in rng.uniform(0, 1e-8, len(FEATURES))) for ph in (
                "forward", "grad_input", "grad_weight", "update")}
            for cls in COST_CLASSES
        }
    )  # fmt: skip
    seconds = [predict_latency(g, truth).train_step_s for g in graphs]
    fitted = fit_coefficients(graphs[:36], seconds[:36], form=ModelForm(eager=True))
    for g, s in zip(graphs[36:], seconds[36:], strict=True):
        assert predict_latency(g, fitted).train_step_s == pytest.approx(s, rel=0.05)
    # without the eager classes, the convolutions' coefficients cannot hold their work
    coarse = fit_coefficients(graphs[:36], seconds[:36])
    pairs = zip(graphs, seconds, strict=True)
    off = [abs(predict_latency(g, coarse).train_step_s / s - 1) for g, s in pairs]
    assert max(off) > 0.05


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


class _Waits(torch.nn.Module):
    """A linear layer that also waits, off the CPU, for a fixed time in its forward pass."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.linear(x)


def test_one_thread_is_timed_in_its_cpu_time_and_several_on_the_wall_clock() -> None:
    """With one intra-op thread a step is timed in the calling thread's CPU time, which leaves
    out time spent waiting (a sleep here, another process holding the core in practice); with
    several threads, in wall time, which counts it."""
    net, x = _Waits(0.05), torch.randn(1, 4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert clock() is time.thread_time and clock_name() == "thread CPU time"
        cpu = measure_step(net, x, warmup=1, repeats=3)
        torch.set_num_threads(2)
        assert clock() is time.perf_counter and clock_name() == "wall time"
        wall = measure_step(net, x, warmup=1, repeats=3)
    finally:
        torch.set_num_threads(threads)
    assert cpu.train_step_s < 0.025 <= 0.05 <= wall.train_step_s
    assert cpu.inference_s < 0.025 <= 0.05 <= wall.inference_s


def test_call_rows_by_hand() -> None:
    graph = trace(_Tiny(), torch.zeros(1, 2, 3, 3))  # conv frozen; classifier trained
    calls = [
        ("conv", "conv2d_s8", 5.0),
        ("pool", "gap_s8", 1.0),
        ("fc", "linear_f32", 2.0),
        ("fc", "softmax_xent_grad", 0.5),
        ("fc", "linear_f32_backward", 3.0),
    ]
    rows, seconds = call_rows(graph, calls)
    width = len(PHASES) * len(FEATURES)

    def at(cls: str, phase: str) -> slice:
        start = COST_CLASSES.index(cls) * width + PHASES.index(phase) * len(FEATURES)
        return slice(start, start + len(FEATURES))

    assert seconds.tolist() == [5.0, 1.0, 2.0, 3.5]  # the loss gradient joins the classifier's
    assert rows[0][at("conv_pw_few", "forward")].tolist() == [72.0, 248.0, 36.0, 1.0]  # 9 px
    # its ReLU reads and writes 36 elements; the output needs no gradient, so no mask is kept
    assert rows[0][at("act", "forward")].tolist() == [0.0, 288.0, 36.0, 1.0]
    assert not rows[:, at("act_saved", "forward")].any()
    assert rows[1][at("elementwise", "forward")].tolist() == [36.0, 160.0, 4.0, 1.0]
    assert rows[2][at("linear", "forward")].tolist() == [12.0, 76.0, 3.0, 1.0]
    # the classifier's backward: its weight gradient and update (no gradient flows into x)
    assert rows[3][at("linear", "grad_weight")].tolist() == [12.0, 76.0, 12.0, 1.0]
    assert rows[3][at("linear", "update")].tolist() == [0.0, 60.0, 15.0, 1.0]
    assert rows.sum() == 72 + 248 + 36 + 1 + 325 + 36 + 160 + 4 + 1 + 12 + 76 + 3 + 1 + 101 + 76
    with pytest.raises(ConfigError, match="unknown kernel"):
        call_rows(graph, [("conv", "conv9", 1.0)])
    with pytest.raises(ConfigError, match="does not have"):
        call_rows(graph, [("nowhere", "conv2d_s8", 1.0)])


def test_op_rows_by_hand() -> None:
    graph = trace(_Tiny(), torch.zeros(1, 2, 3, 3))  # conv frozen; classifier trained
    rows, seconds = op_rows(graph, {"conv": 5.0, "fc": 2.0, "elsewhere": 1.0})
    width = len(PHASES) * len(FEATURES)
    assert seconds.tolist() == [5.0, 2.0]  # in the graph's order; other names left out
    start = COST_CLASSES.index("conv_pw_few") * width  # forward: the class's first phase
    assert rows[0][start : start + 4].tolist() == [72.0, 248.0, 36.0, 1.0]
    start = COST_CLASSES.index("linear") * width
    assert rows[1][start : start + 4].tolist() == [12.0, 76.0, 3.0, 1.0]
    start = COST_CLASSES.index("act") * width
    assert rows[0][start : start + 4].tolist() == [0.0, 288.0, 36.0, 1.0]  # the conv's ReLU
    assert rows.sum() == 72 + 248 + 36 + 1 + 325 + 12 + 76 + 3 + 1
    # backward: the classifier's weight gradient (no gradient flows into x); the frozen
    # convolution runs neither backward phase, so its row is left out
    rows, seconds = op_rows(graph, {"conv": 5.0, "fc": 3.0}, ("grad_input", "grad_weight"))
    assert seconds.tolist() == [3.0] and rows.sum() == 12 + 76 + 12 + 1
    at = COST_CLASSES.index("linear") * width + PHASES.index("grad_weight") * 4
    assert rows[0][at : at + 4].tolist() == [12.0, 76.0, 12.0, 1.0]


def test_measure_op_backward_times_the_modules_a_gradient_reaches() -> None:
    """The frozen convolution (its input needs no gradient) and the pooling after it get no
    gradient: only the trained classifier is timed; a chain of trained layers times every
    one, in less than the whole backward pass."""
    from tinytune.hwmodels.profiler import measure_op_backward

    net = _Tiny()
    times = measure_op_backward(net, torch.randn(1, 2, 3, 3), ["conv", "pool", "fc"], repeats=3)
    assert set(times) == {"fc"} and times["fc"] > 0
    assert all(p.grad is None for p in net.parameters())  # gradients left as they were
    chain = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(4)))
    x = torch.randn(8, 64)
    times = measure_op_backward(chain, x, ["0", "1", "2", "3"], repeats=5)
    assert set(times) == {"0", "1", "2", "3"} and all(t > 0 for t in times.values())
    with pytest.raises(ValueError, match="no sub-modules named"):
        measure_op_backward(chain, x, ["9"])


def test_the_ops_passes_run_inside_the_rounds_as_a_training_step_runs_them() -> None:
    """Each round, after a network's steps and forward passes, as many hooked forward passes
    (with autograd recording, as in a step) and hooked backward passes; only the inference
    passes run without it."""
    from tinytune.hwmodels.profiler import measure_steps

    recording: list[bool] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            recording.append(torch.is_grad_enabled())
            return x * 2

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), Probe(), torch.nn.Linear(4, 3))
    x = torch.randn(2, 4)
    (timing,) = measure_steps([(net, x)], rounds=3, repeats=2, warmup=1, ops=[["0", "1", "2"]])
    assert set(timing.per_op_forward_s) == set(timing.per_op_backward_s) == {"0", "1", "2"}
    assert all(
        t > 0 for t in [*timing.per_op_forward_s.values(), *timing.per_op_backward_s.values()]
    )
    # warm-up: a step, a forward pass, a hooked pair; each round: 2 of each and 2 hooked pairs
    assert recording.count(False) == 1 + 3 * 2
    assert recording.count(True) == 1 + 2 + 3 * (2 + 2 + 2)
    assert all(p.grad is None for p in net.parameters())
    with pytest.raises(ValueError, match="one list of op names per network"):
        measure_steps([(net, x)], ops=[])
    with pytest.raises(ValueError, match="no sub-modules named"):
        measure_steps([(net, x)], ops=[["9"]])


def test_an_ops_figure_is_its_fastest_pass_after_the_warm_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a clock that advances by 9, 5, 2 and 7 between the hooks of four forward passes
    (the first a warm-up, with a backward pass whose two clock readings add nothing), the op's
    time is 2."""
    from tinytune.hwmodels import profiler

    deltas = iter([0, 9, 0, 0, 0, 5, 0, 2, 0, 7])
    now = [0.0]

    def fake() -> float:
        now[0] += next(deltas)
        return now[0]

    monkeypatch.setattr(profiler, "clock", lambda: fake)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    assert profiler.measure_op_forward(net, torch.randn(1, 4), ["0"], repeats=3) == {"0": 2.0}


def test_model_forms_tie_coefficients_by_hand() -> None:
    """A form's tying matrix spreads each parameter over the (cost class, phase, feature)
    cells it prices, and only those."""
    width = len(PHASES) * len(FEATURES)

    def cell(cls: str, phase: str, feature: str) -> int:
        return COST_CLASSES.index(cls) * width + PHASES.index(phase) * 4 + FEATURES.index(feature)

    fitted = len(COST_CLASSES) - len(EAGER_CLASSES)  # a form without the eager classes
    one = ModelForm("shared", "shared", ("macs", "constant")).tying()
    assert one.shape == (len(COST_CLASSES) * width, 2)
    assert one[:, 0].sum() == one[:, 1].sum() == fitted * len(PHASES)
    assert not one[cell("act", "forward", "constant")].any()
    assert one[cell("linear", "update", "macs"), 0] == 1.0
    assert one[cell("conv_dw", "forward", "constant"), 1] == 1.0
    assert not one[cell("conv_dw", "forward", "bytes")].any()
    op = ModelForm("op", "forward-backward", FEATURES)
    assert op.n_params == len(OP_CLASSES) * 2 * len(FEATURES)
    t = op.tying()
    same = [cell("conv_pw", "grad_input", "bytes"), cell("conv_pw_few", "update", "bytes")]
    assert (t[same[0]] == t[same[1]]).all() and t[same[0]].sum() == 1.0
    assert (t[cell("conv_pw", "forward", "bytes")] != t[same[0]]).any()
    assert ModelForm().n_params == fitted * width
    everything = ModelForm(eager=True)
    assert everything.tying().tolist() == np.eye(len(COST_CLASSES) * width).tolist()
    assert everything.describe().endswith(
        "of macs, bytes, elements, constant; activations, scales and bias gradients apart"
    )
    shared = ModelForm("shared", "shared", ("macs", "constant"), eager=True)
    assert shared.describe().endswith("; activations, scales and bias gradients priced alike")
    # with the eager classes fitted, each is an op class of its own
    op_act = ModelForm("op", "forward-backward", FEATURES, eager=True)
    assert op_act.n_params == (len(OP_CLASSES) + len(EAGER_CLASSES)) * 2 * len(FEATURES)
    assert op_act.to_dict()["eager"] is True
    # the update: one set for every class, apart from the backward phases it is shared with
    t = ModelForm("cost", "forward-backward", FEATURES, ("elements", "constant")).tying()
    update = [cell(c, "update", "elements") for c in COST_CLASSES if c not in EAGER_CLASSES]
    assert all((t[u] == t[update[0]]).all() for u in update) and t[update[0]].sum() == 1.0
    assert (t[cell("conv_pw", "grad_weight", "elements")] != t[update[0]]).any()
    assert t.shape[1] == fitted * 2 * len(FEATURES) + 2
    assert not t[cell("conv_pw", "update", "bytes")].any()  # the update: elements, constant
    # a few-pixel class of a form that shares it is left to fall back on its op class
    x = op.tying() @ np.arange(1.0, op.n_params + 1)
    coef = coefficients_from_vector(x, np.ones(len(x), dtype=bool), op)
    assert "conv_pw_few" not in coef.values
    assert (coef.get("conv_pw_few", "update") == coef.get("conv_pw", "grad_input")).all()
    with pytest.raises(ConfigError, match="unknown class sharing"):
        ModelForm("some")
    with pytest.raises(ConfigError, match="features must be some of"):
        ModelForm(features=("flops",))


def test_every_exported_kernel_has_its_phases() -> None:
    from tinytune.lowering.program import KERNELS

    assert set(KERNEL_PHASES) == set(KERNELS)


def test_timed_calls_make_the_phases_identifiable() -> None:
    """Six networks' steps alone cannot separate 80 coefficients; with each op's timed calls
    (forward, gradient to the input, weight gradient with its update) the fit gives every phase
    of these networks, and of held-out ones built from the same (op class, phase) pairs."""
    graphs = _sampled_graphs(24, seed=3)
    rng = np.random.default_rng(1)
    draw = [tuple(float(v) for v in rng.uniform(0, 1e-8, len(FEATURES))) for _ in range(20)]
    truth = LatencyCoefficients(
        {cls: dict(zip(PHASES, draw[4 * i : 4 * i + 4], strict=True)) for i, cls in
         enumerate(OP_CLASSES)}
    )  # fmt: skip
    kernel = {"forward": "conv2d_s8", "grad_input": "conv2d_grad_input"}
    timed = []
    for g in graphs:
        calls = []
        for name, phases in predict_latency(g, truth).per_op:
            for phase in ("forward", "grad_input"):
                if phase in phases:
                    calls.append((name, kernel[phase], phases[phase]))
            weight = [phases[p] for p in ("grad_weight", "update") if p in phases]
            if weight:
                calls.append((name, "update_bias", sum(weight)))
        timed.append(calls)
    seconds = [predict_latency(g, truth).train_step_s for g in graphs]

    def pairs(g: Graph) -> set[tuple[str, str]]:
        return {(op_class(op), p) for op in g.ops for p in phase_features(op, g)}

    def split(totals: dict[str, float]) -> tuple[float, float, float]:
        return totals["forward"], totals["grad_input"], totals["grad_weight"] + totals["update"]

    fitted = fit_coefficients(graphs[:6], seconds[:6], calls=timed[:6])
    steps_only = fit_coefficients(graphs[:6], seconds[:6])
    seen = set().union(*map(pairs, graphs[:6]))
    held = [g for g in graphs[6:] if pairs(g) <= seen]
    assert len(held) >= 3
    off = 0.0
    for g in [*graphs[:6], *held]:
        want = split(predict_latency(g, truth).phase_totals())
        got = split(predict_latency(g, fitted).phase_totals())
        assert got == pytest.approx(want, rel=1e-6)
        alone = split(predict_latency(g, steps_only).phase_totals())
        off = max(off, *(abs(a / w - 1) for a, w in zip(alone, want, strict=True) if w))
    assert off > 0.05  # from whole steps alone, the phases come out wrong


class _Shapes(torch.nn.Module):
    """A pointwise and a depthwise convolution on ``side`` × ``side`` pixels."""

    def __init__(self) -> None:
        super().__init__()
        self.pw = ConvUnit(torch.randn(6, 3, 1, 1), torch.zeros(6), act="relu", index=0)
        self.dw = ConvUnit(
            torch.randn(6, 1, 3, 3), torch.zeros(6), act="relu", padding=1, groups=6, index=1
        )
        self.pool = GlobalAvgPool()
        self.fc = Classifier(6, 2, torch.Generator().manual_seed(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.dw(self.pw(x))))


@pytest.mark.parametrize(
    ("side", "pw", "dw"),
    [(3, "conv_pw_few", "conv_dw_few"), (4, "conv_pw", "conv_dw_few"),
     (8, "conv_pw", "conv_dw_few"), (9, "conv_pw", "conv_dw")],
)  # fmt: skip
def test_cost_classes_follow_the_few_pixel_kernels(side, pw, dw) -> None:
    """Under 16 output pixels a pointwise convolution, at most 64 a depthwise one, is priced by
    its few-pixel class (the bundle's Linux kernels' thresholds)."""
    graph = trace(_Shapes(), torch.zeros(1, 3, side, side))
    assert [op_class(op) for op in graph.ops[:2]] == ["conv_pw", "conv_dw"]
    assert [cost_class(op) for op in graph.ops[:2]] == [pw, dw]


def test_a_profile_without_few_pixel_classes_prices_them_as_their_op_class() -> None:
    graph = trace(_Shapes(), torch.zeros(1, 3, 3, 3))  # both convolutions of few pixels
    base = {"forward": (1.0, 0.0, 2.0, 5.0), "grad_input": (0.5, 0.0, 0.0, 1.0)}
    coarse = LatencyCoefficients({"conv_pw": base, "conv_dw": base})
    pw_macs, dw_macs = 6 * 3 * 9, 6 * 9 * 9
    fwd = (pw_macs + 2 * 54 + 5) + (dw_macs + 2 * 54 + 5)
    assert predict_latency(graph, coarse).inference_s == pytest.approx(fwd)
    # a few-pixel class's own coefficients win; its missing phases are its op class's
    fine = LatencyCoefficients(
        {"conv_pw": base, "conv_dw": base, "conv_dw_few": {"forward": (0.0, 0.0, 0.0, 7.0)}}
    )
    assert predict_latency(graph, fine).inference_s == pytest.approx(pw_macs + 2 * 54 + 5 + 7)
    assert np.array_equal(fine.get("conv_dw_few", "grad_input"), base["grad_input"])
    assert not fine.get("conv_kxk", "forward").any()  # other missing entries cost 0
