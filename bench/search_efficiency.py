"""Search strategies at equal compute: the hypervolume of the measured front each one finds
with the same number of fine-tuning epochs.

Compute is counted in fine-tuning epochs — passes over the whole training split — of every
fine-tune a strategy runs (measured, short screening fine-tunes, contribution analysis), so
that a strategy that screens cheaply measures fewer candidates in full. Every strategy gets
``--budget`` × ``--epochs`` epochs on each train/validation partition (the default search's
budget: 12 measured fine-tunes of 8 epochs, two partitions where the validation split is too
small to rank candidates alone, as on a folder of 300 images; the searches' ``epoch_budget``)
on the same checkpoint, data and learning rate
(the learning rate of each scheme family chosen once per data set by the search's grid on the
validation split, in a study of its own, and given to every run — or one ``--lr`` for all; the
grid and the full-fine-tuning reference of a real study are the same for every strategy, so
they are left out of all of them). Strategies:

* ``evolve``: what ``tinytune search`` does (``--mutate 1``, the default): the four baseline
  presets on the default sub-network, then every fresh proposal a mutant of a front point
  (``tinytune.search.proposals``), the sampler's where no new mutant fits; every measured
  joint-scheme candidate priced at the other patch counts too (schedule twins: its accuracy,
  no fine-tune; the ``of which schedule twins`` column); ``evolve-75`` and
  ``tpe-mutate`` the same with three in four and one in two of the proposals mutants;
  ``evolve-climb-75`` the default with three in four of the mutants climbing (``--climb 0.75``);
* ``tpe-baselines``: the default of earlier versions — Optuna's TPE (random for its first 10
  trials), after the four baseline presets on the default sub-network;
* ``tpe-early``: the default before mutation (``--mutate 0``) — the same with TPE modelling
  from the 5th trial on, all parameters jointly, grouped conditional parameters;
* ``halving``: ``tpe-early`` with successive halving: brackets of ``--eta`` candidates on one
  sub-network screened by short fine-tunes (``--screen-epochs`` on ``--screen-fraction`` of the
  training images), the one adding most to the measured front fine-tuned in full; it measures
  fewer candidates in full so that its total epochs stay within the budget;
* ``gp``: the baseline presets, then Optuna's Gaussian-process sampler (from the 5th trial on);
* ``random``, ``tpe``, ``nsga2``: Optuna's samplers on the joint space, no baselines;
* ``preset-last``, ``preset-bias-only``, ``preset-mcunetv3``, ``preset-tinytl``: one preset's
  update scheme on the sub-networks ``tpe-early`` proposes (``tinytune search --preset P``):
  what the same compute buys a user who trusts one paper's recipe;
* ``mcunetv3``: MCUNetV3's recipe — contribution analysis of the default sub-network (at the
  screening fidelity, so that it fits the budget), then an evolutionary search (NSGA-II,
  ``--evolution-trials`` candidates scored by the additive estimate and the hardware model) over
  the update schemes of that one sub-network, and the points of its estimated front that add
  most hypervolume measured in full with the epochs left (then, while epochs are left, those
  of the population's next non-dominated layer, and so on).

tinytune's strategies also run with ``--small-budget`` measured fine-tunes' worth (a third of
the default budget: ``tpe-early@4`` and so on), to see whether they reach the baselines'
hypervolume with a third of their compute.

Reported per strategy, over the seeds: the median and the range of the hypervolume of the
measured front (validation accuracy, predicted peak SRAM, predicted step latency; one reference
point for every run of a data set: accuracy 0, the SRAM budget, 1.1 × the slowest measured step
or ``--latency-ref`` seconds, which makes the hypervolumes of different files comparable),
the gap between that median and the hypervolume of all runs' points together (the best front
known: the hypervolume of fronts that all reach 97 % spreads little, the gap shows how far each
strategy stays from what was found), the test accuracy of the front's most accurate point
(chosen on validation), the epochs spent, the candidates measured in full, and the wall time;
for each of tinytune's strategies, the seeds where its most accurate point on validation is
above every preset search's and those where it is level with the best of them, with both points'
validation and test accuracy seed by seed, and the same against the one preset search of highest
median hypervolume, and against the best of the strategy's own hand-written presets (the four
baseline presets on the default sub-network, measured first in the same study); and the
driver's own seconds a run (``SearchResult.driver_s``: asking, drawing and pricing mutants,
storing results; not its waits on workers), the time a worker whose fine-tune came back waits.
A variant of the default recorded under a label of its own (``evolve-...``) is counted as the
default is. Each run's record is appended to ``--out`` (JSON lines) as it finishes, so that an
interrupted benchmark keeps what it measured and ``--report FILE ...`` prints the table of files
together (say, two sets of seeds).

One data set, five seeds, the default budget (about an hour on two cores for digits)::

    python3 -m bench.search_efficiency --dataset digits --seeds 0 1 2 3 4 --out digits.jsonl
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench.harness import BY_DATASET, add_arguments, append_json_line, read_json_lines, table
from tinytune.checkpoints import ensure_checkpoint
from tinytune.data import get_dataset
from tinytune.db import open_store
from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation
from tinytune.search import InlineExecutor, RayExecutor, SearchConfig, preflight, run_search
from tinytune.search.config.search_config import BASELINE_PRESETS, DIRECTIONS
from tinytune.search.execution.executor import Executor, Metered
from tinytune.search.front.pareto import hypervolume, pareto_front, reference
from tinytune.search.ladder.contribution import (
    ContributionPlan,
    TableIdentity,
    file_sha256,
    run_contributions,
)
from tinytune.search.ladder.promotion import choose_promotion
from tinytune.search.ladder.proxy import estimate, kendall_tau
from tinytune.search.run.lr_grid import StudyRates, family_of
from tinytune.search.study.adapter import Attr
from tinytune.spaces import (
    default_network,
    default_subnet,
    get_supernet,
    subnet_params,
    suggest_candidate,
)

SEARCHES: dict[str, dict[str, Any]] = {
    # the default of ``tinytune search`` now: the presets, then mutants of the front
    "evolve": {"sampler": "tpe-early", "baselines": True, "mutate": 1.0},
    "evolve-75": {"sampler": "tpe-early", "baselines": True, "mutate": 0.75},
    "evolve-climb-75": {"sampler": "tpe-early", "baselines": True, "mutate": 1.0, "climb": 0.75},
    "tpe-mutate": {"sampler": "tpe-early", "baselines": True, "mutate": 0.5},
    # the sampler alone after the presets: the default before mutation
    "tpe-early": {"sampler": "tpe-early", "baselines": True, "mutate": 0.0},
    "tpe-baselines": {"sampler": "tpe", "baselines": True, "mutate": 0.0},  # before tpe-early
    "halving": {"sampler": "tpe-early", "baselines": True, "halving": True, "mutate": 0.0},
    "gp": {"sampler": "gp", "baselines": True, "mutate": 0.0},
    "random": {"sampler": "random", "baselines": False, "mutate": 0.0},
    "tpe": {"sampler": "tpe", "baselines": False, "mutate": 0.0},
    "nsga2": {"sampler": "nsga2", "baselines": False, "mutate": 0.0},
    # one preset's scheme on the sub-networks the sampler proposes (``--preset P``): what a user
    # who trusts one paper's recipe gets from the same compute
    **{
        f"preset-{p}": {"sampler": "tpe-early", "baselines": False, "preset": p, "mutate": 0.0}
        for p in BASELINE_PRESETS
    },
}
STRATEGIES = (*SEARCHES, "mcunetv3")
PRESETS = tuple(s for s in SEARCHES if s.startswith("preset-"))
BASELINES = ("random", "tpe", "nsga2", "mcunetv3", *PRESETS)  # what tinytune's are judged by
MINE = (
    "evolve",
    "evolve-75",
    "evolve-climb-75",
    "tpe-mutate",
    "tpe-baselines",
    "tpe-early",
    "halving",
    "gp",
)


def _mine(strategy: str) -> bool:
    """Whether a record's label is one of tinytune's strategies, at any budget (``tpe@4``), or
    a variant of the default recorded under a label of its own (``evolve-draws-4``)."""
    name = strategy.split("@")[0]
    return name in MINE or name.startswith("evolve-")


Point = tuple[float, float, float, float | None]  # val accuracy, SRAM, latency s, test accuracy


def search_run(
    args: argparse.Namespace,
    store: Any,
    executor: Executor,
    strategy: str,
    seed: int,
    budget: int,
) -> tuple[list[Point], float, dict[str, int], list[float] | None]:
    """Run one search strategy with ``budget`` measured fine-tunes' worth of epochs; its
    measured points, the epochs it trained, its trials by outcome (measured, pruned as over a
    budget or a duplicate in flight, reused: a candidate measured before) and the best of its
    hand-written presets within the budget, [validation, test] (``SearchResult.recipe``)."""
    data = get_dataset(args.dataset)
    options = dict(SEARCHES[strategy])
    name = f"{strategy}-{seed}" if budget == args.budget else f"{strategy}@{budget}-{seed}"
    if args.rates is not None:  # the data set's rates, as if this study had chosen them
        import optuna

        study = optuna.create_study(
            study_name=name, storage=store.url, directions=list(DIRECTIONS), load_if_exists=True
        )
        study.set_user_attr(Attr.LR_CALIBRATION, args.rates.to_json())
    config = SearchConfig(
        reference=False,
        tune_lr=args.rates is not None,
        checkpoint=str(args.checkpoint),
        study_name=name,
        supernet=args.supernet,
        dataset=data.name,
        n_classes=data.num_classes,
        trials=10**6,  # the epoch budget decides
        epoch_budget=float(budget * args.epochs * args.repeats),
        seed=seed,
        proxy_eta=args.eta,
        screen_epochs=args.screen_epochs,
        screen_fraction=args.screen_fraction,
        sram_budget_bytes=args.sram_budget_kb * 1024,
        finetune=FinetuneConfig(
            epochs=args.epochs, batch_size=args.batch_size, lr=args.lr or 0.2, seed=seed
        ),
        reproducible=args.reproducible,
        **options,
    )
    result = run_search(config, store, executor)
    points = [
        (e.val_accuracy, float(e.memory_bytes), e.latency_ms / 1000.0, e.accuracy)
        for e in store.evaluations(config.study_name, fidelity="measured", status="ok")
        if e.val_accuracy is not None
    ]
    c = result.counts
    counts = {
        "measured": c.measured,
        "pruned": c.pruned,
        "reused": c.reused,
        "failed": c.failed,
        "twins": c.twins,
    }
    recipe = result.recipe  # the best of its hand-written presets within the budget
    hand = None if recipe is None else [recipe.val_accuracy, recipe.test_accuracy or 0.0]
    return points, result.train_epochs, counts, hand, result.driver_s  # type: ignore[return-value]


def _screened_table(
    store: Any,
    metered: Metered,
    spec: Any,
    identity: TableIdentity,
    screen: Callable[[Any], FinetuneTask],
) -> Any:
    """The contribution table of the default sub-network at the screening fidelity."""
    keys = iter(range(-1, -(10**9), -1))
    table = run_contributions(
        store,
        metered,
        identity,
        spec,
        ContributionPlan(),
        screen,
        lambda: next(keys),
    )
    if table is None:
        raise RuntimeError("the contribution analysis's classifier-only base failed")
    return table


def _evolve(
    args: argparse.Namespace,
    spec: Any,
    subnet: Any,
    checked: Any,
    table: Any,
    seed: int,
    budget: int,
) -> list[tuple[Any, Any, float]]:
    """NSGA-II on ``subnet``'s update schemes: distinct estimated candidates within ``budget``."""
    import optuna

    costs: dict[int, tuple[Any, Any, float]] = {}

    def objective(trial: optuna.Trial) -> tuple[float, float, float]:
        candidate = suggest_candidate(trial, spec)
        cost = checked.hardware(candidate)
        trial.set_constraint("sram", float(cost.arena_bytes - budget))
        accuracy = estimate(candidate, table, table.base).accuracy
        costs[trial.number] = (candidate, cost, accuracy)
        return accuracy, float(cost.arena_bytes), float(cost.latency_s or 0.0)

    evolution = optuna.create_study(
        directions=list(DIRECTIONS),
        sampler=optuna.samplers.PartialFixedSampler(
            subnet_params(subnet, spec),
            optuna.samplers.NSGAIISampler(population_size=args.population, seed=seed),
        ),
    )
    evolution.optimize(objective, n_trials=args.evolution_trials)
    feasible = [costs[t.number] for t in evolution.trials if t.constraints["sram"] <= 0]
    unique = list({c.key: (c, cost, acc) for c, cost, acc in feasible}.values())
    return unique


