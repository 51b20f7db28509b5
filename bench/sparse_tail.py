"""Update schemes between classifier-only and the ``mcunetv3`` preset: where a sparse update
comes within a point of full fine-tuning at a tenth of its training SRAM.

    python3 bench/sparse_tail.py [--lr 1.6] [--seed 0]

On the default sub-network of the shipped ``ofa-proxyless-w0.35`` (40 px), on digits, each
scheme is fine-tuned as the search measures a candidate (8 epochs, batch 32, one thread, one
rate for every scheme: ``--lr``) and priced by the search's planner (the int8 arena of one
training step at batch 1). The reference is full fine-tuning of the same sub-network, measured
in the same run. Schemes, named as MCUNetV3 counts (``b<k>``: the biases of the last k
convolutions; ``<i>@<r>``: the weight of convolution i, from the input, on its first r of the
input channels): the presets, bias updates of the last k layers, and bias updates with one or
two expansion (``pw1``) convolutions of the last blocks. For each: arena, how many times less
than the reference's, validation and test accuracy, and the test accuracy against the
reference's in points. Nothing is chosen here; the table shows what the space holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time

SCHEMES: dict[str, tuple[int, tuple[tuple[int, float], ...]]] = {
    "b2": (2, ()),
    "b6": (6, ()),
    "b10": (10, ()),
    "b16": (16, ()),
    "b24": (24, ()),
    "b4 33@0.25": (4, ((33, 0.25),)),
    "b10 33@0.25": (10, ((33, 0.25),)),
    "b10 27@0.125": (10, ((27, 0.125),)),
    "b10 27@0.25": (10, ((27, 0.25),)),
    "b10 27@0.5": (10, ((27, 0.5),)),
    "b10 27@1": (10, ((27, 1.0),)),
    "b12 27@0.5 30@0.125": (12, ((27, 0.5), (30, 0.125))),
    "b12 27@1 30@0.125 33@0.25": (12, ((27, 1.0), (30, 0.125), (33, 0.25))),
}
PRESETS = ("full", "last", "bias-only", "mcunetv3")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1.6)
    parser.add_argument("--seed", type=int, default=0, help="the fine-tunes' seed")
    args = parser.parse_args(argv)

    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.db import open_store
    from tinytune.evaluators import run_evaluation
    from tinytune.search import SearchConfig
    from tinytune.search.preflight import preflight
    from tinytune.spaces import default_subnet, get_supernet, make_preset
    from tinytune.spaces.candidate import UpdateScheme

    start = time.monotonic()
    config = SearchConfig(checkpoint="")
    spec = get_supernet(config.supernet)
    subnet = default_subnet(spec)
    candidates = {name: make_preset(name, spec, subnet) for name in PRESETS}
    classifier = candidates["last"]
    for name, (k, weights) in SCHEMES.items():
        candidates[name] = dataclasses.replace(classifier, update=UpdateScheme(k, weights))
    finetune = dataclasses.replace(config.finetune, lr=args.lr, seed=args.seed).to_dict()
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/plan.db") as store:
        hardware = preflight(config, store).hardware
        rows = []
        for name, candidate in candidates.items():
            result = run_evaluation(
                {
                    "candidate": candidate.to_json(),
                    "checkpoint": str(shipped_checkpoint(spec)),
                    "dataset": config.dataset,
                    "data_seed": config.data_seed,
                    "finetune": finetune,
                    "threads": 1,
                }
            )
            if result["status"] != "ok":
                raise RuntimeError(f"{name}: {result['error']}")
            arena = hardware(candidate).arena_bytes
            rows.append((name, arena, result["val_accuracy"], result["accuracy"]))
            print(f"{name}: {arena} B, {100 * result['val_accuracy']:.1f} / "
                  f"{100 * result['accuracy']:.1f}", file=sys.stderr, flush=True)  # fmt: skip
    _, full_arena, _, full_test = rows[0]
    print("| scheme | arena (B) | less SRAM than full | val / test % | test vs full (pp) |")
    print("|---|---|---|---|---|")
    for name, arena, val, test in rows:
        print(
            f"| `{name}` | {arena:,} | {full_arena / arena:.1f}× | {100 * val:.1f} / "
            f"{100 * test:.1f} | {100 * (test - full_test):+.1f} |"
        )
    print(f"\nlr {args.lr}, seed {args.seed}; measured in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
