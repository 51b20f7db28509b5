"""A new user's first search of a large image folder, with no options, twice.

The folder is generated once (``--images`` images of ``--side`` x ``--side`` px in 10 classes of
drawn shapes, :func:`bench.scale.draw`, PNG and JPEG). The command is what a user types,

    tinytune search --dataset imagefolder:FOLDER [--inline]

(EfficientNet-Lite0, the learning-rate grid, the reference and the baselines, then the search
within the default's minutes; on the local Ray cluster's workers, or with ``--inline`` one
fine-tune at a time in the process), run in a fresh process and a fresh database twice: cold,
with an empty cache (``TINYTUNE_CACHE``: decoded images and frozen-prefix outputs), and warm,
with the cache the first run left. Each row gives the wall time of the command, when its first
measured fine-tune ended, the peak resident memory of its process (``ru_maxrss``), the measured
fine-tunes, those it left out for its minutes ("not measured: ..." lines), the grid's, and what
the cache holds after it.

    python3 -m bench.big_folder [--images 20000] [--side 96] [--inline] [--workdir DIR]
        [--json OUT]
    python3 -m bench.big_folder --from-json OUT [--write docs/scale.md]

``--write`` replaces the text between ``<!-- big-folder:begin -->`` and
``<!-- big-folder:end -->``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import add_arguments, machine, read_json, write_json
from bench.harness import table as markdown_table
from bench.markers import write_section

GENERATOR = 1  # the folder's recipe: raise it when write_folder changes


def write_folder(root: Path, images: int, side: int) -> Path:
    """``images`` drawn images of ``side`` px in ``root/<class>/``, written once."""
    from bench import scale

    marker = root / ".generated.json"
    recipe = {"generator": GENERATOR, "shapes": scale.GENERATOR, "images": images, "side": side}
    if marker.is_file() and read_json(marker) == recipe:
        return root
    if root.exists():
        shutil.rmtree(root)
    for name in scale.CLASSES:
        (root / name).mkdir(parents=True)
    scale.SIZES = ((side, side),)
    for i in range(images):
        label = i % len(scale.CLASSES)
        image, suffix = scale.draw(label, i // len(scale.CLASSES))
        image.save(root / scale.CLASSES[label] / f"{i // len(scale.CLASSES):06d}{suffix}")
    write_json(marker, recipe)
    return root


def _bytes(folder: Path) -> int:
    return (
        sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
    )


def run(folder: Path, work: Path, cache: Path, name: str, inline: bool) -> dict[str, Any]:
    """The command in a fresh process and database; its time, memory and what it measured."""
    from tinytune.db import TWIN_OF, open_store

    db = work / f"{name}.db"
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    command = [
        "tinytune", "search", "--dataset", f"imagefolder:{folder}", "--storage", url,
        "--study", "big",
    ] + (["--inline"] if inline else [])  # fmt: skip
    env = {**os.environ, "TINYTUNE_CACHE": str(cache)}
    log = work / f"{name}.log"
    began = datetime.datetime.now()  # Optuna's clock: a trial's completion, local and naive
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak memory
    wall = time.perf_counter() - started
    output = log.read_text(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stdout.write(output)
        raise SystemExit(f"the {name} run failed (exit {os.waitstatus_to_exitcode(status)})")
    peak = usage.ru_maxrss * 1024
    with open_store(url) as store:
        evaluations = store.evaluations("big", fidelity="measured")
    # the fine-tunes, not their schedule twins (the same fine-tune at other patch counts)
    measured = [e for e in evaluations if TWIN_OF not in (e.details or {})]
    import optuna

    study = optuna.load_study(study_name="big", storage=url)
    ended = [t.datetime_complete for t in study.trials if t.state.name == "COMPLETE"]
    grid = study.user_attrs.get("lr_calibration") or {}
    fine_tunes = sum(len(entry["tried"]) for entry in grid.values())
    fraction = min((float(e.get("train_fraction", 1.0)) for e in grid.values()), default=1.0)
    return {
        "run": name,
        "wall_s": wall,
        "first_s": (min(ended) - began).total_seconds() if ended else None,
        "left_out": [line for line in output.splitlines() if line.startswith("not measured:")],
        "peak_rss": peak,
        "measured": len(measured),
        "ok": sum(e.status == "ok" for e in measured),
        "grid": fine_tunes,
        "grid_fraction": fraction,
        "best_val": max((e.val_accuracy or 0.0 for e in measured), default=0.0),
        "decoded_bytes": _bytes(cache / "decoded"),
        "prefix_bytes": _bytes(cache / "prefixes"),
        "output": output.splitlines()[-40:],
    }


def table(record: dict[str, Any]) -> str:
    rows = []
    for r in record["runs"]:
        grid = f"{r['grid']}" + (
            f" on {100 * r['grid_fraction']:.0f} % of the training images"
            if r["grid_fraction"] < 1.0
            else ""
        )
        first = r.get("first_s")
        rows.append(
            [
                r["run"],
                f"{r['wall_s'] / 60:.1f} min",
                "none" if first is None else f"{first / 60:.1f} min",
                f"{r['peak_rss'] / 2**30:.2f} GiB",
                f"{r['measured']} ({r['ok']} ok)",
                str(len(r.get("left_out", []))),
                grid,
                f"{r['decoded_bytes'] / 1e9:.2f} GB",
                f"{r['prefix_bytes'] / 1e9:.2f} GB",
            ]
        )
    heads = [
        "run",
        "wall time",
        "first point",
        "peak memory",
        "measured fine-tunes",
        "left out for time",
        "grid fine-tunes",
        "decoded cache",
        "prefix cache",
    ]
    left = record["runs"][0].get("left_out", [])
    return (
        markdown_table(heads, rows)
        + f"\n\nMeasured on {record['machine']}: {record['images']:,} images of "
        f"{record['side']} px, `tinytune search --dataset imagefolder:FOLDER"
        f"{' --inline' if record.get('inline') else ''}` in a fresh database each "
        "time"
        + ("." if record.get("inline") else ", on the local Ray cluster's 2 workers.")
        + ("\n\n" + "\n".join(f"    {line}" for line in left) if left else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--side", type=int, default=96)
    parser.add_argument("--inline", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tinytune-big-folder"))
    add_arguments(parser, json=True, from_json="one", write="one")
    args = parser.parse_args()
    if args.from_json is not None:
        record = read_json(args.from_json)
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        folder = write_folder(
            args.workdir / f"images-{args.images}-{args.side}", args.images, args.side
        )
        cache = args.workdir / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        runs = [
            run(folder, args.workdir, cache, name, args.inline)
            for name in ("cold cache", "warm cache")
        ]
        record = {
            "images": args.images,
            "side": args.side,
            "inline": args.inline,
            "machine": machine(),
            "runs": runs,
        }
        if args.json is not None:
            write_json(args.json, record)
    text = table(record)
    print(text)
    if args.write is not None:
        write_section(args.write, "big-folder", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
