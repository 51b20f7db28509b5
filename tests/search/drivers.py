"""A search driver in its own process, over an evaluator that trains nothing: what several
drivers sharing one study run in the tests (``python tests/search/drivers.py URL ...``)."""

from __future__ import annotations

import argparse
import time

from fakes import FakeEvaluator  # run as a script: its folder is on sys.path

from tinytune.evaluators import EvaluationResult, FinetuneTask


class SlowEvaluator(FakeEvaluator):
    """The fake evaluator, taking ``seconds`` per evaluation like a real fine-tune."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def __call__(self, task: FinetuneTask) -> EvaluationResult:
        time.sleep(self.seconds)
        return super().__call__(task)


def main() -> None:
    from tinytune.db import open_store
    from tinytune.search import InlineExecutor, SearchConfig, run_search

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = SearchConfig(
        checkpoint="unused-by-the-fake-evaluator",
        study_name="shared",
        trials=args.trials,
        seed=args.seed,
        sampler="random",
        heartbeat_s=1,
        tune_lr=False,
        grace_s=5,  # SQLite's clock has whole seconds: a margin over the beat
    )
    with open_store(args.url) as store:
        result = run_search(config, store, InlineExecutor(SlowEvaluator(args.seconds)))
    c = result.counts
    print(f"measured {c.measured} reused {c.reused} pruned {c.pruned} retried {c.retried}")


if __name__ == "__main__":
    main()
