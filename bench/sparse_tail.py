"""Update schemes between classifier-only and the ``mcunetv3`` preset: where a sparse update
comes within a point of full fine-tuning at a tenth of its training SRAM.

    python3 -m bench.sparse_tail [--lr 1.6 ...] [--epochs 8 ...] [--seed 0] [--subnet min|max]
        [--resolution PX] [--schemes SCHEME ...] [--choose-at RATIO]

On a reference sub-network of the shipped ``ofa-proxyless-w0.35`` (``--subnet``: ``min``, the
search's default sub-network, or ``max``, the largest; ``--resolution``: 40 px unless given),
on digits, each scheme is fine-tuned as the search measures a candidate (8 epochs, batch 32,
one thread, one rate for every scheme: ``--lr``; several rates, or several lengths with
``--epochs``: each scheme at each pair, its own pair chosen on validation) and priced by the
search's planner (the int8 arena of one training step at batch 1). The reference is full
fine-tuning of the same sub-network, measured in the same run. Schemes, named as MCUNetV3
counts (``b<k>``: the biases of the last k convolutions; ``<i>@<r>``: the weight of
convolution i, from the input, on its first r of the input channels): the presets, bias
updates of the last k layers, and bias updates with one to three expansion (``pw1``)
convolutions of the last three blocks (on the default sub-network convolutions 27, 30 and 33).
For each: arena, how many times less than the reference's, validation and test accuracy, and
the test accuracy against the reference's in points. The table shows what the space holds;
``--choose-at 10`` also chooses, on validation, among the schemes at ten times less SRAM or
more, as a front would.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from typing import Any

from bench.harness import head, row

# (k, ((j, r), ...)): the biases of the last k convolutions and the weight of the expansion
# convolution of the j-th block from the end (1: the last block) on its first r input channels.
SCHEMES: tuple[tuple[int, tuple[tuple[int, float], ...]], ...] = (
    (2, ()),
    (6, ()),
    (10, ()),
    (16, ()),
    (24, ()),
    (4, ((1, 0.25),)),
    (10, ((1, 0.25),)),
    (10, ((3, 0.125),)),
    (10, ((3, 0.25),)),
    (10, ((3, 0.5),)),
    (10, ((3, 1.0),)),
    (12, ((3, 0.5), (2, 0.125))),
    (12, ((3, 1.0), (2, 0.125), (1, 0.25))),
)
PRESETS = ("full", "last", "bias-only", "mcunetv3")
Row = tuple[str, int, float, float, float, int]  # name, arena, val, test, lr, epochs


def _parse_scheme(text: str) -> tuple[int, tuple[tuple[int, float], ...]]:
    """``'b34 45@0.25 48@1'`` as ``(34, ((45, 0.25), (48, 1.0)))``."""
    words = text.split()
    if not words or not words[0].startswith("b") or not words[0][1:].isdigit():
        raise ValueError(f"scheme {text!r}: expected 'b<k>' then 'i@r' terms, e.g. 'b34 45@0.25'")
    weights = []
    for word in words[1:]:
        index, _, ratio = word.partition("@")
        try:
            weights.append((int(index), float(ratio)))
        except ValueError:
            raise ValueError(f"scheme {text!r}: {word!r} is not 'i@r', e.g. '45@0.25'") from None
    return int(words[0][1:]), tuple(sorted(weights))


def build_candidates(
    subnet_size: str = "min", resolution: int = 40, schemes: list[str] | None = None
) -> dict[str, Any]:
    """The presets and the schemes to measure (the built-in ones unless ``schemes`` names
    others), by name, on the reference sub-network ``subnet_size`` at ``resolution`` px of the
    default supernet. Raises ``ValueError`` naming a scheme or resolution that does not fit."""
    from tinytune.search import SearchConfig
    from tinytune.spaces import default_subnet, get_supernet, make_preset
    from tinytune.spaces.candidate import UpdateScheme, conv_kinds

    spec = get_supernet(SearchConfig(checkpoint="").supernet)
    if resolution not in spec.resolutions:
        raise ValueError(f"resolution {resolution}: allowed {list(spec.resolutions)}")
    subnet = dataclasses.replace(default_subnet(spec, subnet_size), resolution=resolution)
    candidates = {name: make_preset(name, spec, subnet) for name in PRESETS}
    classifier = candidates["last"]
    pw1 = [i for i, kind in enumerate(conv_kinds(spec, subnet)) if kind == "pw1"]
    if schemes:
        parsed = [_parse_scheme(text) for text in schemes]
    else:
        parsed = [(k, tuple((pw1[-j], r) for j, r in tail)) for k, tail in SCHEMES]
    for k, weights in parsed:
        name = " ".join([f"b{k}"] + [f"{i}@{r:g}" for i, r in weights])
        try:
            update = UpdateScheme(k, weights)
            update.validate(classifier.n_convs)
        except ValueError as error:
            raise ValueError(f"scheme {name!r}: {error}") from None
        candidates[name] = dataclasses.replace(classifier, update=update)
    return candidates


def chosen_setting(
    measured: list[tuple[float, int, float, float]],
) -> tuple[float, int, float, float]:
    """``(lr, epochs, val, test)`` of the fine-tune with the best validation accuracy among
    ``measured`` ones, the shorter fine-tune and then the smaller rate on a tie: the search's
    rule for its rate grid, with the cheaper length first."""
    return max(measured, key=lambda m: (m[2], -m[1], -m[0]))


def choose_at(
    rows: list[tuple[str, int, float, float, float, int]], full_arena: int, ratio: float
) -> tuple[str, int, float, float, float, int] | None:
    """Of ``rows`` (``(name, arena, val, test, lr, epochs)``), the one a front would hold among
    those needing at least ``ratio`` times less SRAM than ``full_arena``: the best on validation,
    the smaller arena on a tie; None when no scheme is that small."""
    eligible = [r for r in rows if full_arena / r[1] >= ratio]
    return max(eligible, key=lambda r: (r[2], -r[1])) if eligible else None


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lr",
        type=float,
        nargs="+",
        default=[1.6],
        help="the rate of every scheme; several: each scheme fine-tuned at each, its rate chosen "
        "on validation (the smaller on a tie), by the rule of the search's grid (which chooses "
        "one per family, on its preset, not one per scheme)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        nargs="+",
        default=[8],
        help="the fine-tunes' length (the search's 8 unless given); several: each scheme "
        "fine-tuned at each rate and each length, its pair chosen on validation (the best; on "
        "a tie the fewer epochs, then the smaller rate)",
    )
    parser.add_argument(
        "--choose-at",
        type=float,
        metavar="RATIO",
        help="also choose, on validation (the smaller arena on a tie), among the schemes that "
        "need at least RATIO times less SRAM than full fine-tuning, as a front would",
    )
    parser.add_argument("--seed", type=int, default=0, help="the fine-tunes' seed")
    parser.add_argument("--subnet", choices=("min", "max"), default="min")
    parser.add_argument("--resolution", type=int, default=40, help="the input size in pixels")
    parser.add_argument(
        "--schemes",
        nargs="+",
        metavar="SCHEME",
        help="measure these schemes instead of the built-in ones, named as in the table "
        "('b34 45@0.25': the biases of the last 34 convolutions and convolution 45's weight "
        "on a quarter of its input channels); the presets are always measured",
    )
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses (``parser.error``) a rate, a length or a ratio out of range."""
    if not all(0.0 < lr < 10.0 for lr in args.lr):  # before any fine-tune, not after some
        parser.error(f"--lr: every rate must lie in (0, 10), got {args.lr}")
    from tinytune.options import MAX_EPOCHS

    if not all(1 <= epochs <= MAX_EPOCHS for epochs in args.epochs):
        parser.error(f"--epochs: every length must lie in [1, {MAX_EPOCHS}], got {args.epochs}")
    if args.choose_at is not None and not args.choose_at > 0:
        parser.error(f"--choose-at must be > 0, got {args.choose_at}")


