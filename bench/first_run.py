"""A new user's first run, over seeds: what ``tinytune search`` gives from an empty folder and
an empty cache, run after run with another ``--seed``.

One run answers only for its seed: the seed decides each fine-tune's initial shuffle (and the
sampler's draws), and on digits' 360-image validation and test splits one image is 0.28 points,
so a figure of one run moves by a point or more from seed to seed. Each run here is the
README's first command with ``--seed S`` added (its own empty folder and cache, timed with the
wall clock), and the stored study is read back for:

* the reference, full fine-tuning of the default sub-network (validation and test accuracy);
* the classifier-only update (the ``last`` preset) of the same sub-network;
* the best point of the front, chosen on validation accuracy (ties: the smaller peak SRAM),
  its test accuracy and its SRAM ratio against the reference;
* the front point of the largest SRAM saving within a point of the reference (on validation,
  the only split a user may choose on), and the front's size and hypervolume.

The summary gives each figure's median, mean and range over the seeds.

    python3 -m bench.first_run [--seeds 0 1 2 3 4] [--dataset digits] [--json OUT]
        [--from-json EARLIER.json [MORE.json ...]] [--write docs/bench/first-run.md
        [--section first-run]]

``--write`` replaces the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
(``--section NAME``, default ``first-run``; with ``--from-json``, by the summaries of every file
given, one data set after another). About 100 s per seed on two cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.harness import add_arguments, head, read_json, row, write_json
from bench.markers import write_section

WITHIN_PP = 1.0  # "within a point of full fine-tuning"


def read_study(storage: str) -> dict[str, Any]:
    """The figures of the only study in ``storage`` (a finished ``tinytune search``)."""
    import optuna

    from tinytune import load
    from tinytune.db import open_store
    from tinytune.search.config.search_config import reference_candidate
    from tinytune.search.study.attrs import Attr
    from tinytune.spaces import Candidate, default_subnet, get_supernet, make_preset

    view = load(storage=storage)
    ref = view.reference
    if ref is None or ref.test_accuracy is None:
        raise SystemExit(f"{storage}: the study has no measured reference")
    supernet = view.space.supernet
    last_key = make_preset(
        "last", get_supernet(supernet), default_subnet(get_supernet(supernet))
    ).key
    assert reference_candidate(supernet).key == ref.candidate_key
    with open_store(storage) as store:
        last = store.find_evaluation(view.name, last_key, "measured")
        candidates = {
            p.candidate_key: Candidate.from_json(store.get_candidate(p.candidate_key).payload)
            for p in view.front
        }
    if last is None or last.val_accuracy is None:
        raise SystemExit(f"{storage}: the study did not measure the classifier-only preset")
    best = max(view.front, key=lambda p: (p.val_accuracy, -p.memory_bytes))
    close = [p for p in view.front if ref.val_accuracy - p.val_accuracy <= WITHIN_PP / 100]
    saver = min(close, key=lambda p: p.memory_bytes)
    trials = optuna.load_study(study_name=view.name, storage=storage).trials
    # a schedule twin is no proposal: the same fine-tune priced at another patch count
    proposed = [t for t in trials if Attr.TWIN_OF not in t.user_attrs]
    over = sum("exceeds its budget" in t.user_attrs.get("pruned_reason", "") for t in proposed)

    def point(p: Any) -> dict[str, Any]:
        candidate = candidates[p.candidate_key]
        return {
            "scheme": p.scheme,
            "val": p.val_accuracy,
            "test": p.test_accuracy,
            "memory_bytes": p.memory_bytes,
            "sram_ratio": ref.memory_bytes / p.memory_bytes,
            "resolution": candidate.subnet.resolution,
            "patches": candidate.schedule.to_dict() if candidate.schedule.patched else None,
        }

    return {
        "full": {
            "val": ref.val_accuracy,
            "test": ref.test_accuracy,
            "memory_bytes": ref.memory_bytes,
        },
        "last": {
            "val": last.val_accuracy,
            "test": last.accuracy,
            "memory_bytes": last.memory_bytes,
        },
        "best": point(best),
        "saver": point(saver),
        "front": len(view.front),
        "hypervolume": view.hypervolume,
        "proposals": {"total": len(proposed), "over_budget": over},
        "twins": len(trials) - len(proposed),
    }


def run_seed(seed: int, dataset: str) -> dict[str, Any]:
    """``tinytune search --seed SEED`` in an empty folder with an empty cache; its figures."""
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TINYTUNE_CACHE": cache}
        command = ["tinytune", "search", "--seed", str(seed), "--dataset", dataset]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(
                f"seed {seed}: {' '.join(command)} failed:\n{done.stdout}{done.stderr}"
            )
        figures = read_study(f"sqlite:///{folder}/tinytune.db")
    return {"seed": seed, "wall_s": wall, **figures}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _spread(values: list[float], fmt: Any, unit: str) -> str:
    """Median (mean, min to max) of ``values``, written by ``fmt``, each followed by ``unit``."""
    median, mean = statistics.median(values), statistics.fmean(values)
    return (
        f"{fmt(median)}{unit} (mean {fmt(mean)}{unit}, {fmt(min(values))} to "
        f"{fmt(max(values))}{unit})"
    )


def _where(p: dict[str, Any]) -> str:
    """A point's scheme, with its resolution and patch schedule where recorded."""
    if "resolution" not in p:
        return str(p["scheme"])
    patches = p.get("patches")
    schedule = f", {patches['patches']}:{patches['blocks']} patches" if patches else ""
    return f"{p['scheme']} ({p['resolution']} px{schedule})"


