"""``tinytune devices``: the devices a search can target, and their engines' profiles."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["devices"]


def devices(
    storage: Annotated[
        str, typer.Option(help="Database whose calibrations override the built-in profiles.")
    ] = DEFAULT_STORAGE,
) -> None:
    """List the devices and their engines: SRAM, flash, clock, calibration source and error
    (the default engine of each device first)."""
    from rich import box
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
    table = Table(title="devices", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    left = ("device", "engine", "core")
    # (how many measurements a profile was fitted on: its source's line below the table)
    for col in (*left, "clock", "SRAM", "flash", "dtype", "error"):
        # a name --device takes, and every number, whole; the core's description may wrap
        table.add_column(
            col,
            justify="left" if col in left else "right",
            no_wrap=col != "core",
            min_width=10 if col == "core" else None,
        )
    sources = []
    try:
        for name, engine in [(n, e) for n in device_names() for e in _engines(n, store)]:
            calibration = None if store is None else store.latest_device_calibration(name, engine)
            p = get_device(name, calibration, engine)
            if p.loo_within_10 is not None and p.loo_median_error is not None:
                err = f"{p.loo_median_error:.0%}·{p.loo_within_10:.0%}"
            else:
                err = "-"
            forced = calibration is not None and calibration.forced
            table.add_row(
                name,
                engine,
                p.core,
                f"{p.clock_hz / 1e6:.0f} MHz",
                size_text(p.sram_bytes),
                size_text(p.flash_bytes),
                p.precision,
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
        "error: median |relative error| · share within ±10 %, leave-one-out over published "
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
    from tinytune.hwmodels.profile import unnamed_engine
    from tinytune.hwmodels.registry import device_engines

    engines = device_engines(name)
    for record in [] if store is None else store.calibrations(name):
        engine = record.profile.get("engine", unnamed_engine(name))
        if engine not in engines:
            engines.append(engine)
    return engines