def _measure(
    config: Any, candidates: dict[str, Any], grid: list[tuple[float, int]], seed: int
) -> list[Row]:
    """Each candidate's arena and fine-tunes over ``grid``, at the pair chosen on validation."""
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.db import open_store
    from tinytune.evaluators import FinetuneTask, run_evaluation
    from tinytune.search.run.preflight import preflight

    spec = candidates["full"].spec
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/plan.db") as store:
        hardware = preflight(config, store).hardware
        rows = []  # (name, arena, val, test, lr, epochs): each at its pair chosen on validation
        for name, candidate in candidates.items():
            arena = hardware(candidate).arena_bytes
            measured = []
            for lr, epochs in grid:
                finetune = dataclasses.replace(config.finetune, lr=lr, epochs=epochs, seed=seed)
                result = run_evaluation(
                    FinetuneTask(
                        candidate=candidate.to_json(),
                        checkpoint=str(shipped_checkpoint(spec)),
                        dataset=config.dataset,
                        data_seed=config.data_seed,
                        finetune=finetune,
                        threads=1,
                    )
                )
                if result.status != "ok":
                    raise RuntimeError(f"{name} at lr {lr:g}, {epochs} epochs: {result.error}")
                val, test = result.val_accuracy, result.accuracy
                measured.append((lr, epochs, val, test))
                print(f"{name} lr {lr:g}, {epochs} epochs: {arena} B, {100 * val:.1f} / "
                      f"{100 * test:.1f}", file=sys.stderr, flush=True)  # fmt: skip
            lr, epochs, val, test = chosen_setting(measured)
            rows.append((name, arena, val, test, lr, epochs))
    return rows