def _picks(
    unique: list[tuple[Any, Any, float]], left: int, budget: int
) -> list[tuple[Any, Any, float]]:
    """Up to ``left`` candidates to measure in full: the estimated front, then the next layers."""
    picks: list[tuple[Any, Any, float]] = []

    def objectives(entry: tuple[Any, Any, float]) -> tuple[float, float, float]:
        _, cost, accuracy = entry
        return accuracy, float(cost.arena_bytes), float(cost.latency_s or 0.0)

    # the estimated front first, most hypervolume first; with epochs left, the next
    # non-dominated layer of the population, and so on
    while unique and len(picks) < left:
        layer = pareto_front([(-a, m, t) for a, m, t in map(objectives, unique)])
        pool = [unique[i] for i in layer]
        unique = [u for i, u in enumerate(unique) if i not in set(layer)]
        while pool and len(picks) < left:
            contenders, chosen = list(map(objectives, pool)), list(map(objectives, picks))
            ref = reference([*contenders, *chosen], budget, None)
            picks.append(pool.pop(choose_promotion(contenders, chosen, ref)))
    return picks


def _measure_picks(
    metered: Metered,
    picks: list[tuple[Any, Any, float]],
    task: Callable[[Any, FinetuneConfig, float], FinetuneTask],
    full: FinetuneConfig,
) -> list[Point]:
    """The full fine-tunes of ``picks``: the points of those that came back."""
    for i, (candidate, _, _) in enumerate(picks):
        metered.submit(i, task(candidate, full, 1.0))
    points: list[Point] = []
    while metered.in_flight:
        for i, result in metered.wait(timeout=5.0):
            if result.status == "ok":
                cost = picks[i][1]
                points.append(
                    (
                        float(result.val_accuracy),
                        float(cost.arena_bytes),
                        float(cost.latency_s or 0.0),
                        float(result.accuracy),
                    )
                )
    return points


