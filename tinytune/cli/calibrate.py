"""``tinytune calibrate``: fit a device's latency profile from measurement files and store it
(:func:`tinytune.calibrations.calibrate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["calibrate"]


_Files = Annotated[list[Path], typer.Argument(help="Measurement files of the device.")]
_Device = Annotated[str, typer.Option(help="Device the measurements were taken on.")]
_HeldOut = Annotated[
    str,
    typer.Option(
        metavar="NUMBER",
        help="Held-out networks: a count (a whole number >= 1) or a fraction (< 1).",
    ),
]
_Storage = Annotated[
    str, typer.Option(help="SQLAlchemy URL of the database that keeps calibrations.")
]
_Out = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Profile file to write (default calibration-DEVICE.json)."),
]
_Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Store a fit whose held-out error misses the accuracy a profile needs, "
        "marked as forced.",
    ),
]
_MedianError = Annotated[
    str | None,
    typer.Option(
        metavar="SHARE",
        help="The accuracy a profile of this device needs: the largest median |error| "
        "of its held-out networks, as a percentage (15%) or a fraction (0.15); default 10%.",
    ),
]
_MaxError = Annotated[
    str | None,
    typer.Option(
        metavar="SHARE",
        help="The largest |error| of any one held-out network a profile of this device "
        "may have; default 25%.",
    ),
]


def calibrate(
    files: _Files,
    device: _Device,
    held_out: _HeldOut = "0.25",
    storage: _Storage = DEFAULT_STORAGE,
    out: _Out = None,
    force: _Force = False,
    median_error: _MedianError = None,
    max_error: _MaxError = None,
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
    from tinytune.calibrations import calibrate as fit_and_store
    from tinytune.calibrations import measure_more
    from tinytune.cli.common import console, quiet_logs
    from tinytune.db.engine import mask_url

    quiet_logs()
    done = fit_and_store(
        files,
        device,
        held_out=held_out,
        storage=storage,
        out=out,
        force=force,
        median_error=median_error,
        max_error=max_error,
    )
    result, required = done.result, done.required
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
    if done.forced:
        console.print(
            f"[bold red]FORCED[/]: {result.shortfall}; stored marked as forced: "
            f"{measure_more(result)} for a profile that meets it",
            markup=True,
        )
    console.print(
        f"stored as calibration {done.calibration_id} in {mask_url(storage)} and in {done.path}"
    )