def _print_table(rows: list[Row], args: argparse.Namespace) -> None:
    """Prints the Markdown table of ``rows`` against full fine-tuning, the first of them."""
    _, full_arena, _, full_test, _, _ = rows[0]
    several_rates, several_lengths = len(set(args.lr)) > 1, len(set(args.epochs)) > 1
    extra = (["lr"] if several_rates else []) + (["epochs"] if several_lengths else [])
    print(
        head(
            [
                "scheme",
                "arena (B)",
                "less SRAM than full",
                *extra,
                "val / test %",
                "test vs full (pp)",
            ]
        )
    )
    for name, arena, val, test, lr, epochs in rows:
        chosen = ([f"{lr:g}"] if several_rates else []) + ([epochs] if several_lengths else [])
        print(
            row(
                [
                    f"`{name}`",
                    f"{arena:,}",
                    f"{full_arena / arena:.1f}×",
                    *chosen,
                    f"{100 * val:.1f} / {100 * test:.1f}",
                    f"{100 * (test - full_test):+.1f}",
                ]
            )
        )


def _print_settings(args: argparse.Namespace, grid: list[tuple[float, int]], start: float) -> None:
    """The line under the table: sub-network, resolution, rates, lengths, seed and seconds."""
    rates = "lr " + ", ".join(f"{lr:g}" for lr in sorted(set(args.lr)))
    rates += ", epochs " + ", ".join(str(epochs) for epochs in sorted(set(args.epochs)))
    if len(grid) > 1:
        rates += " (each scheme's pair chosen on validation)"
    print(
        f"\n{args.subnet} sub-network at {args.resolution} px, {rates}, seed {args.seed}; "
        f"measured in {time.monotonic() - start:.0f} s"
    )


def _print_choice(rows: list[Row], ratio: float) -> None:
    """Prints the scheme a front would hold at ``ratio`` times less SRAM, or that none is."""
    _, full_arena, full_val, full_test, _, _ = rows[0]
    chosen = choose_at(rows[1:], full_arena, ratio)
    if chosen is None:
        print(f"no scheme needs {ratio:g}× less SRAM than full fine-tuning")
        return
    name, arena, val, test, lr, epochs = chosen
    print(
        f"chosen on validation among the schemes at >= {ratio:g}× less SRAM: "
        f"`{name}` (lr {lr:g}, {epochs} epochs), {full_arena / arena:.1f}× less, "
        f"{100 * val:.1f} / {100 * test:.1f} %, against full fine-tuning "
        f"{100 * (val - full_val):+.1f} pp on validation and "
        f"{100 * (test - full_test):+.1f} pp on test"
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)

    from tinytune.search import SearchConfig

    start = time.monotonic()
    config = SearchConfig(checkpoint="")
    try:
        candidates = build_candidates(args.subnet, args.resolution, args.schemes)
    except ValueError as error:
        parser.error(str(error))
    grid = [(lr, epochs) for epochs in sorted(set(args.epochs)) for lr in sorted(set(args.lr))]
    rows = _measure(config, candidates, grid, args.seed)
    _print_table(rows, args)
    _print_settings(args, grid, start)
    if args.choose_at is not None:
        _print_choice(rows, args.choose_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