def mcunetv3_run(
    args: argparse.Namespace, store: Any, executor: Executor, seed: int
) -> tuple[list[Point], float]:
    """MCUNetV3's recipe on the default sub-network (see the module docstring)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = get_dataset(args.dataset)
    spec = get_supernet(args.supernet)
    subnet = default_subnet(spec)
    config = SearchConfig(
        checkpoint=str(args.checkpoint),
        study_name=f"mcunetv3-{seed}",
        supernet=args.supernet,
        dataset=data.name,
        n_classes=data.num_classes,
        sram_budget_bytes=args.sram_budget_kb * 1024,
    )
    checked = preflight(config, store)
    metered = Metered(executor)
    lr = args.lr or 0.2  # with --rates, each family's (a stand-in for the table's identity)
    low = FinetuneConfig(epochs=args.screen_epochs, batch_size=args.batch_size, lr=lr, seed=seed)
    full = FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, lr=lr, seed=seed)

    def task(candidate: Any, finetune: FinetuneConfig, fraction: float) -> FinetuneTask:
        if args.rates is not None:  # the rate of the candidate's family, as the search's
            finetune = replace(finetune, lr=args.rates.lr(family_of(candidate, spec), finetune.lr))
        return FinetuneTask(
            candidate=candidate.to_json(),
            checkpoint=str(args.checkpoint),
            dataset=data.name,
            data_seed=0,
            finetune=finetune,
            repeats=checked.repeats,
            threads=1,
            train_fraction=fraction,
        )

    identity = TableIdentity(
        spec.name, str(args.checkpoint), file_sha256(args.checkpoint), data.name, 0, low, subnet
    )
    table = _screened_table(
        store, metered, spec, identity, lambda c: task(c, low, args.screen_fraction)
    )
    budget = args.sram_budget_kb * 1024
    unique = _evolve(args, spec, subnet, checked, table, seed, budget)
    # a measured fine-tune costs its epochs on every train/validation partition
    left = int(
        (args.budget * args.epochs * args.repeats - metered.train_epochs)
        // (args.epochs * checked.repeats)
    )
    picks = _picks(unique, left, budget)
    points = _measure_picks(metered, picks, task, full)
    return points, metered.train_epochs


def rates_config(args: argparse.Namespace) -> SearchConfig:
    """The study ``rates`` of the data set, where its learning rates are chosen."""
    data = get_dataset(args.dataset)
    return SearchConfig(
        checkpoint=str(args.checkpoint),
        study_name="rates",
        supernet=args.supernet,
        dataset=data.name,
        n_classes=data.num_classes,
        trials=1,
        baselines=False,
        reference=False,
        sram_budget_bytes=args.sram_budget_kb * 1024,
        finetune=FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size),
    )


def repeats(args: argparse.Namespace, store: Any) -> int:
    """The train/validation partitions every measured fine-tune of the data set trains on (more
    than one where the validation split is too small to rank candidates): a strategy's budget
    is ``--budget`` measured fine-tunes of the search, each on every partition."""
    return preflight(rates_config(args), store).repeats


def choose_rates(args: argparse.Namespace, store: Any, executor: Executor) -> StudyRates:
    """Each scheme family's learning rate on the data set, chosen by the search's grid on the
    validation split in a study of its own (``rates``), reused when it exists."""
    result = run_search(rates_config(args), store, executor)
    assert result.lr_calibration is not None
    return result.lr_calibration


def short_tau(url: str) -> str:
    """Kendall τ between the short fine-tunes and the measured validation accuracy of the
    candidates that have both, pooled over the database's halving studies (the promoted members
    only: the others were never measured in full)."""
    import optuna

    pairs: list[tuple[float, float]] = []
    with open_store(url) as store:
        for name in optuna.get_all_study_names(url):
            if not name.startswith("halving"):
                continue
            short = {
                e.candidate_key: e.val_accuracy
                for e in store.evaluations(name, fidelity="short", status="ok")
            }
            pairs += [
                (short[e.candidate_key], e.val_accuracy)
                for e in store.evaluations(name, fidelity="measured", status="ok")
                if short.get(e.candidate_key) is not None and e.val_accuracy is not None
            ]  # type: ignore[misc]
    tau = kendall_tau([a for a, _ in pairs], [b for _, b in pairs])
    value = "undefined" if tau.tau is None else f"{tau.tau:.2f} (p = {tau.p_value:.2g})"
    return (
        f"short fine-tunes vs measured validation accuracy, pooled over the halving runs: "
        f"Kendall τ {value} over {tau.n} promoted candidates"
    )


def _against_hand_written(records: list[dict[str, Any]]) -> list[str]:
    """For each strategy that measures the baseline presets on the default sub-network first
    and whose records hold the best of them (``SearchResult.recipe``), the seeds where its most
    accurate point on validation is above it and those where it is level."""
    lines = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        if not SEARCHES.get(strategy.split("@")[0], {}).get("baselines"):
            continue  # a preset's search measures its preset on the default sub-network by chance
        mine = [r for r in records if r["strategy"] == strategy and r.get("hand_written")]
        if not mine:
            continue
        mine.sort(key=lambda r: r["seed"])
        top = {r["seed"]: max(p[0] for p in r["points"]) for r in mine}
        hand = {r["seed"]: r["hand_written"][0] for r in mine}
        wins = sum(top[s] > hand[s] for s in top)
        ties = sum(top[s] == hand[s] for s in top)
        seeds = "; ".join(f"{s}: {100 * top[s]:.1f} / {100 * hand[s]:.1f}" for s in top)
        lines.append(
            f"* {strategy}: most accurate point on validation above the best of its own "
            f"hand-written presets (on the default sub-network) in {wins} of {len(mine)} seeds, "
            f"level in {ties}; seed by seed, validation %, {strategy} / that preset: {seeds}"
        )
    return lines


def _against_presets(records: list[dict[str, Any]], best: str | None = None) -> list[str]:
    """For each of tinytune's strategies, the seeds where its most accurate point on validation
    beats the most accurate of every preset search of the same seed (ties do not count; they
    are counted apart), and seed by seed both points' validation and test accuracy; with
    ``best`` (the preset search of highest median hypervolume), also the seeds where it beats
    that one search's most accurate point."""

    def top(record: dict[str, Any]) -> tuple[float, float]:  # validation, test
        point = max(record["points"], key=lambda p: p[0], default=None)
        return (0.0, 0.0) if point is None else (point[0], point[3] or 0.0)

    presets: dict[int, tuple[float, float]] = {}
    chosen: dict[int, tuple[float, float]] = {}  # the search ``best``'s, seed by seed
    recipe: dict[int, tuple[float, float]] = {}  # MCUNetV3's recipe's, seed by seed
    for r in records:
        if r["strategy"] in PRESETS:
            presets[r["seed"]] = max(presets.get(r["seed"], (0.0, 0.0)), top(r))
        if r["strategy"] == best:
            chosen[r["seed"]] = top(r)
        if r["strategy"] == "mcunetv3":
            recipe[r["seed"]] = top(r)

    def tally(strategy: str, against: dict[int, tuple[float, float]]) -> tuple[int, int, int, str]:
        """The strategy's runs of the seeds ``against`` holds: how many, those above it, those
        level, and both points seed by seed."""
        runs = sorted(
            (r for r in records if r["strategy"] == strategy and r["seed"] in against),
            key=lambda r: r["seed"],
        )
        wins = sum(top(r)[0] > against[r["seed"]][0] for r in runs)
        ties = sum(top(r)[0] == against[r["seed"]][0] for r in runs)
        seeds = "; ".join(
            f"{r['seed']}: {_val_test(top(r))} / {_val_test(against[r['seed']])}" for r in runs
        )
        return len(runs), wins, ties, seeds

    against = (  # each one's points by seed, what it is called, how a tie is said, its name
        (
            presets,
            "every preset search's",
            "level with the best of them",
            "the best preset search",
        ),
        (chosen, f"{best}'s (the preset search of highest median hypervolume)", "level", None),
        (
            recipe,
            "MCUNetV3's recipe's (mcunetv3: contribution analysis, then evolution)",
            "level",
            "mcunetv3",
        ),
    )
    lines = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        if not _mine(strategy):
            continue
        for points, what, level, name in against:
            n, wins, ties, seeds = tally(strategy, points)
            if n:
                lines.append(
                    f"* {strategy}: most accurate point on validation above {what} in {wins} "
                    f"of {n} seeds, {level} in {ties}"
                    + (
                        f"; seed by seed, validation (test) %, {strategy} / {name}: {seeds}"
                        if name
                        else ""
                    )
                )
    return ["", *lines] if lines else []


