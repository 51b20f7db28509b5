"""``tinytune profile``, ``calibrate`` and ``devices``: files, the database, one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

import tinytune
from tests.hwmodels.support import SMALL
from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.hwmodels import get_device
from tinytune.hwmodels.measurements import load_measurements
from tinytune.hwmodels.profile import DeviceProfile


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "host.json"
    code = main(
        ["profile", "-o", str(path), "--candidates", "6", "--rounds", "1", "--repeats", "1"]
    )
    assert code == 0
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_profile_writes_a_measurement_file(measured: Path) -> None:
    file = load_measurements(measured)
    assert file.device == "host" and file.precision == "fp32"
    assert len(file.measurements) == 6
    for m in file.measurements:
        assert m.train_step_s > 0 and m.inference_s is not None and m.inference_s > 0
        assert set(m.per_op_forward_s) == {op.name for op in m.graph.ops}


def test_calibrate_stores_in_the_database_and_a_file(
    measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "host-profile.json"
    code, text, err = _run(
        [
            "calibrate",
            str(measured),
            "--device",
            "host",
            "--held-out",
            "2",
            "--storage",
            url,
            "-o",
            str(out),
            "--force",
        ],
        capsys,
    )
    assert code == 0, err
    assert "held out 2 networks" in text
    saved = json.loads(out.read_text())
    assert saved["fit"]["n_fit"] == 4 and saved["fit"]["n_held_out"] == 2
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as any file the user writes
    with open_store(url) as store:
        calibration = store.latest_device_calibration("host")
        assert calibration is not None and calibration.device == "host"
        assert get_device("host", calibration).to_dict() == saved["profile"]
        assert saved["profile"]["engine"] == "pytorch"  # what `tinytune profile` measures
        assert store.latest_device_calibration("host", "bundle") is None
        assert store.latest_device_calibration("stm32f746") is None
    cid = calibration.id
    code, text, _ = _run(["devices", "--storage", url], capsys)
    assert code == 0 and f"stored calibration #{cid}" in text and "stm32f746" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is not readable JSON"),
        ("{not json", "is not readable JSON"),
        ('{"format": "something-else"}', "is not a tinytune measurement file"),
        ('{"format": "tinytune-latency/1", "precision": "fp32", "measurements": []}', "has no"),
        (
            '{"format": "tinytune-latency/1", "precision": "fp32", '
            '"measurements": [{"name": "a", "graph": {}, "train_step_s": -1}]}',
            "measurement 0 of",
        ),
    ],
)
def test_a_bad_file_is_one_line_and_keeps_the_calibration(
    content: str,
    message: str,
    measured: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "profile.json"
    args = ["--device", "host", "--storage", url, "-o", str(out)]
    assert _run(["calibrate", str(measured), *args, "--held-out", "0", "--force"], capsys)[0] == 0
    before = out.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = _run(["calibrate", str(bad), *args], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert out.read_bytes() == before
    with open_store(url) as store:
        assert len(store.calibrations("host")) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "esp32"], "unknown device 'esp32'"),
        (["--device", "host", "--held-out", "5"], "leave 1 to fit"),
        (["--device", "host", "--held-out", "-1"], "--held-out must be a count (>= 1) or a"),
        (["--device", "host", "--held-out", "nan"], "or a fraction (0 to 1), got nan"),
        (["--device", "host", "--held-out", "inf"], "or a fraction (0 to 1), got inf"),
        (["--device", "host", "--held-out", "50"], "--held-out 50 would hold out 50 networks of"),
        (["--device", "stm32f746"], "measured on 'host', not on 'stm32f746'"),
    ],
)
def test_calibrate_refuses_bad_options(
    argv: list[str],
    message: str,
    measured: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, _, err = _run(["calibrate", str(measured), "--storage", url, *argv], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.glob("calibration-*.json"))
    assert not (tmp_path / "db.sqlite").exists()


def test_profile_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["profile", "--candidates", "0"], capsys)
    assert code == 2 and "--candidates must lie in [1, 10000], got 0" in err
    for flag, value, message in [
        ("--candidates", "1000000000", "--candidates must lie in [1, 10000]"),
        ("--batch-size", "100000", "--batch-size must lie in [1, 256], got 100000"),
        ("--rounds", "0", "--rounds must lie in [1, 1000], got 0"),
        ("--repeats", "5000", "--repeats must lie in [1, 1000]"),
        ("--threads", "0", "--threads must be >= 1, got 0"),
    ]:
        code, text, err = _run(["profile", flag, value], capsys)
        assert code == 2 and message in err and "timing" not in text, err
    code, _, err = _run(["profile", "--supernet", "resnet9000"], capsys)
    assert code == 2 and "unknown supernet" in err
    code, _, err = _run(["profile", "--seed", "-1"], capsys)
    assert code == 2 and "--seed must be an integer from 0 to 4294967295, got -1" in err


def test_a_bundle_calibration_of_a_device_without_a_built_in_bundle_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bundle profiler files of a board with no built-in bundle profile (a Raspberry Pi 4, the
    aarch64 build's profiler): the calibration is of the bundle engine, and it is what a search
    on that device then predicts with."""
    from tests.hwmodels.support import MORE_MODELS, SMALL, form_truth
    from tinytune.hwmodels import predict_latency
    from tinytune.hwmodels.measurements import Measurement, MeasurementFile, save_measurements
    from tinytune.hwmodels.reference_models import build_reference

    truth = form_truth(SMALL)  # any coefficients of a form the fit can choose will do
    models = MORE_MODELS
    files = []
    for i, model in enumerate(models):
        graph = build_reference(model)
        step = predict_latency(graph, truth, 1).train_step_s
        file = MeasurementFile(
            "rpi4",
            "int8",
            {"counter": "clock_gettime(CLOCK_MONOTONIC)"},
            "t",
            (Measurement(model, graph, step),),
            "bundle",
        )
        files.append(tmp_path / f"b{i}.json")
        save_measurements(files[-1], file)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["calibrate", *map(str, files), "--device", "rpi4", "--held-out", "1"]
    code, _, err = _run([*argv, "--storage", url, "-o", str(tmp_path / "p.json")], capsys)
    assert code == 0, err
    with open_store(url) as store:
        calibration = store.latest_device_calibration("rpi4")
    assert calibration is not None and calibration.profile.engine == "bundle"
    profile = get_device("rpi4", calibration)
    assert profile.engine == "bundle" and profile.clock_hz == 1.5e9
    assert "clock_gettime" in profile.source
    assert get_device("rpi4").engine == "published"  # the built-in default is unchanged
    code, text, _ = _run(["devices", "--storage", url], capsys)
    assert code == 0 and f"rpi4 (bundle) (stored calibration #{calibration.id})" in text


