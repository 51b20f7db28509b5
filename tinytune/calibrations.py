"""Calibrating a device's latency profile from measurement files (``tinytune calibrate`` and
:func:`calibrate`): the fit, the accuracy it is held to, and its store.

The fit (:func:`tinytune.hwmodels.fitting.fit_latency`) is stored in two places at once: the
profile file, written aside and renamed into place inside the database's transaction before its
commit, and the database. A fit that fails, a file that cannot be written or renamed, or a
refused store stores nothing and keeps the previous calibration; a fit whose held-out error
misses the accuracy a profile needs is refused unless ``force`` stores it marked as forced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytune.options import DEFAULT_STORAGE, CountOrFraction, File, Share

__all__ = ["Calibrated", "calibrate", "measure_more"]


@dataclass(frozen=True)
class Calibrated:
    """A stored calibration.

    Attributes:
        device: the device it calibrates.
        calibration_id: its id in the database.
        path: the profile file written.
        forced: stored although its held-out error missed the accuracy (``force``).
        result: the fit (:class:`tinytune.hwmodels.fitting.CalibrationResult`).
        required: the accuracy it was held to (:class:`tinytune.hwmodels.fitting.Accuracy`).
    """

    device: str
    calibration_id: int
    path: Path
    forced: bool
    result: Any
    required: Any


def required_accuracy(median_error: str | float | None, max_error: str | float | None) -> Any:
    """The accuracy a calibration is held to: :data:`~tinytune.hwmodels.fitting.REQUIRED_ACCURACY`
    with ``median_error`` and ``max_error`` (shares: ``15%`` or ``0.15``) instead.

    Raises:
        OptionError: a share that is not a percentage or fraction in (0, 10] (naming it).
        ConfigError: a median above the largest error.
    """
    from tinytune.errors import ConfigError, flag
    from tinytune.hwmodels.fitting import REQUIRED_ACCURACY, Accuracy

    share = Share()
    given = {
        "median": None if median_error is None else share.parse("median_error", median_error),
        "worst": None if max_error is None else share.parse("max_error", max_error),
    }
    required = Accuracy(
        **{k: v if v is not None else getattr(REQUIRED_ACCURACY, k) for k, v in given.items()}
    )
    if required.median > required.worst:
        raise ConfigError(
            flag("median_error")
            + f" {required.median:.0%} exceeds "
            + flag("max_error")
            + f" {required.worst:.0%}: a median error cannot be larger than the largest"
        )
    return required


def measure_more(result: Any) -> str:
    """What to measure for a fit that meets the accuracy: the networks to add, and for the
    host's PyTorch engine the command that measures them all in one run."""
    more, measured = result.more_networks, result.fit["n_fit"] + result.fit["n_held_out"]
    if result.fit["engine"] == "pytorch":
        return (
            f"measure at least {more} more networks (tinytune profile --candidates "
            f"{measured + more} measures {measured + more} in one run)"
        )
    return f"measure at least {more} more networks"


def calibrate(
    files: Sequence[str | Path],
    device: str,
    *,
    held_out: str | float = 0.25,
    storage: str = DEFAULT_STORAGE,
    out: str | Path | None = None,
    force: bool = False,
    median_error: str | float | None = None,
    max_error: str | float | None = None,
) -> Calibrated:
    """Fit ``device``'s latency profile from measurement ``files`` and store it in ``storage``
    and in ``out`` (default ``calibration-DEVICE.json``), both or neither.

    ``held_out`` is a count of networks (>= 1) or a fraction of them (< 1) held out of the fit.
    A fit whose held-out error misses the accuracy a profile needs (by default median within
    ±10 %, every network within ±25 %, checked on at least 12 networks; ``median_error`` and
    ``max_error`` state another for this device) is refused, saying how many more networks to
    measure, unless ``force`` stores it marked as forced.

    Raises:
        TinyTuneError: bad input, a refused fit, a file or database that cannot be written
            (one line, naming it; nothing stored, the previous calibration kept).
    """
    from tinytune.errors import ConfigError, flag
    from tinytune.hwmodels.fitting import fit_latency
    from tinytune.hwmodels.measurements import load_measurements
    from tinytune.hwmodels.profile import unnamed_engine
    from tinytune.hwmodels.registry import device_engines, get_device
    from tinytune.outfiles import json_path

    held = CountOrFraction().parse("held_out", held_out)
    required = required_accuracy(median_error, max_error)
    path = json_path(  # before the fit: a refused path stores nothing
        File().parse("out", out) if out is not None else Path(f"calibration-{device}.json"),
        flag("out"),
        "calibration profile",
        lambda data: {"profile", "fit"} <= set(data),
        inputs=[File().parse("files", f) for f in files],
        storage=storage,
    )
    loaded = [load_measurements(Path(f)) for f in files]
    engines = {f.engine or unnamed_engine(device) for f in loaded}
    engine = engines.pop() if len(engines) == 1 else None  # several: the fit refuses them
    # the device's facts, from its built-in profile of the files' engine where there is one
    base = get_device(device, engine=engine if engine in device_engines(device) else None)
    result = fit_latency(loaded, base, held_out=held, required=required)
    forced = result.shortfall is not None
    if forced and not force:
        raise ConfigError(
            f"{device}: {result.shortfall}; not stored: {measure_more(result)} and calibrate "
            "again, or store it marked as forced with " + flag("force", True)
        )
    # the mark travels with the profile: in the database, in the file and in every device list
    profile = dataclasses.replace(result.profile, forced=forced).to_dict()
    fit_record = {**result.fit, "forced": forced}
    calibration_id = _store(path, profile, fit_record, storage, device, forced)
    return Calibrated(device, calibration_id, path, forced, result, required)


def _store(
    path: Path,
    profile: dict[str, Any],
    fit_record: dict[str, Any],
    storage: str,
    device: str,
    forced: bool,
) -> int:
    """Write the profile to ``path`` and store it in ``storage``, both or neither; the
    calibration's id in the database.

    Raises:
        TinyTuneError: the file or the database cannot be written (one line, naming it).
    """
    from tinytune.db import open_store
    from tinytune.db.engine import mask_url
    from tinytune.errors import ConfigError, StorageError, flag
    from tinytune.hwmodels.measurements import staged_json

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
            flag("out") + f" {str(path)!r} cannot be written ({reason}); nothing was stored"
        ) from e
    except StorageError as e:
        if stage == "commit":  # the file is in place: say so, beside the store's reason
            raise StorageError(
                f"{e}; {str(path)!r} holds the new calibration, the database may not"
            ) from e
        raise
    return calibration_id