def _val_test(point: tuple[float, float]) -> str:
    return f"{100 * point[0]:.1f} ({100 * point[1]:.1f})"


def _driver_time(records: list[dict[str, Any]]) -> list[str]:
    """Each strategy's driver seconds per run (median and range) and their median share of the
    run's wall time, for the strategies whose records carry them (``driver_s``: the search's
    own work, proposing and storing, all but waiting on workers); nothing where none does."""
    parts = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        mine = [r for r in records if r["strategy"] == strategy and r.get("driver_s") is not None]
        if not mine:
            continue
        own = [r["driver_s"] for r in mine]
        share = statistics.median(r["driver_s"] / r["wall_s"] for r in mine if r["wall_s"] > 0)
        parts.append(
            f"{strategy} {statistics.median(own):.1f} s ({min(own):.1f}–{max(own):.1f}; "
            f"{100 * share:.0f} % of the wall)"
        )
    if not parts:
        return []
    return [
        "",
        "* the driver's own seconds a run (median, range; share of the wall): " + "; ".join(parts),
    ]


def _strategy_rows(
    records: list[dict[str, Any]], volume: Callable[[list[Any]], float], union: float
) -> tuple[list[list[Any]], dict[str, float]]:
    """The table's row of each strategy, and each one's median hypervolume."""
    rows, medians = [], {}
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        mine = [r for r in records if r["strategy"] == strategy]
        hvs, vals, tests = [], [], []
        for r in mine:
            pts = [tuple(p) for p in r["points"]]
            hvs.append(volume(pts))
            if pts:
                top = max(pts, key=lambda p: p[0])
                vals.append(top[0])
                tests.append(top[3] or 0.0)
        medians[strategy] = statistics.median(hvs)
        spent = [r.get("counts") or {} for r in mine]
        off = sum(c.get("pruned", 0) + c.get("reused", 0) for c in spent)
        asked = off + sum(c.get("measured", 0) + c.get("failed", 0) for c in spent)
        rows.append(
            [
                strategy,
                len(mine),
                f"{statistics.median(hvs):.4f}",
                f"{min(hvs):.4f}–{max(hvs):.4f}",
                f"{union - statistics.median(hvs):.4f}",
                f"{100 * statistics.median(vals) if vals else float('nan'):.1f}",
                f"{100 * statistics.median(tests) if tests else float('nan'):.1f}",
                f"{100 * off / asked:.0f} %" if asked else "–",
                f"{statistics.median(r['epochs'] for r in mine):.0f}",
                f"{statistics.median(len(r['points']) for r in mine):.0f}",
                f"{statistics.median((r.get('counts') or {}).get('twins', 0) for r in mine):.0f}",
                f"{statistics.median(r['wall_s'] for r in mine):.0f} s",
            ]
        )
    return rows, medians


