"""``tinytune profile``, ``calibrate`` and ``devices``: the devices' latency profiles."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from tinytune.cli.common import DEFAULT_STORAGE
from tinytune.spaces import DEFAULT_SUPERNET

__all__ = ["calibrate", "devices", "profile"]


def profile(
    out: Annotated[Path, typer.Option("--out", "-o", help="Measurement file to write.")] = Path(
        "host-latency.json"
    ),
    candidates: Annotated[
        int,
        typer.Option(
            help="Candidates to sample and measure; the default is what a host calibration "
            "that meets the accuracy a profile needs takes (docs/calibration.md)."
        ),
    ] = 40,
    supernet: Annotated[
        str, typer.Option(help="ofa-proxyless-w<width> or ofa-mbv3-w<width>.")
    ] = DEFAULT_SUPERNET,
    batch_size: Annotated[int, typer.Option(help="Training batch size.")] = 1,
    rounds: Annotated[
        int,
        typer.Option(
            help="Interleaved timing rounds; each network's figure is its fastest step. Many "
            "rounds of one step agree between runs better than fewer of several "
            "(docs/calibration.md)."
        ),
    ] = 21,
    repeats: Annotated[int, typer.Option(help="Steps per network per round.")] = 1,
    threads: Annotated[int, typer.Option(help="torch intra-op threads.")] = 1,
    per_op: Annotated[
        bool, typer.Option(help="Also time every op's forward and backward pass.")
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the candidate sampler.")] = 0,
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


def calibrate(
    files: Annotated[list[Path], typer.Argument(help="Measurement files of the device.")],
    device: Annotated[str, typer.Option(help="Device the measurements were taken on.")],
    held_out: Annotated[
        str,
        typer.Option(
            metavar="NUMBER",
            help="Held-out networks: a count (a whole number >= 1) or a fraction (< 1).",
        ),
    ] = "0.25",
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database that keeps calibrations.")
    ] = DEFAULT_STORAGE,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Profile file to write (default calibration-DEVICE.json)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Store a fit whose held-out error misses the accuracy a profile needs, "
            "marked as forced.",
        ),
    ] = False,
    median_error: Annotated[
        str | None,
        typer.Option(
            metavar="SHARE",
            help="The accuracy a profile of this device needs: the largest median |error| "
            "of its held-out networks, as a percentage (15%) or a fraction (0.15); default 10%.",
        ),
    ] = None,
    max_error: Annotated[
        str | None,
        typer.Option(
            metavar="SHARE",
            help="The largest |error| of any one held-out network a profile of this device "
            "may have; default 25%.",
        ),
    ] = None,
) -> None:
    """Fit a device's latency profile from measurement files (non-negative least squares, in
    the form that cross-validation over whole networks chooses), report the fit and held-out
    error, and store it in the database and as a file. A fit whose held-out error misses the
    accuracy a profile needs (median within ±10 %, every network within ±25 %, checked on at
    least 12 networks) is refused and says how many more networks to measure, unless --force
    stores it marked as forced. A fit
    that fails, or a file that cannot be written, stores nothing and keeps the previous
    calibration. --median-error and --max-error state another accuracy for this device (a
    board timed on a noisier clock); the profile records the accuracy it was held to."""
    from tinytune.cli.common import console, json_path, quiet_logs
    from tinytune.db import open_store
    from tinytune.db.engine import mask_url
    from tinytune.errors import ConfigError, StorageError
    from tinytune.hwmodels.devices import unnamed_engine
    from tinytune.hwmodels.fitting import calibrate as fit
    from tinytune.hwmodels.measurements import load_measurements, staged_json
    from tinytune.hwmodels.registry import device_engines, get_device

    quiet_logs()
    held = _held_out(held_out)
    required = _required(median_error, max_error)
    path = json_path(  # before the fit: a refused path stores nothing
        out or Path(f"calibration-{device}.json"),
        "--out",
        "calibration profile",
        lambda data: {"profile", "fit"} <= set(data),
        inputs=files,
        storage=storage,
    )
    loaded = [load_measurements(f) for f in files]
    engines = {f.engine or unnamed_engine(device) for f in loaded}
    engine = engines.pop() if len(engines) == 1 else None  # several: the fit refuses them
    # the device's facts, from its built-in profile of the files' engine where there is one
    base = get_device(device, engine=engine if engine in device_engines(device) else None)
    result = fit(loaded, base, held_out=held, required=required)
    forced = result.shortfall is not None
    if forced and not force:
        raise ConfigError(
            f"{device}: {result.shortfall}; not stored: {_measure_more(result)} and calibrate "
            "again, or store it marked as forced with --force"
        )
    # the mark travels with the profile: in the database, in the file and in every device list
    profile = dataclasses.replace(result.profile, forced=forced).to_dict()
    fit_record = {**result.fit, "forced": forced}
    # where an error comes from: the staged file, the database, the rename, the commit that
    # follows it, or none of them ("done"). The file is written aside first and renamed into
    # place inside the database's transaction, before its commit: a file that cannot be
    # written or renamed stores nothing, a refused store leaves the previous file.
    stage = "file"
    try:
        with staged_json(path, {"profile": profile, "fit": fit_record}) as place:

            def place_file(_: int) -> None:
                nonlocal stage
                stage = "rename"
                place()
                stage = "commit"

            stage = "database"
            with open_store(storage) as store:
                calibration_id = store.add_calibration(
                    device, profile, fit_record, before_commit=place_file, forced=forced
                )
            stage = "done"
    except OSError as e:
        reason = e.strerror or e
        if stage in ("database", "commit"):  # the store's side, not the profile file
            name = f" ({str(e.filename)!r})" if e.filename is not None else ""
            kept = (
                f"{str(path)!r} was left as it was"
                if stage == "database"
                else f"{str(path)!r} holds the new calibration, the database may not"
            )
            raise ConfigError(
                f"the database {mask_url(storage)}{name} cannot be used ({reason}); nothing "
                f"was stored in it and {kept}"
            ) from e
        raise ConfigError(
            f"--out {str(path)!r} cannot be written ({reason}); nothing was stored"
        ) from e
    except StorageError as e:
        if stage == "commit":  # the file is in place: say so, beside the store's reason
            raise StorageError(
                f"{e}; {str(path)!r} holds the new calibration, the database may not"
            ) from e
        raise
    f, c, h = (result.fit[k] for k in ("fit", "cross_validated", "held_out"))
    console.print(
        f"{device}: fitted on {f['n']} networks ({result.fit['n_rows']} rows): "
        f"{f['within_10']:.0%} within ±10 %, median |error| {100 * f['median_abs_error']:.1f} %"
    )
    console.print(
        f"form chosen by cross-validation over whole networks: {result.fit['form_text']}"
    )
    console.print(
        f"cross-validated on {c['n']} networks: {c['within_10']:.0%} within ±10 %, median "
        f"|error| {100 * c['median_abs_error']:.1f} %, max {100 * c['max_abs_error']:.1f} %"
    )
    if h["n"]:
        console.print(
            f"held out {h['n']} networks: {h['within_10']:.0%} within ±10 %, median |error| "
            f"{100 * h['median_abs_error']:.1f} %, max {100 * h['max_abs_error']:.1f} %"
        )
    if median_error is not None or max_error is not None:
        console.print(f"held to this device's accuracy: {required.describe()}")
    if forced:
        console.print(
            f"[bold red]FORCED[/]: {result.shortfall}; stored marked as forced: "
            f"{_measure_more(result)} for a profile that meets it",
            markup=True,
        )
    console.print(f"stored as calibration {calibration_id} in {mask_url(storage)} and in {path}")


def _measure_more(result: Any) -> str:
    """What to measure for a fit that meets the accuracy: the networks to add, and for the
    host's PyTorch engine the command that measures them all in one run."""
    more, measured = result.more_networks, result.fit["n_fit"] + result.fit["n_held_out"]
    if result.fit["engine"] == "pytorch":
        return (
            f"measure at least {more} more networks (tinytune profile --candidates "
            f"{measured + more} measures {measured + more} in one run)"
        )
    return f"measure at least {more} more networks"


