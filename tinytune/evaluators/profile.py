"""Profile the host: measure training steps of sampled candidates and write a measurement file.

Candidates are drawn at random from the joint space (presets included, as the search's
``scheme`` choice does), built on a randomly initialised supernet — step time depends on the
network's shapes and its update scheme, not on the weights' values — traced, and timed with
:func:`tinytune.hwmodels.profiler.measure_steps` (interleaved rounds; the fastest repeat and
the median).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import torch

from tinytune.hwmodels.host import machine_info
from tinytune.hwmodels.measurements import Measurement, MeasurementFile
from tinytune.hwmodels.profiler import (
    clock_name,
    measure_steps,
)
from tinytune.ir import trace
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import Candidate, SupernetSpec, suggest_candidate

__all__ = ["estimate_seconds", "profile_host", "sample_candidates"]

WARMUP = 3
"""Untimed steps of each network before the rounds (:func:`measure_steps`'s default)."""


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
    nets: list[tuple[torch.nn.Module, torch.Tensor]],
    ops: list[list[str]] | None,
    *,
    rounds: int,
    repeats: int,
) -> float:
    """Seconds that timing ``nets`` will take (``ops``: the op names of each, whose passes
    are timed too, or ``None``): each network warmed up (its first run is several times
    slower), then one round of one step timed on the wall clock, for every step of the rounds
    and the warm-up. With ``ops`` that round comes after a hooked warm-up pair of passes,
    which costs about half a round (a round is a step, a forward pass and a hooked pair, the
    pair about as long as the other two)."""
    total = 0.0
    for k, (net, example) in enumerate(nets):
        named = [ops[k]] if ops is not None else None
        measure_steps([(net, example)], rounds=1, repeats=1, warmup=1, ops=named)
        started = time.perf_counter()
        measure_steps([(net, example)], rounds=1, repeats=1, warmup=0, ops=named)
        each = (time.perf_counter() - started) / (1.5 if named else 1.0)
        total += (WARMUP + rounds * repeats) * each
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
    rounds: int,
    repeats: int,
    per_op: bool = True,
    progress: Callable[[str], None] | None = None,
) -> MeasurementFile:
    """Measure ``n_candidates`` sampled candidates on this machine (fp32, PyTorch eager)."""
    supernet = build_ofa_supernet(spec, n_classes, seed=seed)
    candidates = sample_candidates(spec, n_candidates, seed)
    nets, graphs = [], []
    for c in candidates:
        net = build_candidate(c, supernet, n_classes, calibration=[], seed=seed)
        shape = (batch_size, *net.input_shape)
        example = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        nets.append((net, example))
        graphs.append(trace(net, example))
    names = [[op.name for op in graph.ops] for graph in graphs] if per_op else None
    if progress:
        estimate = estimate_seconds(nets, names, rounds=rounds, repeats=repeats)
        progress(
            f"timing {len(nets)} networks, {rounds} interleaved rounds: about "
            f"{_duration(estimate)} on this machine"
        )
    timings = measure_steps(nets, rounds=rounds, repeats=repeats, seed=seed, ops=names)
    measurements = [
        Measurement(
            name=c.key,
            graph=graph,
            train_step_s=t.train_step_s,
            inference_s=t.inference_s,
            samples=t.samples,
            train_step_median_s=t.train_step_median_s,
            per_op_forward_s=t.per_op_forward_s,
            per_op_backward_s=t.per_op_backward_s,
        )
        for c, graph, t in zip(candidates, graphs, timings, strict=True)
    ]
    return MeasurementFile(
        device="host",
        precision="fp32",
        machine=machine_info()
        | {"batch_size": batch_size, "rounds": rounds, "repeats": repeats, "clock": clock_name()},
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        measurements=tuple(measurements),
        engine="pytorch",
    )
