"""Profile the host: measure training steps of sampled candidates and write a measurement file.

Candidates are drawn at random from the joint space (presets included, as the search's
``scheme`` choice does), built on a randomly initialised supernet — step time depends on the
network's shapes and its update scheme, not on the weights' values — traced, and timed with
:func:`tinytune.hwmodels.profiler.measure_steps` (interleaved rounds; the fastest repeat and
the median).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import torch

from tinytune.hwmodels.host import machine_info
from tinytune.hwmodels.measurements import Measurement, MeasurementFile
from tinytune.hwmodels.profiler import (
    clock_name,
    measure_op_backward,
    measure_op_forward,
    measure_step,
    measure_steps,
)
from tinytune.ir import trace
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import Candidate, SupernetSpec, suggest_candidate

__all__ = ["estimate_seconds", "profile_host", "sample_candidates"]

WARMUP = 3
"""Untimed steps of each network before the rounds (:func:`measure_steps`'s default)."""

OP_REPEATS = 10
"""Passes of each per-op timing (:func:`measure_op_forward` and :func:`measure_op_backward`:
one warm-up and their default of 9)."""


def sample_candidates(spec: SupernetSpec, n: int, seed: int) -> list[Candidate]:
    """``n`` distinct candidates of the joint space, drawn by Optuna's random sampler."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out: dict[str, Candidate] = {}
    for _ in range(50 * n):
        if len(out) == n:
            break
        c = suggest_candidate(study.ask(), spec)
        out.setdefault(c.key, c)
    return list(out.values())


def estimate_seconds(
    nets: list[tuple[torch.nn.Module, torch.Tensor]], *, rounds: int, repeats: int, per_op: bool
) -> float:
    """Seconds that timing ``nets`` will take, from one step and one forward pass of each
    (which serve as its first warm-up): every step and forward pass of the rounds and the
    warm-up, and the per-op forward passes."""
    total = 0.0
    for net, example in nets:
        one = measure_step(net, example, warmup=0, repeats=1)
        passes = WARMUP + rounds * repeats
        total += passes * (one.train_step_s + one.inference_s)
        total += OP_REPEATS * (one.inference_s + one.train_step_s) * per_op
    return total


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def profile_host(
    spec: SupernetSpec,
    n_candidates: int,
    *,
    n_classes: int = 10,
    batch_size: int = 1,
    seed: int = 0,
    rounds: int = 7,
    repeats: int = 3,
    per_op: bool = True,
    progress: Callable[[str], None] | None = None,
) -> MeasurementFile:
    """Measure ``n_candidates`` sampled candidates on this machine (fp32, PyTorch eager)."""
    supernet = build_ofa_supernet(spec, n_classes, seed=seed)
    candidates = sample_candidates(spec, n_candidates, seed)
    nets, graphs = [], []
    for c in candidates:
        r = c.subnet.resolution
        net = build_candidate(c, supernet, n_classes, calibration=[], seed=seed)
        example = torch.randn(batch_size, 3, r, r, generator=torch.Generator().manual_seed(seed))
        nets.append((net, example))
        graphs.append(trace(net, example))
    if progress:
        estimate = estimate_seconds(nets, rounds=rounds, repeats=repeats, per_op=per_op)
        progress(
            f"timing {len(nets)} networks, {rounds} interleaved rounds: about "
            f"{_duration(estimate)} on this machine"
        )
    timings = measure_steps(nets, rounds=rounds, repeats=repeats, seed=seed)
    measurements = []
    for c, (net, example), graph, t in zip(candidates, nets, graphs, timings, strict=True):
        names = [op.name for op in graph.ops]
        ops = measure_op_forward(net, example, names) if per_op else {}
        backward = measure_op_backward(net, example, names) if per_op else {}
        measurements.append(
            Measurement(
                name=c.key,
                graph=graph,
                train_step_s=t.train_step_s,
                inference_s=t.inference_s,
                samples=t.samples,
                train_step_median_s=t.train_step_median_s,
                per_op_forward_s=ops,
                per_op_backward_s=backward,
            )
        )
    return MeasurementFile(
        device="host",
        precision="fp32",
        machine=machine_info()
        | {"batch_size": batch_size, "rounds": rounds, "repeats": repeats, "clock": clock_name()},
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        measurements=tuple(measurements),
        engine="pytorch",
    )