def _required(median: str | None, worst: str | None) -> Any:
    """The accuracy a calibration is held to: :data:`~tinytune.hwmodels.fitting.REQUIRED_ACCURACY`
    with what ``--median-error`` and ``--max-error`` give instead.

    Raises:
        ConfigError: a share that is not a percentage or fraction in (0, 10], quoted as given,
            or a median above the largest error.
    """
    from tinytune.hwmodels.fitting import REQUIRED_ACCURACY, Accuracy

    given = {
        "median": _share(median, "--median-error") if median is not None else None,
        "worst": _share(worst, "--max-error") if worst is not None else None,
    }
    required = Accuracy(
        **{k: v if v is not None else getattr(REQUIRED_ACCURACY, k) for k, v in given.items()}
    )
    if required.median > required.worst:
        from tinytune.errors import ConfigError

        raise ConfigError(
            f"--median-error {required.median:.0%} exceeds --max-error {required.worst:.0%}: a "
            "median error cannot be larger than the largest"
        )
    return required


def _share(text: str, flag: str) -> float:
    """A share of a step: ``15%`` or ``0.15``, above 0 and at most 10 (1000 %)."""
    import math

    from tinytune.errors import ConfigError

    stripped = text.strip()
    try:
        value = float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and 0 < value <= 10:
        return value
    shown = text if len(text) <= 24 else text[:23] + "…"
    raise ConfigError(
        f"{flag} must be a percentage (15%) or a fraction (0.15) above 0 and at most 1000%, "
        f"got {shown}"
    )