def _sram_planes(records: list[dict[str, Any]], medians: dict[str, float], ref: Any) -> list[str]:
    """Each strategy's hypervolume of accuracy against SRAM alone, median and per seed."""
    planes = []  # accuracy against SRAM alone, the plane an SRAM budget is about
    for strategy in medians:
        flat = [
            hypervolume([(-a, m / ref[1]) for a, m, _, _ in r["points"]], (0.0, 1.0))
            for r in records
            if r["strategy"] == strategy
        ]
        planes.append(
            f"{strategy} {statistics.median(flat):.4f} ({', '.join(f'{v:.4f}' for v in flat)})"
        )
    return ["", "* accuracy × SRAM hypervolume (median; per seed): " + "; ".join(planes)]


def _against_best_baseline(
    medians: dict[str, float], base: dict[str, float], union: float
) -> list[str]:
    """Each of tinytune's strategies' hypervolume and gap against the best baseline's."""
    lines = []
    if base:
        best = max(base, key=lambda s: base[s])
        lines.append("")
        for mine in (s for s in medians if _mine(s)):
            if base[best] > 0:
                gap = (union - medians[mine]) / max(1e-12, union - base[best])
                lines.append(
                    f"* {mine}: {medians[mine] / base[best]:.4f}× the best baseline's "
                    f"({best}) median hypervolume; its gap to all runs' front {gap:.2f}× the "
                    "baseline's"
                )
    return lines