def _over(r: dict[str, Any]) -> str:
    proposals = r.get("proposals")
    if proposals is None:
        return "–"
    return f"{proposals['over_budget']} of {proposals['total']}"


def table(runs: list[dict[str, Any]], dataset: str) -> str:
    rows = [
        head(
            [
                "seed",
                "time",
                "full: val / test",
                "classifier only: val / test",
                "best on validation: scheme, val / test, SRAM vs full",
                "largest saving within 1 pp (val): scheme, val / test, SRAM vs full",
                "front",
                "proposals over budget",
            ]
        )
    ]
    for r in runs:
        b, s = r["best"], r["saver"]
        rows.append(
            row(
                [
                    r["seed"],
                    f"{r['wall_s']:.0f} s",
                    f"{_pct(r['full']['val'])} / {_pct(r['full']['test'])}",
                    f"{_pct(r['last']['val'])} / {_pct(r['last']['test'])}",
                    f"{_where(b)}, {_pct(b['val'])} / {_pct(b['test'])}, {b['sram_ratio']:.1f}×",
                    f"{_where(s)}, {_pct(s['val'])} / {_pct(s['test'])}, {s['sram_ratio']:.1f}×",
                    r["front"],
                    _over(r),
                ]
            )
        )

    def pct(x: float) -> str:
        return f"{100 * x:.1f}"

    def pp(x: float) -> str:
        return f"{100 * x:+.1f}"

    def col(fn: Any) -> list[float]:
        return [fn(r) for r in runs]

    lines = [
        f"{len(runs)} fresh runs of `tinytune search --dataset {dataset} --seed S`; median "
        "(mean, range) over the seeds:",
        "",
        f"- time: {_spread(col(lambda r: r['wall_s']), lambda x: f'{x:.0f}', ' s')}",
        f"- full fine-tuning, test: {_spread(col(lambda r: r['full']['test']), pct, ' %')}; "
        f"validation: {_spread(col(lambda r: r['full']['val']), pct, ' %')}",
        f"- classifier only, test: {_spread(col(lambda r: r['last']['test']), pct, ' %')}",
        "- the front's best point on validation, test: "
        f"{_spread(col(lambda r: r['best']['test']), pct, ' %')}",
        *(
            [
                "- trials over a budget before any fine-tune: "
                + _spread(
                    col(lambda r: r["proposals"]["over_budget"] / r["proposals"]["total"]),
                    pct,
                    " %",
                )
            ]
            if all("proposals" in r for r in runs)
            else []
        ),
        "- the largest SRAM saving within a point of full fine-tuning on validation: "
        f"{_spread(col(lambda r: r['saver']['sram_ratio']), lambda x: f'{x:.1f}', '×')}; its test "
        "accuracy against full fine-tuning's: "
        f"{_spread(col(lambda r: r['saver']['test'] - r['full']['test']), pp, ' pp')}",
        "",
        *rows,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(
        p,
        seeds=True,
        dataset=True,
        json=True,
        from_json="many",
        write="one",
        help={
            "from_json": "print (or write) earlier runs' figures, in turn",
            "write": "the Markdown file whose block to replace",
        },
    )
    p.add_argument("--section", default="first-run", help="the block's name")
    args = p.parse_args(argv)
    if args.from_json:
        earlier = [read_json(path) for path in args.from_json]
        text = "\n\n".join(table(e["runs"], e["dataset"]) for e in earlier)
    else:
        runs, dataset = [], args.dataset
        for seed in args.seeds:
            runs.append(run_seed(seed, dataset))
            r = runs[-1]
            print(
                f"seed {seed}: {r['wall_s']:.0f} s, full {_pct(r['full']['val'])} / "
                f"{_pct(r['full']['test'])}, best {r['best']['scheme']} "
                f"{_pct(r['best']['val'])} / {_pct(r['best']['test'])}",
                flush=True,
            )
        if args.json:
            write_json(args.json, {"dataset": dataset, "runs": runs})
        text = table(runs, dataset)
    print(text)
    if args.write:
        write_section(args.write, args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
