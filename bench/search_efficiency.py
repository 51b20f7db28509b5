"""Search efficiency at equal budgets of measured fine-tunes: tinytune's TPE + proxy ladder
against TPE alone, Optuna's RandomSampler and NSGAIISampler (without the proxy).

Every strategy runs ``--budget`` measured fine-tunes per seed, without the baseline presets (so
that every measured candidate is the strategy's choice), on the same supernet checkpoint, data
and fine-tuning settings, in one SQLite database (one study per strategy and seed). Reported,
as medians over the seeds:

* the hypervolume of the measured front (accuracy, predicted peak SRAM, predicted latency),
  normalised by one reference point shared by all runs: accuracy 0, the SRAM budget, and 1.1
  times the slowest measured step — so the numbers compare across strategies;
* the fine-tunes each run spent: measured, plus for the ladder the classifier-only fine-tunes
  of new sub-networks and the contribution analysis (measured once, by the first seed, then
  reused from the database by the others: its count is shown apart);
* the proxy's Kendall τ with measured accuracy (per run, and pooled over the seeds);
* proxy evaluations per second of driver time (ask, hardware model, estimate, database), and
  the rate of the estimate alone;
* the driver's overhead per measured evaluation: wall time minus the time inside fine-tunes
  (``--workers 0`` runs them in the driver's process, so that the difference is exact).

``random-eq`` is random search given as many fine-tunes as the ladder spent on the same seed
(run it after ``tinytune``). At budgets of ten or fewer, ``tpe`` and ``nsga2`` draw exactly
the candidates that ``random`` draws for the same seed: TPE starts with ten random trials and
NSGA-II with a random first generation of fifty.

Short version (a few minutes on two cores)::

    python3 bench/search_efficiency.py --budget 4 --seeds 0 1 2 --epochs 1 --plan small

Full version (budget 8, three seeds, the default contribution plan)::

    python3 bench/search_efficiency.py --budget 8 --seeds 0 1 2 --epochs 2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tinytune.checkpoints import ensure_checkpoint
from tinytune.data import get_dataset
from tinytune.db import open_store
from tinytune.evaluators import FinetuneConfig, run_evaluation
from tinytune.models import PretrainRecipe
from tinytune.search import InlineExecutor, RayExecutor, SearchConfig, run_search
from tinytune.search.contribution import ContributionPlan
from tinytune.search.ladder import reference
from tinytune.search.pareto import hypervolume
from tinytune.search.proxy import estimate, kendall_tau, rank_correlation
from tinytune.spaces import get_supernet

STRATEGIES = {
    "tinytune": {"sampler": "tpe", "proxy": True},
    "tpe": {"sampler": "tpe", "proxy": False},
    "random": {"sampler": "random", "proxy": False},
    "nsga2": {"sampler": "nsga2", "proxy": False},
    # random search given as many fine-tunes as the ladder spent on the same seed (measured
    # plus classifier-only bases): equal compute rather than equal measured fine-tunes
    "random-eq": {"sampler": "random", "proxy": False},
}
SMALL_PLAN = ContributionPlan(
    weight_layers=None, ratios=(0.25, 1.0), bias_ks=(), lite_offsets=(0, 3), norm=False
)


@dataclass
class Run:
    strategy: str
    seed: int
    measured: int
    fine_tunes: int
    contribution_tasks: int
    proposals: int
    proxy_scored: int
    wall_s: float
    task_s: float
    hv: float = 0.0
    tau: float | None = None
    tau_pairs: int = 0

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.wall_s - self.task_s) / max(1, self.measured)

    @property
    def proxy_per_s(self) -> float | None:
        driver = self.wall_s - self.task_s
        return self.proxy_scored / driver if self.proxy_scored and driver > 0 else None


def _checkpoint(args: argparse.Namespace) -> Path:
    recipe = PretrainRecipe(steps=args.pretrain_steps)
    return ensure_checkpoint(get_supernet(args.supernet), recipe, args.weights)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=8, help="measured fine-tunes per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--supernet", default="ofa-proxyless-w0.35")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--weights", type=Path, help="checkpoint (default: the cached one)")
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--proxy-eta", type=int, default=4)
    parser.add_argument("--plan", choices=("default", "small"), default="default")
    parser.add_argument("--sram-budget-kb", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="Ray workers (0: in-process)")
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    ckpt = _checkpoint(args)
    data = get_dataset(args.dataset)
    folder = Path(tempfile.mkdtemp(prefix="tinytune-bench-"))
    url = f"sqlite:///{args.db or folder / 'bench.db'}"
    plan = SMALL_PLAN if args.plan == "small" else ContributionPlan()
    finetune = FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr)
    executor = (
        RayExecutor(run_evaluation, workers=args.workers)
        if args.workers
        else InlineExecutor(run_evaluation)
    )
    runs: list[Run] = []
    pairs: list[tuple[float, float]] = []
    points: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    table = None
    try:
        with open_store(url) as store:
            for seed in args.seeds:
                for strategy in args.strategies:
                    budget = args.budget
                    if strategy == "random-eq":
                        ladder = [r for r in runs if r.strategy == "tinytune" and r.seed == seed]
                        budget = ladder[0].fine_tunes if ladder else args.budget
                    config = SearchConfig(
                        reference=False,  # the same for every strategy: not compared here
                        tune_lr=False,  # likewise: every strategy fine-tunes at --lr
                        checkpoint=str(ckpt),
                        study_name=f"{strategy}-{seed}",
                        supernet=args.supernet,
                        dataset=data.name,
                        n_classes=data.num_classes,
                        trials=budget,
                        seed=seed,
                        baselines=False,
                        proxy_eta=args.proxy_eta,
                        contribution_plan=plan,
                        sram_budget_bytes=args.sram_budget_kb * 1024,
                        finetune=finetune,
                        **STRATEGIES[strategy],  # type: ignore[arg-type]
                    )
                    started = time.monotonic()
                    result = run_search(config, store, executor)
                    wall = time.monotonic() - started
                    measured = store.evaluations(config.study_name, fidelity="measured")
                    points[(strategy, seed)] = [
                        (e.val_accuracy, float(e.memory_bytes), e.latency_ms / 1000.0)
                        for e in measured
                        if e.status == "ok" and e.val_accuracy is not None
                    ]  # type: ignore[misc]
                    tau = rank_correlation(store, config.study_name)
                    if config.proxy:
                        proxy = {
                            e.candidate_key: e.accuracy
                            for e in store.evaluations(config.study_name, fidelity="proxy")
                        }
                        pairs += [
                            (proxy[e.candidate_key], e.val_accuracy)
                            for e in measured
                            if e.candidate_key in proxy and e.val_accuracy is not None
                        ]  # type: ignore[misc]
                    runs.append(
                        Run(
                            strategy,
                            seed,
                            result.counts.measured + result.counts.failed,
                            (c := result.counts).measured + c.failed + c.base_tasks,
                            result.contribution_tasks,
                            result.proposals,
                            result.counts.proxy_scored,
                            wall,
                            result.task_time_s,
                            tau=tau.tau,
                            tau_pairs=tau.n,
                        )
                    )
                    print(
                        f"{strategy:>8} seed {seed}: {result.counts.measured} measured, "
                        f"{result.proposals} proposals, {result.counts.base_tasks} base and "
                        f"{result.contribution_tasks} contribution fine-tunes, {wall:.0f} s",
                        flush=True,
                    )
            if any(STRATEGIES[s]["proxy"] for s in args.strategies):
                from tinytune.search.contribution import TableIdentity, file_sha256
                from tinytune.search.contribution_table import build_table
                from tinytune.spaces import default_subnet

                spec = get_supernet(args.supernet)
                identity = TableIdentity(
                    spec.name,
                    str(ckpt),
                    file_sha256(ckpt),
                    data.name,
                    0,
                    finetune,
                    default_subnet(spec),
                )
                records = store.contributions(identity.key)
                table = build_table(identity.key, spec, identity.subnet, records)
    finally:
        executor.close()

    everything = [p for pts in points.values() for p in pts]
    ref = reference(everything, args.sram_budget_kb * 1024, None)
    for run in runs:
        pts = points[(run.strategy, run.seed)]
        run.hv = hypervolume([(-a, m / ref[1], t / ref[2]) for a, m, t in pts], (0.0, 1.0, 1.0))
    print()
    print(
        f"budget {args.budget} measured fine-tunes, seeds {args.seeds}, {args.epochs} epochs, "
        f"batch {args.batch_size}, {data.name}, {args.supernet}, SRAM budget "
        f"{args.sram_budget_kb} KB; medians over the seeds"
    )
    header = (
        f"{'strategy':>9} {'HV':>7} {'HV min-max':>13} {'measured':>8} {'fine-tunes':>10} "
        f"{'proposals':>9} {'proxy/s':>8} {'τ':>6} {'overhead/eval':>13} {'wall':>7}"
    )
    print(header)
    print("-" * len(header))
    for strategy in args.strategies:
        mine = [r for r in runs if r.strategy == strategy]
        hvs = [r.hv for r in mine]
        taus = [r.tau for r in mine if r.tau is not None]
        print(
            f"{strategy:>9} {_fmt(_median(hvs), '.4f'):>7} {min(hvs):.3f}-{max(hvs):.3f}".ljust(31)
            + f" {_fmt(_median([r.measured for r in mine]), '.0f'):>8}"
            f" {_fmt(_median([r.fine_tunes for r in mine]), '.0f'):>10}"
            f" {_fmt(_median([r.proposals for r in mine]), '.0f'):>9}"
            f" {_fmt(_median([r.proxy_per_s for r in mine if r.proxy_per_s]), '.2f'):>8}"
            f" {_fmt(_median(taus), '.2f'):>6}"
            f" {_fmt(_median([r.overhead_s for r in mine]), '.2f') + ' s':>13}"
            f" {_fmt(_median([r.wall_s for r in mine]), '.0f') + ' s':>7}"
        )
    contribution = sum(r.contribution_tasks for r in runs)
    if contribution:
        print(
            f"\ncontribution analysis: {contribution} fine-tunes, once (the other runs reused "
            "the stored table); not counted in 'fine-tunes' above"
        )
    if pairs:
        pooled = kendall_tau([p for p, _ in pairs], [m for _, m in pairs])
        print(
            f"proxy vs measured accuracy, pooled over the ladder's runs: Kendall τ "
            f"{_fmt(pooled.tau, '.2f')} (p = {_fmt(pooled.p_value, '.2g')}) over {pooled.n} "
            "candidates"
        )
    if table is not None:
        from tinytune.spaces import make_preset

        spec = get_supernet(args.supernet)
        candidate = make_preset("mcunetv3", spec)
        n = 20000
        started = time.perf_counter()
        for _ in range(n):
            estimate(candidate, table, table.base)
        rate = n / (time.perf_counter() - started)
        print(f"the estimate alone (table lookups, no hardware model): {rate:,.0f} per second")
    print(f"database: {url}")


if __name__ == "__main__":
    main()
