"""Bad input to ``tinytune calibrate``: measured times out of range, malformed fields, an
output file that cannot be written, a ``--held-out`` that is not a count. Each is one line on
stderr with exit status 2, and the calibrations already stored are left as they were."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.hwmodels.support import MORE_MODELS, SMALL, form_truth, predicted_file
from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.errors import StorageError
from tinytune.hwmodels import get_device
from tinytune.hwmodels.fitting import fit_latency
from tinytune.hwmodels.measurements import (
    PART_RANGE_S,
    STEP_RANGE_S,
    CalibrationError,
    MeasurementFile,
    load_measurements,
    save_measurements,
)


def _measurements() -> MeasurementFile:
    """A host's fp32 measurement file as ``tinytune profile`` writes it: the training steps a
    profile of a form the fit can choose predicts, with their samples and median."""
    file = predicted_file("fp32", MORE_MODELS, form_truth(SMALL))
    measurements = tuple(
        dataclasses.replace(
            m,
            samples=(m.train_step_s, 1.1 * m.train_step_s),
            train_step_median_s=1.05 * m.train_step_s,
        )
        for m in file.measurements
    )
    return dataclasses.replace(
        file,
        device="host",
        machine={"processor": "test"},
        measurements=measurements,
        engine="pytorch",
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("measured") / "host.json"
    save_measurements(path, _measurements())
    return json.loads(path.read_text())


@pytest.fixture
def stored(measured: dict[str, Any], tmp_path: Path) -> list[str]:
    """Arguments of a calibration into a database and a profile file that each hold one
    calibration already."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(measured))
    args = ["--device", "host", "--storage", f"sqlite:///{tmp_path / 'cal.db'}"]
    args += ["-o", str(tmp_path / "profile.json")]
    assert main(["calibrate", str(good), *args]) == 0
    return args


def _state(tmp_path: Path) -> tuple[str, bytes, list[tuple[int, dict[str, Any]]]]:
    """The database file's sha256, the profile file, and the stored calibrations."""
    db = tmp_path / "cal.db"
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    with open_store(f"sqlite:///{db}") as store:
        records = [(r.id, r.profile) for r in store.calibrations()]
    return digest, (tmp_path / "profile.json").read_bytes(), records