def test_an_output_that_is_not_a_profile_file_is_refused_before_the_fit(
    measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o`` naming the database, an input file, another database, a folder or a path under a
    file: one line, before the fit, so nothing is stored and no file is overwritten."""
    import shutil

    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    base = ["calibrate", str(measured), "--device", "host", "--storage", url, "--force"]
    assert _run([*base, "-o", str(tmp_path / "p.json")], capsys)[0] == 0  # a profile: replaced
    assert _run([*base, "-o", str(tmp_path / "p.json")], capsys)[0] == 0
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file.txt").write_text("notes")
    copy = tmp_path / "copy.json"
    shutil.copy(measured, copy)
    cases = [
        (db, "is the database --storage names"),
        (copy, "is one of the input files"),
        (other, "is a SQLite database, which writing would destroy"),
        (tmp_path / "a-folder", "is a folder; expected a .json file"),
        (tmp_path / "a-file.txt" / "p.json", "(not a folder)"),
        (tmp_path / "a-file.txt", "exists and is not a calibration profile"),
        (tmp_path / "package.json", "exists and is not a calibration profile"),
        (tmp_path / "more.json", "exists and is not a calibration profile"),
    ]
    (tmp_path / "package.json").write_text('{"name": "my-app"}')  # another program's
    shutil.copy(measured, tmp_path / "more.json")  # measurements, not a profile
    kept = {
        p: p.read_bytes()
        for p in (db, other, copy, tmp_path / "a-file.txt", tmp_path / "package.json")
    }
    kept[tmp_path / "more.json"] = (tmp_path / "more.json").read_bytes()
    for out, message in cases:
        argv = [*base, "-o", str(out)]
        if out == copy:
            argv = ["calibrate", str(copy), *base[2:], "-o", str(out)]
        code, _, err = _run(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    code, _, err = _run([*base, "-o", ""], capsys)
    assert code == 2 and "is a folder" in err, err
    assert {p: p.read_bytes() for p in kept} == kept
    with open_store(url) as store:
        assert len(store.calibrations("host")) == 2


def test_profile_checks_its_output_and_threads_before_timing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tinytune.db import open_store as make

    db = tmp_path / "study.db"
    with make(f"sqlite:///{db}"):
        pass
    kept = db.read_bytes()
    profile_file = tmp_path / "calibration-host.json"
    profile_file.write_text('{"profile": {}, "fit": {}}')
    for out, message in [
        (db, "is a SQLite database"),
        (tmp_path, "is a folder"),
        (tmp_path / "study.db" / "p.json", "(not a folder)"),
        (profile_file, "exists and is not a measurement file"),
    ]:
        code, text, err = _run(["profile", "-o", str(out), "--candidates", "1"], capsys)
        assert code == 2 and message in err and "timing" not in text, (text, err)
    assert db.read_bytes() == kept
    cores = os.cpu_count() or 1
    code, _, err = _run(["profile", "--threads", str(cores + 1)], capsys)
    assert code == 2 and f"exceeds this machine's {cores} cores" in err


def test_a_measurement_file_whose_device_is_not_a_name_is_refused(
    measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(measured.read_text())
    data["device"] = 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, _, err = _run(["calibrate", str(bad), "--device", "host", "--storage", url], capsys)
    assert code == 2 and "device 5 is not a name" in err, err


def test_devices_reads_a_database_without_changing_it(
    another_programs_sqlite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another program's SQLite file is listed against, not migrated; a folder is refused."""
    other = another_programs_sqlite
    kept = other.read_bytes()
    code, text, _ = _run(["devices", "--storage", f"sqlite:///{other}"], capsys)
    assert code == 0 and "stm32f746" in text
    assert "no calibrations" in " ".join(text.split())
    assert other.read_bytes() == kept
    code, _, err = _run(["devices", "--storage", f"sqlite:///{tmp_path}"], capsys)
    assert code == 2 and "is a folder" in err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"precision": "int8"}, "engine 'pytorch' trains in fp32, but the file says precision"),
        ({"engine": "bundle"}, "engine 'bundle' trains in int8, but the file says precision"),
    ],
)
def test_a_file_whose_engine_contradicts_its_precision_is_refused(
    changes: dict[str, str],
    message: str,
    measured: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = {**json.loads(measured.read_text()), **changes}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, _, err = _run(["calibrate", str(bad), "--device", "host", "--storage", url], capsys)
    assert code == 2 and message in err, err
    assert not (tmp_path / "db.sqlite").exists()


def _host_file(tmp_path: Path, noise: float) -> Path:
    """Twelve reference networks' steps as a host profile of a known form predicts them, each
    off by up to ``noise`` (a deterministic draw), written as ``tinytune profile`` would."""
    from tests.hwmodels.support import MORE_MODELS, form_truth, predicted_file
    from tinytune.hwmodels.measurements import save_measurements

    file = predicted_file("fp32", MORE_MODELS, form_truth(SMALL), "host", noise)
    path = tmp_path / f"host-{noise:g}.json"
    save_measurements(path, dataclasses.replace(file, engine="pytorch"))
    return path


def test_calibrate_stores_a_fit_that_meets_the_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "p.json"
    argv = ["calibrate", str(_host_file(tmp_path, 0.0)), "--device", "host", "--held-out", "3"]
    code, text, err = _run([*argv, "--storage", url, "-o", str(out)], capsys)
    assert code == 0, err
    text = " ".join(text.split())
    # the known form, with the eager classes a fit of PyTorch's steps adds (none needed here)
    form = dataclasses.replace(SMALL, eager=True).describe()
    assert f"form chosen by cross-validation over whole networks: {form}" in text
    assert "held out 3 networks: 100% within ±10 %" in text and "FORCED" not in text
    assert json.loads(out.read_text())["fit"]["forced"] is False
    with open_store(url) as store:
        (record,) = store.calibrations("host")
        assert not record.forced and not store.latest_device_calibration("host").forced


def test_calibrate_refuses_a_fit_short_of_the_accuracy_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Steps up to 60 % off: one line, exit 2, the networks to measure and the command, and
    nothing stored; with --force it is stored, marked in the database, the file, the
    output and the device list."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "p.json"
    argv = ["calibrate", str(_host_file(tmp_path, 0.6)), "--device", "host", "--held-out", "3"]
    argv += ["--storage", url, "-o", str(out)]
    code, text, err = _run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and not text, (text, err)
    assert err.startswith("tinytune: error: host: 12 networks measured; held-out error median")
    assert "measure at least 28 more networks (tinytune profile --candidates 40" in err
    assert "or store it marked as forced with --force" in err
    assert not out.exists() and not (tmp_path / "db.sqlite").exists()
    code, text, err = _run([*argv, "--force"], capsys)
    assert code == 0, err
    assert "FORCED: 12 networks measured; held-out error" in " ".join(text.split())
    assert json.loads(out.read_text())["fit"]["forced"] is True
    with open_store(url) as store:
        calibration = store.latest_device_calibration("host")
    assert calibration is not None and calibration.forced and "FORCED" in calibration.label
    code, text, _ = _run(["devices", "--storage", url], capsys)
    text = " ".join(text.split())
    assert code == 0 and f"(stored calibration #{calibration.id}, FORCED:" in text
    assert re.search(r"\d+%·\d+% FORCED", text)
    # the Python front door's device list carries the same mark, and the profile's dict form
    # (the profile file's, the database's) keeps it; an unforced profile's has no such key
    host = next(d for d in tinytune.devices(url) if d.name == "host")
    assert host.forced and host == calibration.profile
    assert json.loads(out.read_text())["profile"]["forced"] is True
    assert DeviceProfile.from_dict(host.to_dict()) == host
    assert "forced" not in get_device("host").to_dict()
    assert not any(d.forced for d in tinytune.devices(None))


def test_a_device_may_state_its_own_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The steps up to 60 % off that the default accuracy refuses (the test above) are stored,
    unmarked, for a device that states a looser one; the profile file records the accuracy it
    was held to."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "p.json"
    argv = ["calibrate", str(_host_file(tmp_path, 0.6)), "--device", "host", "--held-out", "3"]
    argv += ["--storage", url, "-o", str(out)]
    code, text, err = _run([*argv, "--median-error", "80%", "--max-error", "2"], capsys)
    assert code == 0, err
    text = " ".join(text.split())
    assert "held to this device's accuracy: median within ±80%, every network within ±200%" in text
    assert "FORCED" not in text
    stored = json.loads(out.read_text())["fit"]
    assert stored["required"] == {"median": 0.8, "worst": 2.0} and not stored["forced"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--median-error", "0"], "--median-error must be a percentage (15%) or a fraction"),
        (["--max-error", "-5%"], "--max-error must be a percentage"),
        (["--max-error", "ten"], "above 0 and at most 1000%, got ten"),
        (["--median-error", "nan"], "--median-error must be a percentage"),
        (["--median-error", "30%"], "--median-error 30% exceeds --max-error 25%"),
    ],
)
def test_a_bad_accuracy_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["calibrate", str(_host_file(tmp_path, 0.0)), "--device", "host", *flags]
    code, text, err = _run([*argv, "--storage", f"sqlite:///{tmp_path / 'db.sqlite'}"], capsys)
    assert code == 2 and not text and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "db.sqlite").exists()