def _held_out(text: str) -> float:
    """``--held-out`` as a number: a count (a whole number >= 1, in digits) or a fraction
    (0 to 1).

    Raises:
        ConfigError: anything else, quoted as given.
    """
    import math

    from tinytune.errors import ConfigError

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    count = text.strip().isascii() and text.strip().isdigit()  # not 1.5, 1e308 nor '٣'
    if math.isfinite(value) and value >= 0 and (value < 1 or count):
        return value
    given = text if len(text) <= 24 else text[:23] + "…"
    raise ConfigError(
        f"--held-out must be a count (>= 1) or a fraction (0 to 1), got {given}"
        + ("; a count is a whole number, in digits" if 1 <= value < math.inf else "")
    )


def devices(
    storage: Annotated[
        str, typer.Option(help="Database whose calibrations override the built-in profiles.")
    ] = DEFAULT_STORAGE,
) -> None:
    """List the devices and their engines: SRAM, flash, clock, calibration source and error
    (the default engine of each device first)."""
    from rich.table import Table
    from rich.text import Text

    from tinytune.cli.common import console, quiet_logs, size_text
    from tinytune.db import open_store
    from tinytune.db.engine import holds_tinytune_tables, mask_url
    from tinytune.hwmodels.registry import device_names, get_device

    quiet_logs()
    # read only: a database without tinytune's tables (none yet, another program's) is left
    # as it is, and the built-in profiles are listed
    store = open_store(storage) if holds_tinytune_tables(storage) else None
    table = Table(title="devices")
    left = ("device", "engine", "core")
    for col in (*left, "clock", "SRAM", "flash", "format", "points", "error"):
        table.add_column(col, justify="left" if col in left else "right")
    sources = []
    try:
        for name, engine in [(n, e) for n in device_names() for e in _engines(n, store)]:
            calibration = None if store is None else store.latest_device_calibration(name, engine)
            p = get_device(name, calibration, engine)
            if p.loo_within_10 is not None and p.loo_median_error is not None:
                err = f"{p.loo_median_error:.0%}, {p.loo_within_10:.0%} in ±10%"
            else:
                err = "-"
            forced = calibration is not None and calibration.forced
            table.add_row(
                name,
                engine,
                p.core if len(p.core) <= 24 else p.core[:23] + "…",
                f"{p.clock_hz / 1e6:.0f} MHz",
                size_text(p.sram_bytes),
                size_text(p.flash_bytes),
                p.precision,
                str(len(p.calibration)),
                Text(f"{err} FORCED", style="bold red") if forced else err,
            )
            stored = ""
            if calibration is not None:
                mark = ", FORCED: held-out error above the accuracy required" * forced
                stored = f" (stored calibration #{calibration.id}{mark})"
            sources.append(Text.assemble((name, "bold"), f" ({engine}){stored}: {p.source}"))
    finally:
        if store is not None:
            store.close()
    console.print(table)
    console.print(
        "error: median |relative error| and share within ±10 %, leave-one-out over published "
        "measurements (published engine) or on held-out networks (bundle engine, calibrated); "
        "FORCED: a calibration stored with --force although that error misses the accuracy a "
        "profile needs."
    )
    for line in sources:
        console.print(line)
    if store is None:
        console.print(
            f"no calibrations: {mask_url(storage)} holds no tinytune tables (no database there "
            "yet, or another program's), so these are the built-in profiles"
        )


def _engines(name: str, store: Any) -> list[str]:
    """The built-in engines of device ``name``, then those only a stored calibration has."""
    from tinytune.hwmodels.devices import unnamed_engine
    from tinytune.hwmodels.registry import device_engines

    engines = device_engines(name)
    for record in [] if store is None else store.calibrations(name):
        engine = record.profile.get("engine", unnamed_engine(name))
        if engine not in engines:
            engines.append(engine)
    return engines
