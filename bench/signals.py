"""Cheap signals against measured accuracy: Kendall τ per scheme family and pooled.

    python3 -m bench.signals [--sample 24] [--seed 0] [--dataset digits] [--lr 1.6]
        [--family-lr FAMILY=LR ...] [--sram-budget-kb KB] [--supernet NAME]
        [--epochs 8] [--contribution-epochs 2] [--short-epochs 2] [--short-fraction 0.5]
        [--repeat-seed S] [--processes 2] [--json OUT]

Candidates: the presets on the default sub-network (classifier only, bias-only, the MCUNetV3-
and TinyTL-style schemes, full fine-tuning) and ``--sample`` more drawn at random from the joint
space of the data set's network (``ofa-proxyless-w0.35`` on the built-in data sets,
EfficientNet-Lite0 on an image folder; Optuna's random sampler; with ``--sram-budget-kb``, only
those that fit it, as the search measures no other), all on the shipped weights. Each
is fine-tuned as the search measures it (``tinytune.evaluators.run_evaluation``: its epochs,
batch 32, one rate for every family, one torch thread, ``--processes`` at a time) for its
validation accuracy, and its signals (``bench/cheap_signals.py``: a linear probe and 64
backward passes of one image) are measured in the driver with one thread. One more signal is
MCUNetV3's contribution analysis at low fidelity: the default plan's table (34 fine-tunes for
the default sub-network) measured at ``--contribution-epochs`` epochs instead of the study's,
and the sum of :func:`tinytune.search.ladder.proxy.estimate`'s terms (not clipped to 1, which would
tie the best schemes) for each candidate with the probe as its sub-network's base
(``contribution``; ``--contribution-epochs 0`` leaves it out). Another is the low rung of
successive halving (``tinytune search --halving``): the candidate's own short fine-tune,
``--short-epochs`` epochs on a stratified ``--short-fraction`` of the training images, its
validation accuracy (``short``; ``--short-epochs 0`` leaves it out). ``--repeat-seed S``
fine-tunes every candidate again with fine-tuning seed S (another data order and classifier
initialisation) and reports the τ of the two measurements: the measurement's own noise, a
ceiling for any signal against one fine-tune; each signal's pooled τ against the mean of the two
(``mean of two``, a less noisy measurement) is printed beside it. Printed: each
signal's Kendall τ-b against measured validation accuracy pooled over all candidates and within
each scheme family (``tinytune.search.run.lr_grid.family_of``; families of fewer than 3 candidates
are left out), the seconds a candidate's signals and its fine-tune took (medians), and the command.
The test accuracy is stored in the JSON and never used here.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.harness import BY_DATASET, add_arguments, write_json
from tinytune.errors import ConfigError
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask, run_evaluation
from tinytune.spaces import default_network


def _contribution_table(args, spec, checkpoint, pool):  # type: ignore[no-untyped-def]
    """The default plan's table at ``--contribution-epochs``, run on ``pool``; with the number
    of its fine-tunes."""
    import itertools
    import tempfile

    from tinytune.db import open_store
    from tinytune.search.execution.executor import Executor
    from tinytune.search.ladder.contribution import (
        ContributionPlan,
        TableIdentity,
        file_sha256,
        run_contributions,
    )
    from tinytune.spaces import default_subnet

    class PoolExecutor(Executor):
        def __init__(self) -> None:
            self.slots = args.processes
            self.futures: dict[int, Any] = {}

        def submit(self, key: int, task: FinetuneTask) -> None:
            self.futures[key] = pool.submit(run_evaluation, task)

        def wait(self, timeout: float) -> list[tuple[int, EvaluationResult]]:
            from concurrent.futures import FIRST_COMPLETED, wait

            done, _ = wait(self.futures.values(), timeout=timeout, return_when=FIRST_COMPLETED)
            out = [(k, f.result()) for k, f in self.futures.items() if f in done]
            for k, _ in out:
                del self.futures[k]
            return out

        def in_flight(self) -> int:
            return len(self.futures)

    config = FinetuneConfig(epochs=args.contribution_epochs, lr=args.lr, seed=args.seed)
    identity = TableIdentity(
        spec.name, str(checkpoint), file_sha256(checkpoint), args.dataset, args.seed, config,
        default_subnet(spec),
    )  # fmt: skip
    keys = itertools.count()

    def task(candidate):  # type: ignore[no-untyped-def]
        return FinetuneTask(
            candidate=candidate.to_json(), checkpoint=str(checkpoint),
            dataset=args.dataset, data_seed=args.seed, finetune=config, threads=1,
        )  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/table.db")
        table = run_contributions(
            store, PoolExecutor(), identity, spec, ContributionPlan(), task, lambda: next(keys)
        )
    if table is None:
        raise SystemExit("the contribution analysis could not measure its classifier-only base")
    return table


def _within_budget(args: argparse.Namespace, spec: Any, checkpoint: Any) -> list[Any]:
    """``--sample`` distinct candidates of the joint space (Optuna's random sampler) that fit
    ``--sram-budget-kb`` and the device's flash, each with the frozen-prefix schedule the search
    gives it (patch by patch where whole images would not fit)."""
    import optuna

    from tinytune.data import get_dataset
    from tinytune.db import open_store
    from tinytune.search import SearchConfig, preflight
    from tinytune.search.config.budgets import over_budget
    from tinytune.spaces import suggest_candidate

    data = get_dataset(args.dataset)
    config = SearchConfig(
        checkpoint=str(checkpoint),
        study_name="signals",
        supernet=spec.name,
        dataset=data.name,
        n_classes=data.num_classes,
        sram_budget_bytes=args.sram_budget_kb * 1024,
    )
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/s.db") as store:
        checked = preflight(config, store)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    out: dict[str, Any] = {}
    for _ in range(200 * args.sample):
        if len(out) == args.sample:
            break
        try:
            c = checked.hardware.schedule(suggest_candidate(study.ask(), spec))
        except ConfigError:  # a schedule the network cannot run
            continue
        if over_budget(config, checked.flash_budget, checked.hardware(c))[1] is None:
            out.setdefault(c.key, c)
    return list(out.values())


@dataclasses.dataclass(frozen=True)
class _Measured:
    """What a run measured by candidate key: signals, fine-tunes, contribution estimates."""

    signals: dict[str, Any]
    measured: dict[str, EvaluationResult]
    repeated: dict[str, EvaluationResult]
    short: dict[str, EvaluationResult]
    contribution: dict[str, float]  # empty without --contribution-epochs
    table: Any  # the contribution table; None without --contribution-epochs
    table_s: float
    names: list[str]


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=24, help="random candidates besides presets")
    parser.add_argument("--seed", type=int, default=0)
    add_arguments(parser, dataset=True, json=True, supernet=BY_DATASET)
    parser.add_argument("--lr", type=float, default=1.6)
    parser.add_argument(
        "--family-lr",
        nargs="*",
        default=[],
        metavar="FAMILY=LR",
        help="a scheme family's own rate (as the search's grid chose it), e.g. bias=0.8",
    )
    parser.add_argument(
        "--sram-budget-kb",
        type=int,
        help="draw only candidates within this SRAM budget, frozen prefix scheduled as the "
        "search does (default: any)",
    )
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--contribution-epochs", type=int, default=2)
    parser.add_argument("--short-epochs", type=int, default=2)
    parser.add_argument("--short-fraction", type=float, default=0.5)
    parser.add_argument("--repeat-seed", type=int, help="fine-tune again with this seed")
    parser.add_argument("--processes", type=int, default=2)
    return parser


def _finetune_tasks(
    args: argparse.Namespace, spec: Any, checkpoint: Any, candidates: dict[str, Any]
) -> tuple[FinetuneConfig, dict[str, FinetuneTask]]:
    """The fine-tune settings and each candidate's fine-tune, at its ``--family-lr``."""
    from tinytune.search.run.lr_grid import family_of

    config = FinetuneConfig(epochs=args.epochs, lr=args.lr, seed=args.seed)
    rates = {f: float(v) for f, v in (pair.split("=", 1) for pair in args.family_lr)}

    def finetune(c: Any, settings: FinetuneConfig) -> FinetuneConfig:
        return dataclasses.replace(settings, lr=rates.get(family_of(c, spec), settings.lr))

    tasks = {
        key: FinetuneTask(
            candidate=c.to_json(),
            checkpoint=str(checkpoint),
            dataset=args.dataset,
            data_seed=args.seed,
            finetune=finetune(c, config),
            threads=1,
        )
        for key, c in candidates.items()
    }
    return config, tasks


def _submit_finetunes(
    args: argparse.Namespace, pool: ProcessPoolExecutor, tasks: dict[str, FinetuneTask]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Submits every fine-tune to ``pool``: the measured, the repeated and the short."""
    futures = {key: pool.submit(run_evaluation, task) for key, task in tasks.items()}
    again = {}
    if args.repeat_seed is not None:
        again = {
            k: pool.submit(
                run_evaluation,
                t.replace(finetune=dataclasses.replace(t.finetune, seed=args.repeat_seed)),
            )
            for k, t in tasks.items()
        }
    shorts = {}
    if args.short_epochs > 0:
        shorts = {
            k: pool.submit(
                run_evaluation,
                t.replace(
                    finetune=dataclasses.replace(t.finetune, epochs=args.short_epochs),
                    train_fraction=args.short_fraction,
                ),
            )
            for k, t in tasks.items()
        }
    return futures, again, shorts


def _contributions(
    args: argparse.Namespace,
    spec: Any,
    checkpoint: Any,
    pool: ProcessPoolExecutor,
    candidates: dict[str, Any],
    signals: dict[str, Any],
) -> tuple[Any, float, dict[str, float]]:
    """The contribution table, its seconds and each candidate's unclipped estimate."""
    from tinytune.search.ladder.proxy import estimate

    t0 = time.perf_counter()
    table = _contribution_table(args, spec, checkpoint, pool)
    table_s = time.perf_counter() - t0
    contribution = {}
    for k, c in candidates.items():
        terms = estimate(c, table, signals[k].probe)
        # unclipped: the estimate clips to [0, 1], which ties the best schemes
        contribution[k] = terms.base + terms.delta
    return table, table_s, contribution


def _measure(
    args: argparse.Namespace,
    spec: Any,
    checkpoint: Any,
    candidates: dict[str, Any],
    config: FinetuneConfig,
    tasks: dict[str, FinetuneTask],
) -> _Measured:
    """Fine-tunes in worker processes, signals in the driver, then the contribution table."""
    from bench.cheap_signals import SIGNALS, measure_signals
    from tinytune.data import get_dataset
    from tinytune.evaluators.task import network_on_data
    from tinytune.models import load_supernet

    with ProcessPoolExecutor(args.processes) as pool:
        futures, again, shorts = _submit_finetunes(args, pool, tasks)
        supernet = load_supernet(spec, checkpoint)
        dataset = get_dataset(args.dataset, seed=args.seed)
        signals = {}
        for key, c in candidates.items():
            splits = dataset.load(c.subnet.resolution)
            net, _ = network_on_data(c, supernet, splits, dataset.num_classes, config.seed)
            signals[key] = measure_signals(net, splits, seed=args.seed)
        measured = {key: f.result() for key, f in futures.items()}
        repeated = {key: f.result() for key, f in again.items()}
        short = {key: f.result() for key, f in shorts.items()}
        names = list(SIGNALS)
        if shorts:
            names.append("short")
        table, table_s, contribution = None, 0.0, {}
        if args.contribution_epochs > 0:
            table, table_s, contribution = _contributions(
                args, spec, checkpoint, pool, candidates, signals
            )
            names.append("contribution")
    return _Measured(signals, measured, repeated, short, contribution, table, table_s, names)


def _value(m: _Measured, key: str, name: str) -> float:
    """The signal ``name`` of the candidate ``key``."""
    if name == "short":
        return m.short[key].val_accuracy
    return m.contribution[key] if name == "contribution" else getattr(m.signals[key], name)


def _taus(
    m: _Measured, ok: list[str], family: dict[str, str]
) -> list[tuple[str, Any, dict[str, Any]]]:
    """Each signal's τ against measured validation accuracy, pooled and per family of 3+."""
    from tinytune.search.ladder.proxy import kendall_tau

    measured = m.measured
    rows = []
    for name in m.names:
        pooled = kendall_tau(
            [_value(m, k, name) for k in ok], [measured[k].val_accuracy for k in ok]
        )
        per_family = {}
        for fam in sorted(set(family.values())):
            keys = [k for k in ok if family[k] == fam]
            if len(keys) >= 3:
                per_family[fam] = kendall_tau(
                    [_value(m, k, name) for k in keys],
                    [measured[k].val_accuracy for k in keys],
                )
        rows.append((name, pooled, per_family))
    return rows


def _fmt(r: Any) -> str:
    """A τ and its number of pairs, or ``-`` where it is undefined."""
    return "-" if r.tau is None else f"{r.tau:+.2f} (n={r.n})"


def _print_taus(rows: list[tuple[str, Any, dict[str, Any]]], against_mean: dict[str, Any]) -> None:
    """Prints the table of the signals' τ: pooled, against the mean of two, per family."""
    fams = sorted({f for _, _, pf in rows for f in pf})
    mean_head = f" {'mean of two':>12}" if against_mean else ""
    print(f"{'signal':<10} {'pooled':>12}{mean_head} " + " ".join(f"{f:>12}" for f in fams))
    for name, pooled, per_family in rows:
        cells = " ".join(f"{_fmt(per_family[f]) if f in per_family else '-':>12}" for f in fams)
        mean_cell = f" {_fmt(against_mean[name]):>12}" if against_mean else ""
        print(f"{name:<10} {_fmt(pooled):>12}{mean_cell} {cells}")


def _print_costs(args: argparse.Namespace, m: _Measured, ok: list[str], both: list[str]) -> Any:
    """Prints the median seconds, the repeat's τ (returned) and the contribution table's cost."""
    from tinytune.search.ladder.proxy import kendall_tau

    measured, repeated, short = m.measured, m.repeated, m.short
    signals, table, table_s = m.signals, m.table, m.table_s
    sig_s = statistics.median(s.seconds for s in signals.values())
    ft_s = statistics.median(measured[k].details["finetune_s"] for k in ok)
    short_s = (
        f", short fine-tune {statistics.median(short[k].details['finetune_s'] for k in ok):.1f}"
        if short
        else ""
    )
    print(f"median seconds per candidate: signals {sig_s:.2f}, fine-tune {ft_s:.1f}{short_s}")
    noise = None
    if repeated:
        noise = kendall_tau(
            [repeated[k].val_accuracy for k in both],
            [measured[k].val_accuracy for k in both],
        )
        print(f"measured vs measured again (fine-tuning seed {args.repeat_seed}): τ {_fmt(noise)}")
    if args.contribution_epochs > 0:
        print(
            f"contribution table: {table.tasks} fine-tunes of {args.contribution_epochs} epochs "
            f"({table.tasks * args.contribution_epochs / args.epochs:.1f} fine-tunes' epochs), "
            f"{table_s:.0f} s on {args.processes} processes"
        )
    return noise


def _write_record(
    args: argparse.Namespace,
    candidates: dict[str, Any],
    m: _Measured,
    family: dict[str, str],
    rows: list[tuple[str, Any, dict[str, Any]]],
    noise: Any,
    against_mean: dict[str, Any],
) -> None:
    """Writes the run's JSON record (``--json``): candidates, signals, accuracies and τ."""
    signals, measured, short, contribution = m.signals, m.measured, m.short, m.contribution
    out = {
        "args": vars(args) | {"json": str(args.json)},
        "candidates": {
            k: {
                "candidate": candidates[k].to_json(),
                "family": family.get(k),
                "signals": signals[k].to_dict()
                | ({"contribution": contribution[k]} if args.contribution_epochs else {})
                | ({"short": short[k].val_accuracy} if short else {}),
                "val_accuracy": measured[k].val_accuracy,
                "test_accuracy": measured[k].accuracy,
                "finetune_s": measured[k].details.get("finetune_s"),
            }
            for k in candidates
        },
        "tau": {
            name: {"pooled": pooled.tau, **{f: r.tau for f, r in pf.items()}}
            for name, pooled, pf in rows
        },
        "tau_repeat": None if noise is None else noise.tau,
        "tau_mean_of_two": {name: r.tau for name, r in against_mean.items()},
        "val_accuracy_repeat": {k: r.val_accuracy for k, r in m.repeated.items()},
    }
    write_json(args.json, out)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    import torch

    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.evaluators.profile import sample_candidates
    from tinytune.search.ladder.proxy import kendall_tau
    from tinytune.search.run.lr_grid import family_of
    from tinytune.spaces import get_supernet, make_preset

    torch.set_num_threads(1)
    spec = get_supernet(args.supernet or default_network(args.dataset))
    checkpoint = ensure_checkpoint(spec)
    presets = [make_preset(p, spec) for p in ("last", "bias-only", "mcunetv3", "tinytl", "full")]
    drawn = (
        sample_candidates(spec, args.sample, args.seed)
        if args.sram_budget_kb is None
        else _within_budget(args, spec, checkpoint)
    )
    candidates = {c.key: c for c in presets + drawn}
    config, tasks = _finetune_tasks(args, spec, checkpoint, candidates)
    start = time.perf_counter()
    m = _measure(args, spec, checkpoint, candidates, config, tasks)
    wall = time.perf_counter() - start
    measured, repeated, short = m.measured, m.repeated, m.short

    ok = [
        k
        for k in candidates
        if measured[k].status == "ok" and (not short or short[k].status == "ok")
    ]
    family = {k: family_of(candidates[k], spec) for k in ok}
    rows = _taus(m, ok, family)
    # against the mean of the two fine-tunes (--repeat-seed): a measurement with less noise, so
    # what a signal misses of the expected accuracy shows apart from what one fine-tune adds
    both = [k for k in ok if repeated and repeated[k].status == "ok"]
    mean_of_two = {k: (measured[k].val_accuracy + repeated[k].val_accuracy) / 2 for k in both}
    against_mean = {
        name: kendall_tau([_value(m, k, name) for k in both], [mean_of_two[k] for k in both])
        for name in m.names
        if both
    }
    counts = {fam: sum(1 for k in ok if family[k] == fam) for fam in sorted(set(family.values()))}
    print(
        f"{len(ok)} candidates measured ({len(candidates) - len(ok)} failed) on {args.dataset}: "
        f"families {counts}; lr {args.lr}, {args.epochs} epochs; {wall:.0f} s"
    )
    _print_taus(rows, against_mean)
    noise = _print_costs(args, m, ok, both)
    print("command: python3 -m bench.signals " + " ".join(sys.argv[1:] if argv is None else argv))
    if args.json:
        _write_record(args, candidates, m, family, rows, noise, against_mean)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
