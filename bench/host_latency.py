"""Host latency model: fit on measured training steps, check on held-out candidates.

Samples candidates of the joint space, builds each network, measures the median training-step
time on this machine (batch 1, one thread), fits the latency coefficients on all but the last
``--held-out`` candidates and reports, on those, the share predicted within ±10 % and the
median relative error.

    python3 bench/host_latency.py --candidates 90 --held-out 30 --seed 0
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import optuna
import torch

from tinytune.hwmodels.latency import fit_coefficients, predict_latency
from tinytune.hwmodels.profiler import measure_step
from tinytune.ir import trace
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import get_supernet, suggest_candidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supernet", default="ofa-proxyless-w0.35")
    parser.add_argument("--candidates", type=int, default=90)
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = get_supernet(args.supernet)
    supernet = build_ofa_supernet(spec, 10, seed=args.seed)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    graphs, measured = [], []
    for _ in range(args.candidates):
        candidate = suggest_candidate(study.ask(), spec)
        r = candidate.subnet.resolution
        net = build_candidate(candidate, supernet, 10, [])
        example = torch.randn(1, 3, r, r)
        graphs.append(trace(net, example))
        measured.append(measure_step(net, example, repeats=args.repeats).train_step_s)
    half = len(graphs) - args.held_out
    coef = fit_coefficients(graphs[:half], measured[:half])
    errors = [
        predict_latency(g, coef).train_step_s / m - 1
        for g, m in zip(graphs[half:], measured[half:], strict=True)
    ]
    within = np.mean([abs(e) <= 0.10 for e in errors])
    print(f"fit on {half} candidates, held out {len(errors)}")
    print(
        f"measured step: median {1000 * statistics.median(measured):.1f} ms "
        f"(min {1000 * min(measured):.1f}, max {1000 * max(measured):.1f})"
    )
    print(
        f"held-out within ±10 %: {100 * within:.0f} %; median |error| "
        f"{100 * statistics.median(abs(e) for e in errors):.1f} %; max |error| "
        f"{100 * max(abs(e) for e in errors):.1f} %"
    )


if __name__ == "__main__":
    main()