def test_profile_says_first_how_long_it_will_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    out = tmp_path / "m.json"
    argv = ["profile", "-o", str(out), "--candidates", "2", "--rounds", "2", "--repeats", "1"]
    code, text, err = _run(argv, capsys)
    assert code == 0, err
    first, *_, last = [line for line in text.splitlines() if line.strip()]
    estimate = re.fullmatch(r"timing 2 networks, 2 interleaved rounds: about (\d+) s on this "
                            r"machine", first)  # fmt: skip
    took = re.match(r"measured 2 networks in (\d+) s: ", last)
    assert estimate is not None and took is not None, text
    # one step of each network, timed, priced every step to come: the same order as the run
    assert int(estimate[1]) <= 10 * max(1, int(took[1]))


def test_the_python_entry_point_fits_and_stores_as_the_command_does(tmp_path: Path) -> None:
    """``tinytune.calibrations.calibrate``: the same fit and two-phase store without the
    command line; its refusals name the keyword arguments as Python names them."""
    from tinytune.calibrations import calibrate
    from tinytune.errors import ConfigError, OptionError

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = tmp_path / "p.json"
    done = calibrate([_host_file(tmp_path, 0.0)], "host", held_out=3, storage=url, out=out)
    assert not done.forced and done.path == out and done.result.fit["held_out"]["n"] == 3
    assert json.loads(out.read_text())["fit"]["forced"] is False
    with open_store(url) as store:
        assert [c.id for c in store.calibrations("host")] == [done.calibration_id]
    with pytest.raises(OptionError, match=r"^held_out must be a count \(>= 1\) or a fraction"):
        calibrate([_host_file(tmp_path, 0.0)], "host", held_out=1.5, storage=url, out=out)
    with pytest.raises(ConfigError) as refused:
        calibrate([_host_file(tmp_path, 0.6)], "host", held_out=3, storage=url, out=out)
    assert str(refused.value).endswith("or store it marked as forced with force=True")
    with open_store(url) as store:  # nothing more stored
        assert [c.id for c in store.calibrations("host")] == [done.calibration_id]