def report(records: list[dict[str, Any]], latency_ref: float | None = None) -> str:
    """The Markdown table of a benchmark's records (one data set). The hypervolume's reference
    point is accuracy 0, the SRAM budget and ``latency_ref`` seconds a step, by default 1.1 × the
    slowest step among the records: give it to compare reports of different files, whose
    slowest steps differ (a point at or beyond it counts for nothing)."""
    everything = [tuple(p) for r in records for p in r["points"]]
    sram = records[0]["sram_budget"]
    ref = reference([(a, m, t) for a, m, t, _ in everything], sram, latency_ref)

    def volume(points: list[Any]) -> float:
        return hypervolume(
            [(-a, m / ref[1], t / ref[2]) for a, m, t, _ in points], (0.0, 1.0, 1.0)
        )

    union = volume(everything)  # the front of every run's points together
    rows, medians = _strategy_rows(records, volume, union)
    heads = [
        "strategy",
        "seeds",
        "hypervolume (median)",
        "range",
        "gap to all runs' front",
        "most accurate point within the SRAM budget: val (%)",
        "its test (%)",
        "proposals not fine-tuned (over a budget, or measured before)",
        "epochs",
        "measured",
        "of which schedule twins",
        "wall",
    ]
    whence = "given" if latency_ref else "1.1 × the slowest step in these records"
    lines = [
        table(heads, rows),
        "",
        f"* hypervolume's reference point: accuracy 0, {sram / 1024:g} KB, {ref[2]:.6g} s a step "
        f"({whence})",
    ]
    lines += _sram_planes(records, medians, ref)
    lines += _driver_time(records)
    base = {s: v for s, v in medians.items() if s in BASELINES}
    top_preset = max((s for s in base if s in PRESETS), key=lambda s: base[s], default=None)
    lines += _against_presets(records, top_preset)
    lines += _against_hand_written(records)
    lines += _against_best_baseline(medians, base, union)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, dataset=True, seeds=True, supernet=BY_DATASET)
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--budget", type=int, default=12, help="measured fine-tunes' worth")
    parser.add_argument(
        "--small-budget", type=int, default=4, help="tinytune's strategies again (0: not)"
    )
    parser.add_argument("--small", nargs="*", default=list(MINE), choices=MINE)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--lr", type=float, help="every fine-tune's rate (default: each family's, chosen first)"
    )
    parser.add_argument("--eta", type=int, default=4, help="halving: candidates per bracket")
    parser.add_argument("--screen-epochs", type=int, default=2)
    parser.add_argument("--screen-fraction", type=float, default=0.5)
    parser.add_argument("--evolution-trials", type=int, default=240)
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--sram-budget-kb", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (0: in-process)")
    parser.add_argument(
        "--reproducible",
        action="store_true",
        help="every search takes its results in the order its fine-tunes started (the "
        "search option of that name): a seed makes the same search whatever the workers' timing",
    )
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="append each run's record here (JSON lines)")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="print the table of records files, taken together (and with --db the τ)",
    )
    parser.add_argument(
        "--latency-ref",
        type=float,
        help="the hypervolume's reference step latency, seconds (default: 1.1 × the slowest "
        "step in the records; give one to compare files)",
    )
    return parser