def _refused(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, *words: str
) -> str:
    """Run ``argv``; assert one ``tinytune: error:`` line holding ``words``, no warning, and
    the database and profile file as they were."""
    before = _state(tmp_path)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("tinytune: error: "), err
    for word in words:
        assert word in err, err
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert _state(tmp_path) == before
    assert not list(tmp_path.glob(".profile.json.*"))  # no temporary file left behind
    return err


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("step", [1e300, 1e200, 1e100, 1e30, 3601, 1e-300, 1e-10, 0, -1])
def test_a_step_time_out_of_range_is_refused(
    step: float,
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every step at 1e300 once made scipy's nnls abort the process; 1e30 was stored."""
    data = json.loads(json.dumps(measured))
    for m in data["measurements"][2:]:
        m["train_step_s"] = step
    bad = _write(tmp_path, data)
    _refused(
        ["calibrate", str(bad), *stored],
        capsys,
        tmp_path,
        f"measurement 2 of {str(bad)!r}",
        f"train_step_s {step!r} is outside 1e-09 to 3600 seconds",
    )


def test_nan_in_a_file_is_not_json(
    measured: dict[str, Any], stored: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(measured).replace('"train_step_s": ', '"train_step_s": NaN, "x": ', 1)
    )
    _refused(["calibrate", str(bad), *stored], capsys, tmp_path, "is not readable JSON", "NaN")


@pytest.mark.parametrize(
    ("where", "field", "value", "words"),
    [
        (None, "machine", "notadict", "machine 'notadict' is not a JSON object"),
        (None, "machine", [1, 2], "machine [1, 2] is not a JSON object"),
        (None, "created_at", 5, "created_at 5 is not a string"),
        (None, "device", ["host"], "device ['host'] is not a name"),
        (None, "measurements", "x", "measurements 'x' is not a JSON array"),
        (None, "notes", "x", "unknown fields ['notes']"),
        (0, "per_op_forward_s", [1, 2], "per_op_forward_s [1, 2] is not a JSON object"),
        (0, "per_op_forward_s", {"stem": "1"}, "per_op_forward_s['stem'] '1' is not a number"),
        (0, "train_step_s", "0.02", "train_step_s '0.02' is not a number of seconds"),
        (0, "train_step_s", True, "train_step_s True is not a number of seconds"),
        (0, "inference_s", [0.01], "inference_s [0.01] is not a number of seconds"),
        (0, "name", 5, "name 5 is not a non-empty string"),
        (0, "name", "", "name '' is not a non-empty string"),
        (0, "graph", "x", "graph 'x' is not a JSON object"),
        (0, "graph", {"ops": 5}, "graph is not a traced network"),
        (0, "samples", "x", "samples 'x' is not a JSON array"),
        (0, "samples", ["x"], "samples[0] 'x' is not a number of seconds"),
        (0, "per_call", {"op": "stem"}, "per_call {'op': 'stem'} is not a JSON array"),
        (0, "per_call", [{"op": "stem"}], "per_call[0] {'op': 'stem'} is not a JSON object"),
        (0, "per_call", [{"op": "stem", "kernel": "k", "s": 0}], "per_call[0].kernel 'k' is"),
        (0, "per_call", [{"op": 1, "kernel": "k", "s": 0}], "per_call[0].op 1 is not a name"),
        (0, "notes", "x", "unknown fields ['notes']"),
        # times out of their range, besides the training step's
        (1, "inference_s", 1e300, "inference_s 1e+300 is outside 1e-09 to 3600 seconds"),
        (1, "train_step_median_s", 1e-300, "train_step_median_s 1e-300 is outside 1e-09"),
        (1, "samples", [0.01, 7200], "samples[1] 7200 is outside 1e-09 to 3600 seconds"),
        (1, "frontend_s", -0.5, "frontend_s -0.5 is outside 1e-09 to 3600 seconds"),
        (0, "frontend_s", "1 ms", "frontend_s '1 ms' is not a number of seconds"),
        (1, "per_op_forward_s", {"stem": 1e300}, "per_op_forward_s['stem'] 1e+300 is outside 0"),
        (1, "per_op_forward_s", {"stem": -1e-6}, "per_op_forward_s['stem'] -1e-06 is outside 0"),
        (
            1,
            "per_call",
            [{"op": "x", "kernel": "conv2d_s8", "s": 1e200}],
            "per_call[0].s 1e+200 is outside 0 to 3600 seconds",
        ),
    ],
)
def test_a_malformed_field_is_one_line(
    where: int | None,
    field: str,
    value: Any,
    words: str,
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = json.loads(json.dumps(measured))
    (data if where is None else data["measurements"][where])[field] = value
    bad = _write(tmp_path, data)
    err = _refused(["calibrate", str(bad), *stored], capsys, tmp_path, str(bad), words)
    if where is not None:
        assert f"measurement {where} of" in err and "is malformed" in err


def test_a_missing_field_is_named(
    measured: dict[str, Any], stored: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(measured))
    del data["measurements"][3]["train_step_s"]
    bad = _write(tmp_path, data)
    _refused(["calibrate", str(bad), *stored], capsys, tmp_path, "measurement 3 of", "missing")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_that_fails_on_write_stores_nothing(
    measured: dict[str, Any], stored: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``/proc/x.json`` passes the check before the fit and fails on writing: once a
    traceback after the calibration had been stored."""
    good = _write(tmp_path, measured)
    argv = ["calibrate", str(good), *stored[:-1], "/proc/x.json"]
    _refused(
        argv, capsys, tmp_path, "--out '/proc/x.json' cannot be written", "nothing was stored"
    )


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (StorageError("the database refused it"), ["the database refused it"]),
        # an OSError of the store's (its journal on a full disk) was once worded as the
        # profile file's: "--out ... cannot be written"
        (
            OSError(errno.ENOSPC, "No space left on device", "/db/t.db-journal"),
            [
                "the database sqlite:",
                "('/db/t.db-journal') cannot be used (No space left on device)",
                "nothing was stored",
            ],
        ),
    ],
)
def test_a_refused_store_keeps_the_previous_profile_file(
    error: Exception,
    words: list[str],
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The profile file is written aside and renamed only once the database holds the
    calibration: a store that fails leaves the previous file and no temporary one, and the
    message names the store, not ``--out``."""
    from tinytune.db.store import Store

    def refuse(*_: Any, **__: Any) -> int:
        raise error

    monkeypatch.setattr(Store, "add_calibration", refuse)
    good = _write(tmp_path, measured)
    err = _refused(["calibrate", str(good), *stored], capsys, tmp_path, *words)
    assert "--out" not in err


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("1.5", "got 1.5; a count is a whole number"),
        ("1e308", "got 1e308; a count is a whole number"),
        ("2.0", "got 2.0; a count is a whole number"),
        ("abc", "got abc"),
        ("-1", "got -1"),
        ("9" * 400, "got 99999"),
    ],
)
def test_a_held_out_that_is_not_a_count_or_a_fraction_is_refused(
    value: str,
    words: str,
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = _write(tmp_path, measured)
    err = _refused(
        ["calibrate", str(good), *stored, "--held-out", value],
        capsys,
        tmp_path,
        "--held-out must be a count (>= 1) or a fraction (0 to 1)",
        words,
    )
    assert len(err) < 200, err


def test_a_valid_file_still_calibrates(
    measured: dict[str, Any], stored: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _write(tmp_path, measured)
    _, before, records = _state(tmp_path)
    capsys.readouterr()
    assert main(["calibrate", str(good), *stored, "--held-out", "1"]) == 0, capsys.readouterr()
    assert "held out 1 networks" in capsys.readouterr().out
    _, after, now = _state(tmp_path)
    assert now[: len(records)] == records and len(now) == len(records) + 1
    assert json.loads(after)["profile"] == now[-1][1] and after != before


def test_times_at_the_bounds_are_read(tmp_path: Path, measured: dict[str, Any]) -> None:
    data = json.loads(json.dumps(measured))
    m = data["measurements"][0]
    m["train_step_s"], m["inference_s"] = STEP_RANGE_S
    m["per_op_forward_s"] = {op["name"]: PART_RANGE_S[0] for op in m["graph"]["ops"]}
    m["per_call"] = [{"op": m["graph"]["ops"][0]["name"], "kernel": "conv2d_s8", "s": 3600}]
    loaded = load_measurements(_write(tmp_path, data)).measurements[0]
    assert (loaded.train_step_s, loaded.inference_s) == STEP_RANGE_S
    assert set(loaded.per_op_forward_s.values()) == {0.0}
    assert loaded.per_call[0].seconds == 3600.0


def test_an_audio_bundles_front_end_time_is_kept_and_written_back(
    tmp_path: Path, measured: dict[str, Any]
) -> None:
    """``frontend_s`` (an audio bundle's profiler: one clip's samples to the input) is read,
    kept beside the step, written back by ``save_measurements`` and absent where not given."""
    data = json.loads(json.dumps(measured))
    data["measurements"][0]["frontend_s"] = 0.0535
    loaded = load_measurements(_write(tmp_path, data))
    assert loaded.measurements[0].frontend_s == 0.0535
    assert loaded.measurements[1].frontend_s is None
    save_measurements(tmp_path / "again.json", loaded)
    again = json.loads((tmp_path / "again.json").read_text())["measurements"]
    assert again[0]["frontend_s"] == 0.0535 and "frontend_s" not in again[1]


def test_a_fractional_count_is_refused_by_the_library() -> None:
    with pytest.raises(CalibrationError, match=r"a count \(a whole number >= 1\)"):
        fit_latency([_measurements()], get_device("host"), held_out=1.5)


def test_huge_times_in_the_fit_are_an_error_not_an_abort() -> None:
    """Times far from the features' scale reach scipy's nnls as a system without columns,
    which aborts the process; run apart, so that a regression fails this test alone."""
    code = (
        "from tinytune.errors import ConfigError\n"
        "from tinytune.hwmodels.latency_fit import fit_coefficients\n"
        "from tinytune.hwmodels.reference_models import build_reference\n"
        "g = build_reference('mlperf-kws-dscnn')\n"
        "for t in (1e300, 1e200, 1e-300):\n"
        "    try:\n"
        "        fit_coefficients([g, g], [t, t])\n"
        "    except ConfigError as e:\n"
        "        print(e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("are the times in seconds?") == 3 and not run.stderr


def test_a_rename_that_fails_stores_nothing(
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The profile file is renamed into place inside the database's transaction: a rename
    that fails rolls the calibration back (it was once kept, with the file left as it was)."""
    import tinytune.hwmodels.measurements as measurements

    def refuse(src: Any, dst: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(dst))

    monkeypatch.setattr(measurements.os, "replace", refuse)
    data = json.loads(json.dumps(measured))
    data["measurements"][0]["name"] += "-again"  # another fit: a file that would differ
    good = _write(tmp_path, data)
    err = _refused(
        ["calibrate", str(good), *stored],
        capsys,
        tmp_path,
        "profile.json' cannot be written (Permission denied); nothing was stored",
    )
    assert err.startswith("tinytune: error: --out "), err


def test_a_commit_that_fails_after_the_rename_says_where_the_calibration_is(
    measured: dict[str, Any],
    stored: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one order of failures that leaves the two apart: the file is in place, the commit
    fails. The database keeps what it had, and the message says that the file holds the new
    calibration and the database may not (a connection lost during a commit cannot tell)."""
    import sqlalchemy as sa

    from tinytune.db.store import Store

    add = Store.add_calibration

    def failing_commit(
        self: Store, *args: Any, before_commit: Any = None, forced: bool = False
    ) -> int:
        def then(row: int) -> None:
            before_commit(row)
            raise sa.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))

        return add(self, *args, before_commit=then, forced=forced)

    monkeypatch.setattr(Store, "add_calibration", failing_commit)
    good = _write(tmp_path, measured)
    _, profile, records = _state(tmp_path)
    data = json.loads(good.read_text())
    data["measurements"][0]["name"] += "-again"  # another fit: another file
    good.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["calibrate", str(good), *stored]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "disk I/O error" in err, err
    assert err.rstrip().endswith("profile.json' holds the new calibration, the database may not")
    _, now_profile, now_records = _state(tmp_path)
    assert now_records == records
    assert now_profile != profile and json.loads(now_profile)["profile"]
    assert not list(tmp_path.glob(".profile.json.*"))
