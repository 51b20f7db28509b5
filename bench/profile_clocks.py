"""The host profiler's clock under load: a training step's thread CPU time against its wall time.

Times the training steps of ``--networks`` sampled candidates of the default supernet (batch 1,
one intra-op thread, interleaved rounds as ``tinytune profile`` does), reading both clocks
around every step, first on the machine as it is, then again while ``--load`` busy processes
compete for its cores. For each clock it prints how many networks' fastest steps under load
stay within ±5 % and ±10 % of their fastest steps without, after dividing out the median ratio
(a uniform slow-down, which a calibration on a loaded machine would absorb in its scale), and
how the two clocks compare in the first pass.

    python3 -m bench.profile_clocks --networks 96 --load 4

Results, with the command: docs/calibration.md ("Which clock").
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import time

import numpy as np
import torch
import torch.nn.functional as F

from bench.harness import head, row
from tinytune.evaluators.profile import sample_candidates
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import DEFAULT_SUPERNET, get_supernet


def _spin(stop: float) -> None:
    """Keep one core busy until ``stop`` (``time.time()``)."""
    x = 0
    while time.time() < stop:
        x += 1


def _fastest(nets: list, rounds: int, repeats: int, seed: int) -> np.ndarray:
    """(network, clock) fastest step in seconds; clock 0 is wall time, 1 thread CPU time."""
    labels = torch.zeros(1, dtype=torch.long)
    best = np.full((len(nets), 2), np.inf)
    order = list(range(len(nets)))
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for i in order:
            net, x, opt = nets[i]
            for _ in range(repeats):
                w0, c0 = time.perf_counter(), time.thread_time()
                loss = F.cross_entropy(net(x), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                c1, w1 = time.thread_time(), time.perf_counter()
                best[i] = np.minimum(best[i], (w1 - w0, c1 - c0))
    return best


def _within(loaded: np.ndarray, quiet: np.ndarray, share: float) -> float:
    ratio = loaded / quiet
    ratio = ratio / np.median(ratio)
    return float(np.mean(np.abs(ratio - 1) <= share))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", type=int, default=96)
    parser.add_argument("--load", type=int, default=4, help="busy processes in the second pass")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = get_supernet(DEFAULT_SUPERNET)
    supernet = build_ofa_supernet(spec, 10, seed=args.seed)
    nets = []
    for c in sample_candidates(spec, args.networks, args.seed):
        r = c.subnet.resolution
        net = build_candidate(c, supernet, 10, calibration=[], seed=args.seed)
        trained = [p for p in net.parameters() if p.requires_grad]
        nets.append((net, torch.randn(1, 3, r, r), torch.optim.SGD(trained, lr=0.0)))
    _fastest(nets, 1, 3, args.seed)  # warm-up
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    quiet = _fastest(nets, args.rounds, args.repeats, args.seed)
    took = time.perf_counter() - started
    spinners = [
        mp.Process(target=_spin, args=(time.time() + 4 * took + 600,), daemon=True)
        for _ in range(args.load)
    ]
    for p in spinners:
        p.start()
    time.sleep(5)
    load_during = os.getloadavg()[0]
    loaded = _fastest(nets, args.rounds, args.repeats, args.seed + 1)
    for p in spinners:
        p.terminate()
    for p in spinners:
        p.join()
    agree = np.abs(quiet[:, 1] / quiet[:, 0] - 1)
    print(
        f"{args.networks} networks, {args.rounds} rounds of {args.repeats} steps; first pass at "
        f"a load average of {load_before:.1f}, second with {args.load} busy processes "
        f"({load_during:.1f} as it started); {os.cpu_count()} cores"
    )
    print(
        f"first pass: thread CPU time within 1 % of wall time for {np.mean(agree <= 0.01):.0%} "
        f"of the networks (median |difference| {np.median(agree):.2%})"
    )
    print(head(["clock", "within ±5 % under load", "within ±10 % under load"]))
    for k, name in enumerate(("wall time", "thread CPU time")):
        print(
            row(
                [
                    name,
                    f"{_within(loaded[:, k], quiet[:, k], 0.05):.0%}",
                    f"{_within(loaded[:, k], quiet[:, k], 0.10):.0%}",
                ]
            )
        )


if __name__ == "__main__":
    main()
