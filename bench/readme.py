"""What a new user gets from the README's first command, measured fresh and written into the
README: the picture of the front and the table beside it.

It runs ``tinytune search`` as the README tells a new user to, in an empty temporary folder with
an empty ``TINYTUNE_CACHE`` (the default supernet's checkpoint ships inside the package, so an
empty cache pre-trains nothing), with the wall clock around it; then ``tinytune pareto --plot``
on the study it stored, which draws the front into ``docs/front.png``; then reads the study back
(``tinytune.load``) and writes a short table between ``<!-- fresh-run:begin -->`` and
``<!-- fresh-run:end -->`` of ``README.md``: the machine (cores and CPU model) and the wall
time, then every point of the front (scheme, validation and test accuracy, predicted peak
training SRAM and step latency, and each against full fine-tuning, the study's reference). The
time is this machine's: the line says its cores, CPU and load average as the search started and
ended, since other work beside the search slows it down.

    python3 -m bench.readme [--readme README.md] [--plot docs/front.png] [--json docs/front.json]
    python3 -m bench.readme --from-json docs/front.json   # the block again, from the kept figures

Both commands run with the ``tinytune`` of this checkout (its folder first on
``PYTHONPATH``). The search took 1 min 7 s to 2 min 24 s on two cores in the runs of
``docs/bench/archive/first-run.md``; beside other work it takes longer (runs of this script on
an Intel Xeon of two cores: 2 min 4 s at a load average of 1.7, 4 min 32 s to 6 min 1 s at 5.1
to 6.6).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.harness import (
    ROOT,
    add_arguments,
    cpu_model,
    head,
    read_json,
    row,
    with_root,
    write_json,
)
from bench.markers import write_section

README = ROOT / "README.md"
PLOT = ROOT / "docs" / "front.png"
FIGURES = ROOT / "docs" / "front.json"  # the run's figures, from which the block is written
BLOCK = "fresh-run"
# what each update scheme of a front trains (the presets of ``tinytune.spaces`` and ``joint``)
SCHEMES = {
    "full": "full fine-tuning",
    "last": "the classifier only",
    "bias-only": "biases and the classifier",
    "bn+last": "BatchNorm and the classifier",
    "tinytl": "lite residuals and biases (TinyTL)",
    "mcunetv3": "sparse update (MCUNetV3)",
    "joint": "a searched joint scheme",
}


def _tinytune(args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> str:
    """``tinytune ARGS`` with this checkout's package; its output, or a ``SystemExit`` with it."""
    command = [sys.executable, "-m", "tinytune.cli.main", *args]
    done = subprocess.run(command, cwd=cwd, env=dict(env), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tinytune {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _point(p: Any, patches: int = 1) -> dict[str, Any]:
    return {
        "scheme": p.scheme,
        "patches": patches,
        "val": p.val_accuracy,
        "test": p.test_accuracy,
        "memory_bytes": p.memory_bytes,
        "latency_s": p.latency_s,
        "key": p.candidate_key,
    }


def read_study(storage: str) -> dict[str, Any]:
    """The front, the reference and the search's settings of the only study in ``storage``."""
    from tinytune import load

    view = load(storage=storage)
    if view.reference is None:
        raise SystemExit(f"{storage}: the study has no measured reference")
    # the patches per side its frozen prefix runs in (a schedule twin differs in them alone)
    patches = {p.candidate_key: view.candidate(p.candidate_key).candidate for p in view.front}
    return {
        "front": [_point(p, patches[p.candidate_key].schedule.patches) for p in view.front],
        "reference": _point(view.reference),
        "hypervolume": view.hypervolume,
        "device": view.space.device,
        "dataset": view.space.dataset,
        "supernet": view.space.supernet,
    }


def run(plot: Path) -> dict[str, Any]:
    """``tinytune search`` fresh (timed), then ``tinytune pareto --plot PLOT``; the figures."""
    env = with_root()
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as cache:
        env["TINYTUNE_CACHE"] = cache
        work = Path(folder)
        loads = [_load()]
        start = time.perf_counter()
        _tinytune(["search"], work, env)
        wall = time.perf_counter() - start
        loads.append(_load())
        storage = f"sqlite:///{work / 'tinytune.db'}"
        drawn = work / "front.png"
        _tinytune(["pareto", "--storage", storage, "--plot", str(drawn)], work, env)
        plot.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(drawn, plot)
        figures = read_study(storage)
    return {
        "wall_s": wall,
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "load": None if None in loads else loads,
        **figures,
    }


def _load() -> float | None:
    """The machine's load average over the last minute (None where the system has none): how
    much else ran beside the search, which the wall time depends on."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f} %" if x is not None else "–"


def table(r: Mapping[str, Any]) -> str:
    """The README's block: one line on the run, then the front (by peak SRAM) and the reference
    (full fine-tuning), each against the reference."""
    ref = r["reference"]
    points = sorted(r["front"], key=lambda p: (p["memory_bytes"], -p["val"]))
    on_front = any(p["key"] == ref["key"] for p in points)
    rows = [*points] if on_front else [*points, ref]
    device = r.get("device") or "the default device"
    load = r.get("load")
    busy = (
        f"; load average {load[0]:.1f} as it started and {load[1]:.1f} as it ended"
        if load is not None
        else ""
    )
    lines = [
        f"`tinytune search` in an empty folder with an empty cache took "
        f"**{_minutes(r['wall_s'])}** on this machine ({r['cores']} cores, {r['cpu']}{busy}). "
        f"Its front has {len(points)} points, chosen on validation accuracy:",
        "",
        head(
            [
                "update scheme",
                "validation / test accuracy",
                "test vs full fine-tuning",
                "training SRAM",
                f"training step on `{device}` (predicted)",
            ]
        ),
    ]
    for p in rows:
        if p["key"] == ref["key"]:
            off = "" if on_front else ", off the front"
            name = f"full fine-tuning (the reference{off})"
            versus, sram = "–", f"{p['memory_bytes'] / 1024:.1f} KB"
        else:
            name = (
                f"`{p['scheme']}`: {SCHEMES[p['scheme']]}"
                if p["scheme"] in SCHEMES
                else (f"`{p['scheme']}`")
            )
            n = p.get("patches", 1)
            name += f", its frozen layers in {n} × {n} patches" if n > 1 else ""
            versus = (
                f"{100 * (p['test'] - ref['test']):+.1f} pp"
                if p["test"] is not None and ref["test"] is not None
                else "–"
            )
            sram = (
                f"{p['memory_bytes'] / 1024:.1f} KB "
                f"({ref['memory_bytes'] / p['memory_bytes']:.1f}× less)"
            )
        step = f"{1000 * p['latency_s']:.0f} ms" if p["latency_s"] is not None else "–"
        lines.append(row([name, f"{_pct(p['val'])} / {_pct(p['test'])}", versus, sram, step]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=README, help="the file to write into")
    parser.add_argument("--plot", type=Path, default=PLOT, help="where the front's PNG goes")
    add_arguments(
        parser,
        json=FIGURES,
        from_json="one",
        help={
            "json": "where the run's figures are kept",
            "from_json": "write an earlier run's figures",
        },
    )
    args = parser.parse_args(argv)
    if args.from_json:
        figures = read_json(args.from_json)
    else:
        figures = run(args.plot)
        write_json(args.json, figures)
        print(f"wrote {args.plot} and {args.json}")
    text = table(figures)
    print(text)
    write_section(args.readme, BLOCK, text)
    print(f"wrote the {BLOCK} block of {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