def _print_report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Prints the table of the ``--report`` files together (with ``--db``, the τ too)."""
    records, runs = [], {}
    for path in args.report:
        if not path.is_file():
            parser.error(f"--report: no records file {path}")
        try:
            lines = read_json_lines(path)
            keys = [(r.get("dataset"), r["strategy"], r["seed"]) for r in lines]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            parser.error(f"--report: {path} is not a file of run records (JSON lines): {e}")
        for r, run in zip(lines, keys, strict=True):
            if run in runs:
                parser.error(
                    f"--report: {path} holds {r['strategy']} seed {r['seed']} of "
                    f"{r['dataset']} again ({runs[run]} has it): give each run once"
                )
            runs[run] = path
            records.append(r)
    datasets = sorted({str(r.get("dataset")) for r in records})
    if len(datasets) > 1:
        parser.error(f"--report: records of {' and '.join(datasets)}: give one data set's")
    print(report(records, args.latency_ref))
    if args.db:
        print(short_tau(f"sqlite:///{args.db}"))
    return 0


def _run_strategy(
    args: argparse.Namespace,
    store: Any,
    executor: Executor,
    strategy: str,
    budget: int,
    seed: int,
) -> dict[str, Any]:
    """One run of ``strategy``: its record, appended to ``--out`` and summed up in a line."""
    started = time.monotonic()
    counts: dict[str, int] = {}
    hand: list[float] | None = None
    driver_s: float | None = None
    if strategy == "mcunetv3":
        points, epochs = mcunetv3_run(args, store, executor, seed)
    else:
        points, epochs, counts, hand, driver_s = search_run(
            args, store, executor, strategy, seed, budget
        )
    label = strategy if budget == args.budget else f"{strategy}@{budget}"
    record = {
        "dataset": args.dataset,
        "strategy": label,
        "seed": seed,
        "points": points,
        "epochs": epochs,
        "counts": counts,
        "hand_written": hand,  # [val, test] of its best hand-written preset
        "budget_epochs": budget * args.epochs * args.repeats,
        "wall_s": time.monotonic() - started,
        "driver_s": driver_s,  # the search's own seconds, not the fine-tunes'
        "sram_budget": args.sram_budget_kb * 1024,
        "reproducible": args.reproducible,
        "lr": args.lr if args.rates is None else args.rates.to_json(),
    }
    if args.out:
        append_json_line(args.out, record)
    print(
        f"{label:>11} seed {seed}: {len(points)} measured, {epochs:.1f} epochs, "
        f"{record['wall_s']:.0f} s",
        flush=True,
    )
    return record


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.latency_ref is not None and not args.latency_ref > 0:
        parser.error(f"--latency-ref must be a positive number of seconds, not {args.latency_ref}")
    if args.report:
        return _print_report(parser, args)
    args.supernet = args.supernet or default_network(args.dataset)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    args.checkpoint = ensure_checkpoint(get_supernet(args.supernet))
    folder = Path(tempfile.mkdtemp(prefix="tinytune-bench-"))
    url = f"sqlite:///{args.db or folder / 'bench.db'}"
    executor = (
        RayExecutor(run_evaluation, workers=args.workers)
        if args.workers
        else InlineExecutor(run_evaluation)
    )
    records: list[dict[str, Any]] = []
    args.rates = None
    try:
        with open_store(url) as store:
            args.repeats = repeats(args, store)
            if args.lr is None:
                args.rates = choose_rates(args, store, executor)
                print(f"learning rates chosen on validation: {args.rates.to_json()}", flush=True)
            runs = [(s, args.budget) for s in args.strategies]
            runs += [(s, args.small_budget) for s in args.small if args.small_budget]
            for seed in args.seeds:
                for strategy, budget in runs:
                    records.append(_run_strategy(args, store, executor, strategy, budget, seed))
    finally:
        executor.close()
    print()
    rates = f"lr {args.lr:g}" if args.rates is None else "each family's lr"
    print(
        f"{args.dataset}, {args.supernet}, budget {args.budget} × {args.epochs} epochs, {rates}, "
        f"SRAM budget {args.sram_budget_kb} KB, seeds {args.seeds}"
    )
    print(report(records, args.latency_ref))
    print(f"database: {url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
