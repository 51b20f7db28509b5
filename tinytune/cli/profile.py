"""``tinytune profile``: measure this machine's training steps for a latency profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytune.spaces import DEFAULT_SUPERNET

__all__ = ["profile"]


_Out = Annotated[Path, typer.Option("--out", "-o", help="Measurement file to write.")]
_Candidates = Annotated[
    int,
    typer.Option(
        help="Candidates to sample and measure; the default is what a host calibration "
        "that meets the accuracy a profile needs takes (docs/calibration.md)."
    ),
]
_Supernet = Annotated[str, typer.Option(help="ofa-proxyless-w<width> or ofa-mbv3-w<width>.")]
_BatchSize = Annotated[int, typer.Option(help="Training batch size.")]
_Rounds = Annotated[
    int,
    typer.Option(
        help="Interleaved timing rounds; each network's figure is its fastest step. Many "
        "rounds of one step agree between runs better than fewer of several "
        "(docs/calibration.md)."
    ),
]
_Repeats = Annotated[int, typer.Option(help="Steps per network per round.")]
_Threads = Annotated[int, typer.Option(help="torch intra-op threads.")]
_PerOp = Annotated[bool, typer.Option(help="Also time every op's forward and backward pass.")]
_Seed = Annotated[int, typer.Option(help="Seed of the candidate sampler.")]


def profile(
    out: _Out = Path("host-latency.json"),
    candidates: _Candidates = 40,
    supernet: _Supernet = DEFAULT_SUPERNET,
    batch_size: _BatchSize = 1,
    rounds: _Rounds = 21,
    repeats: _Repeats = 1,
    threads: _Threads = 1,
    per_op: _PerOp = True,
    seed: _Seed = 0,
) -> None:
    """Measure training steps of sampled candidates on this machine (interleaved rounds; the
    fastest repeat and the median) and write a measurement file for 'tinytune calibrate'.
    Says first how long it will take."""
    import os
    import time

    from tinytune.cli.common import console, json_path, quiet_logs
    from tinytune.errors import ConfigError
    from tinytune.hwmodels.measurements import FORMAT
    from tinytune.spaces import get_supernet
    from tinytune.units import check_seed

    quiet_logs()
    json_path(  # before any timing
        out, "--out", "measurement file", lambda data: data.get("format") == FORMAT
    )
    # upper bounds: a profile is of on-device training steps (batch 1 to a few), and a
    # calibration needs tens of networks; beyond these a run only exhausts memory or time
    for name, value, high in (
        ("--candidates", candidates, 10_000),
        ("--batch-size", batch_size, 256),
        ("--rounds", rounds, 1_000),
        ("--repeats", repeats, 1_000),
    ):
        if not 1 <= value <= high:
            raise ConfigError(f"{name} must lie in [1, {high}], got {value}")
    if threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {threads}")
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ConfigError(
            f"--threads {threads} exceeds this machine's {cores} cores; the timings would "
            "measure the threads' contention, not the network"
        )
    check_seed(seed)
    spec = get_supernet(supernet)
    import torch

    from tinytune.evaluators.profile import profile_host
    from tinytune.hwmodels.measurements import save_measurements

    torch.set_num_threads(threads)
    started = time.monotonic()
    file = profile_host(
        spec,
        candidates,
        batch_size=batch_size,
        seed=seed,
        rounds=rounds,
        repeats=repeats,
        per_op=per_op,
        progress=console.print,
    )
    save_measurements(out, file)
    steps = sorted(m.train_step_s for m in file.measurements)
    console.print(
        f"measured {len(steps)} networks in {time.monotonic() - started:.0f} s: training step "
        f"{1000 * steps[0]:.1f}–"
        f"{1000 * steps[-1]:.1f} ms (median {1000 * steps[len(steps) // 2]:.1f} ms); wrote {out}"
    )
