"""``tinytune export``: from a trial of a real (tiny) study and from a candidate key; bad input
is one line on stderr, exit status 2, and leaves nothing behind."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.bundle.support import make, needs
from tinytune.bundle import emulated_target, verify_checksums
from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.hwmodels.registry import device_names, get_device
from tinytune.spaces import Candidate, default_subnet, get_supernet, make_preset

SPEC = get_supernet("ofa-proxyless-w0.35")


def _at(candidate: Candidate, resolution: int) -> Candidate:
    return replace(candidate, subnet=replace(candidate.subnet, resolution=resolution))


@pytest.fixture
def database(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A database with an empty study ``s`` and three stored candidates: a small sparse one,
    the full update of the largest sub-network (too big for the SRAM of an STM32F746) and a
    MobileNetV3 one that trains its BatchNorm scales (no int8 kernel)."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    mbv3 = get_supernet("ofa-mbv3-w0.35")
    candidates = {
        "small": _at(make_preset("bias-only", SPEC), 32),
        "full": _at(make_preset("full", SPEC, default_subnet(SPEC, "max")), 32),
        "norm": _at(make_preset("bn+last", mbv3), 32),
    }
    with open_store(url) as store:
        for c in candidates.values():
            store.add_candidate(c.key, c.supernet, c.to_json())
    optuna.create_study(study_name="s", storage=url, directions=["maximize"])
    return url, {name: c.key for name, c in candidates.items()}


def _export(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["export", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name what to export: a trial number or candidate key (tinytune export 3 -o DIR)"),
        (["--trial", "0", "--candidate", "ab"], "name what to export once: a TARGET"),
        (["0", "--trial", "0"], "name what to export once: a TARGET"),
        (["ab", "--candidate", "ab"], "name what to export once: a TARGET"),
        (["--study", "s", "--trial", "7"], "study 's' has no trial 7 with a candidate"),
        (["--study", "s", "7"], "study 's' has no trial 7 with a candidate"),  # as report's
        (["0a0a"], "matches 0 stored candidates"),  # not digits alone: a key's prefix
        (["0123"], "has no trial 123 with a candidate"),  # digits alone: a trial number
        (
            ["{full}"],
            "needs 719320 bytes of SRAM (a 713280-byte training arena, 384 of static data and "
            "5656 of stack)",
        ),
        (["--study", "nope", "--trial", "0"], "no study 'nope'"),
        (["--candidate", "0000"], "matches 0 stored candidates"),
        (["--candidate", "xyz"], "is not lower-case hex digits"),
        (["--candidate", "{full}"], "of stack), more than the 327680 bytes of stm32f746"),
        (
            ["--candidate", "{full}", "--device", "nrf52840"],
            "more than the 262144 bytes of nrf52840",
        ),
        (["--candidate", "{norm}"], "a trained per-channel scale (norm update) is not"),
        (["--candidate", "{small}", "--device", "esp32"], "unknown device 'esp32'"),
        (["--candidate", "{small}", "--device", ""], "unknown device ''"),
        (["--candidate", "{small}", "--samples", "0"], "--samples must be an integer >= 1"),
        (["--candidate", "{small}", "--seed", "-2"], "--seed must be an integer from 0 to"),
        (
            ["--candidate", "{small}", "--epochs", "99999999999"],
            "--epochs must be at most 32766 (the example counts in a C int",
        ),
        (
            ["--candidate", "{small}", "--lr-schedule", "cosine"],
            "--lr-schedule must be one of halving, constant, got 'cosine'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str],
    message: str,
    database: tuple[str, dict[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, keys = database
    args = [a.format(**keys) for a in args]
    out = tmp_path / "bundle"
    # every one of these must fail before any weight is read
    weights = ["--weights", str(tmp_path / "no-weights.pt")]
    code, _, err = _export([*args, "--storage", url, "-o", str(out), *weights], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: ")
    assert message in err
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("db.sqlite")] == []


def test_an_output_folder_that_is_not_a_bundle_is_kept(
    database: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, keys = database
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    code, _, err = _export(
        ["--candidate", keys["small"], "--storage", url, "-o", str(out)], capsys
    )
    assert code == 2 and "is not a tinytune bundle (no manifest.json)" in err
    assert err.count("\n") == 1 and [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "manifest.json").write_text('{"name": "a browser extension"}')
    code, _, err = _export(
        ["--candidate", keys["small"], "--storage", url, "-o", str(out)], capsys
    )
    assert code == 2 and "(its manifest.json is not a tinytune bundle's)" in err
    code, _, err = _export(
        ["--candidate", keys["small"], "--storage", url, "-o", str(out / "notes.txt" / "b")],
        capsys,
    )
    assert code == 2 and err.count("\n") == 1 and "notes.txt' (not a folder)" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "notes.txt"]


@pytest.fixture(scope="module")
def study(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real study of one measured trial: the MCUNetV3-style preset, fine-tuned one epoch."""
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.search import InlineExecutor, SearchConfig, run_search

    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'db.sqlite'}"
    config = SearchConfig(
        reference=False,
        tune_lr=False,
        checkpoint=str(checkpoint),
        study_name="s",
        trials=1,
        preset="mcunetv3",
        finetune=FinetuneConfig(epochs=1, batch_size=32, lr=0.05),
    )
    with open_store(url) as store:
        assert run_search(config, store, InlineExecutor(run_evaluation)).counts.measured == 1
    return url


@pytest.mark.slow
@needs("host")
def test_every_device_s_core_has_its_make_target_or_is_the_host() -> None:
    """The export's hint names the Makefile target of the device's core; each exists."""
    makefile = (Path(__file__).parents[2] / "tinytune/bundle/platform/bundle.mk").read_text()
    targets = {name: emulated_target(get_device(name).core) for name in device_names()}
    assert targets["host"] is None and targets["rpi4"] == "aarch64"
    assert targets["stm32f746"] == "cortex-m7" and targets["nrf52840"] == "cortex-m4"
    assert targets["rp2040"] == "cortex-m0plus" and targets["esp32c3"] == "rv32imc"
    for name, target in targets.items():
        if target is not None:
            assert f"\nrun-{target}:" in makefile and f"\nrun-profile-{target}:" in makefile, name


def test_export_a_trial_then_the_same_candidate_by_key(
    study: str, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trial = optuna.load_study(study_name="s", storage=study).trials[0]
    out = tmp_path / "bundle"
    common = ["--storage", study, "-o", str(out), "--weights", str(checkpoint)]
    common += ["--no-measure-int8"]  # measured by default: tests/cli/test_cli.py
    code, stdout, err = _export(
        ["--study", "s", "--trial", "0", "--samples", "4", "--epochs", "1", *common], capsys
    )
    assert code == 0, err
    assert (
        "wrote" in stdout
        and "run-host, then run-cortex-m7 (the example on the Cortex-M7" in stdout
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["candidate_key"] == trial.user_attrs["candidate_key"]
    assert (manifest["study"], manifest["trial"]) == ("s", 0)
    assert manifest["measured"]["val_accuracy"] == trial.values[0]  # chosen on validation
    assert manifest["measured"]["augment"] == "none"  # as the bundle trains: no note
    assert "augmented images" not in stdout
    # the SRAM the bundle needs (arena, static data, stack) is what the search stored
    memory = manifest["memory"]
    assert (
        memory["sram_bytes"] == memory["search_memory_bytes"] == trial.user_attrs["memory_bytes"]
    )
    assert memory["sram_bytes"] == sum(memory[f"{p}_bytes"] for p in ("arena", "static", "stack"))
    parts = ", ".join(
        f"{p} {memory[f'{p}_bytes'] / 1024:.1f}" for p in ("arena", "static", "stack")
    )
    assert f"SRAM {memory['sram_bytes'] / 1024:.1f} KB ({parts}) of 320 KB on stm32f746" in stdout
    assert manifest["predicted_latency"]["train_step_s"] == pytest.approx(trial.values[2])
    assert "note: the study planned" not in stdout  # the study's int8 plan is the bundle's
    assert manifest["dataset"]["train_samples"] == 4 and manifest["training"]["epochs"] == 1
    # without the int8 measurement, one line says what the example shows
    expected = manifest["example"]["expected_correct"]
    assert len(expected) == 2 and manifest["example"]["eval_samples"] == 4
    assert (
        "make run-host is a smoke test of 4 training samples over 1 epoch, not the search's "
        f"accuracy: it should print {expected[-1]}/4 test samples right at the end"
    ) in " ".join(stdout.split())
    lines = make(out, "run-host").splitlines()
    assert lines[1].startswith("smoke test: 4 training samples, 1 epoch, accuracy on 4")
    assert [line.split()[:2] for line in lines[2:4]] == [["epoch", "0"], ["epoch", "1"]]
    assert lines[3].endswith(
        f"accuracy {expected[1]}/4 {expected[1] * 25}.00% (simulator: {expected[1]}/4)"
    )
    assert lines[-1].startswith("smoke test passed")

    # the same candidate by a key prefix replaces that bundle; the build folder and a note of
    # the user's stay, an edited file of the bundle is refused before any work unless --force
    (out / "notes.txt").write_text("board 3")
    (out / "main.c").write_text((out / "main.c").read_text() + "/* mine */\n")
    by_key = ["--candidate", trial.user_attrs["candidate_key"][:10], *common]
    code, _, err = _export(by_key, capsys)
    assert code == 2 and err.count("\n") == 1 and "main.c (changed)" in err and "--force" in err
    assert (out / "main.c").read_text().endswith("/* mine */\n")
    code, _, err = _export([*by_key, "--force"], capsys)
    assert code == 0, err
    again = json.loads((out / "manifest.json").read_text())
    assert again["candidate_key"] == manifest["candidate_key"] and again["trial"] == 0
    assert again["dataset"]["train_samples"] == 32 and verify_checksums(out) == []
    assert (out / "notes.txt").read_text() == "board 3" and (out / "build").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
    lines = make(out, "run-host").splitlines()  # the kept build is older: make builds again
    assert [line.split()[:2] for line in lines[2:6]] == [["epoch", str(e)] for e in range(4)]
    assert lines[-1].startswith("smoke test passed")


@pytest.mark.parametrize(
    ("searched", "device_sram", "said"),
    [
        (146_022, 320 * 1024, "the study planned this candidate at 142.6 KB of SRAM"),
        (56_936, 1024**3, None),
        (None, 320 * 1024, None),
    ],
)
def test_export_says_what_differs_from_the_study_and_sizes_the_device_readably(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    searched: int | None,
    device_sram: int,
    said: str | None,
) -> None:
    """An fp32 study (or one planned by an earlier planner) priced the candidate otherwise than
    the int8 bundle: export says so; a Linux board's SRAM reads in GB, not millions of KB."""
    import tinytune
    from tinytune.api import Exported

    manifest = {
        "candidate_key": "a" * 64,
        "memory": {
            "arena_bytes": 56_936,
            "model_flash_bytes": 235_376,
            "search_memory_bytes": searched,
        },
        "device": {"name": "rpi4", "sram_bytes": device_sram, "flash_bytes": 1024**3},
        "predicted_latency": {"train_step_s": None, "engine": "published"},
        "dataset": {"train_samples": 32, "eval_samples": 32},
        "example": {
            "train_samples": 32,
            "eval_samples": 32,
            "epochs": 1,
            "flash_bytes": 64 * (4800 + 2),  # int8 images, uint16_t labels
            "expected_correct": [1, 2],
        },
        "step": {"input_bytes": 4800},
        "training": {"lr": 0.003125},
        "trial": None,
        "measured": None,
    }
    done = Exported(tmp_path, manifest, "the study")
    monkeypatch.setattr(tinytune, "export_bundle", lambda *a, **k: done)
    code, out, err = _export(["--candidate", "aaaa", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert ("note: the study planned" in out) == (said is not None)
    if said is not None:
        assert said in out and "the bundle trains in int8" in out
    size = "1 GB" if device_sram == 1024**3 else "320 KB"
    assert f"SRAM 55.6 KB (arena) of {size} on rpi4" in out  # a manifest without its stack

    assert "example: 32 training and 32 test samples, 300.1 KB more flash for them" in out
    assert "flash 229.9 KB of model constants (TT_FLASH_BYTES)" in out
    assert "note: trial" not in out and "more than the" not in out


def test_export_says_when_samples_are_capped_overflow_flash_or_the_trial_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import tinytune
    from tinytune.api import Exported

    manifest = {
        "candidate_key": "a" * 64,
        "trial": 2,
        "measured": None,  # the trial's evaluation failed
        "memory": {"arena_bytes": 56_936, "model_flash_bytes": 235_376},
        "device": {"name": "nrf52840", "sram_bytes": 256 * 1024, "flash_bytes": 1024**2},
        "predicted_latency": {"train_step_s": None, "engine": "published"},
        "dataset": {"train_samples": 1079, "eval_samples": 359},
        "example": {
            "train_samples": 1079,
            "eval_samples": 359,
            "epochs": 1,
            "flash_bytes": (1079 + 359) * (4800 + 2),  # int8 images, uint16_t labels
            "expected_correct": [1, 2],
        },
        "step": {"input_bytes": 4800},
        "training": {"lr": 0.003125},
    }
    monkeypatch.setattr(
        tinytune, "export_bundle", lambda *a, **k: Exported(tmp_path, manifest, "the study")
    )
    code, out, err = _export(["--trial", "2", "-o", str(tmp_path), "--samples", "5000"], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert "example: 1079 training and 359 test samples, 6.6 MB more flash for them" in out
    assert "(--samples 5000 is more than the training split's 1079)" in out
    assert "take 6.81 MB, more than the 1 MB of flash of nrf52840: pass fewer --samples" in out
    assert "note: trial 2 has no measured accuracy (it was not fine-tuned to the end" in out


def test_export_shows_a_bar_of_epochs_and_images_while_it_measures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The command passes a progress callback down; the library only reports to it."""
    import tinytune
    from tinytune.api import Exported
    from tinytune.evaluators.device import TrainingProgress

    manifest = {
        "candidate_key": "a" * 64,
        "memory": {"arena_bytes": 56_936, "model_flash_bytes": 235_376},
        "device": {"name": "stm32f746", "sram_bytes": 320 * 1024, "flash_bytes": 1024**2},
        "predicted_latency": {"train_step_s": None, "engine": "published"},
        "dataset": {"train_samples": 3, "eval_samples": 3},
        "example": {
            "train_samples": 3,
            "eval_samples": 3,
            "epochs": 1,
            "flash_bytes": 6 * (4800 + 2),  # int8 images, uint16_t labels
            "expected_correct": [1, 2],
        },
        "step": {"input_bytes": 4800},
        "training": {"lr": 0.003125},
        "trial": None,
        "measured": None,
    }

    def export_bundle(
        *_: object, on_measure: Any, on_measure_progress: Any, **__: object
    ) -> Exported:
        assert callable(on_measure) and callable(on_measure_progress)
        on_measure()
        for done in range(1, 7):  # 2 epochs of 3 images
            on_measure_progress(TrainingProgress(done // 3, 2, done, 6))
        return Exported(tmp_path, manifest, "the study")

    monkeypatch.setattr(tinytune, "export_bundle", export_bundle)
    code, out, err = _export(["--candidate", "aaaa", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert "measuring the accuracy the device's training reaches" in out
    assert "int8 training at batch 1" in out and "2/2 epochs, 6/6 images" in out

    def quiet(*_: object, **__: object) -> Exported:  # nothing to measure: no bar
        return Exported(tmp_path, manifest, "the study")

    monkeypatch.setattr(tinytune, "export_bundle", quiet)
    code, out, err = _export(["--candidate", "aaaa", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    assert "int8 training" not in out and "images" not in out


@pytest.mark.parametrize(
    ("expected", "blob", "said"),
    [
        ([3, 5, 9], 40_000, "it should print 9/32 test samples right at the end"),
        (None, 300_000, "(too many steps to simulate at export)"),
    ],
)
def test_export_says_what_the_example_shows_and_where_its_saved_copy_fits(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    expected: list[int] | None,
    blob: int,
    said: str,
) -> None:
    import tinytune
    from tinytune.api import Exported

    manifest = {
        "candidate_key": "a" * 64,
        "memory": {"arena_bytes": 56_936, "model_flash_bytes": 235_376},
        "device": {"name": "stm32f746", "sram_bytes": 320 * 1024, "flash_bytes": 1024**2},
        "predicted_latency": {"train_step_s": None, "engine": "published"},
        "dataset": {"train_samples": 32, "eval_samples": 32},
        "example": {
            "train_samples": 32,
            "eval_samples": 32,
            "epochs": 2,
            "flash_bytes": 64 * (3072 + 2),
            "expected_correct": expected,
        },
        "params_blob": {"bytes": blob},
        "step": {"input_bytes": 3072},
        "training": {"lr": 0.003125},
        "trial": None,
        "measured": None,
    }
    monkeypatch.setattr(
        tinytune, "export_bundle", lambda *a, **k: Exported(tmp_path, manifest, "the study")
    )
    code, out, err = _export(["--candidate", "aaaa", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert (
        "make run-host is a smoke test of 32 training samples over 2 epochs, not the search's "
        "accuracy: "
    ) in out
    assert said in out
    assert ("note: the example keeps the saved parameters" in out) == (blob > 100_000)


@pytest.mark.parametrize(
    ("frontend", "said"),
    [
        (
            {
                "function": "tt_input_from_pcm16",
                "clip_samples": 16000,
                "sample_rate": 16000,
                "scratch_bytes": 4096,
                "tables_bytes": 4074,
                "frames": 32,
                "bands": 26,
            },
            "input: tt_input_from_pcm16() makes it of 16000 samples at 16000 Hz (32 frames of 26 "
            "bands), with 4.0 KB of static SRAM beside the arena and 4.0 KB of tables in flash, "
            "4.6 ms a clip predicted (the front's figures count them)",
        ),
        (
            {"function": "tt_input_from_values"},
            "input: tt_input_from_values() makes it of a window's float64 values",
        ),
        (None, None),
    ],
)
def test_export_says_what_makes_an_audio_or_sensor_models_input(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    frontend: dict[str, Any] | None,
    said: str | None,
) -> None:
    import tinytune
    from tinytune.api import Exported

    # an example of 4 training and 3 test clips (the audio model's; flash as the manifest says)
    manifest = {
        "candidate_key": "a" * 64,
        "memory": {"arena_bytes": 32_780, "model_flash_bytes": 15_000},
        "device": {"name": "nrf52840", "sram_bytes": 256 * 1024, "flash_bytes": 1024**2},
        "predicted_latency": {"train_step_s": 0.02, "engine": "bundle", "frontend_s": 0.0046},
        "dataset": {"train_samples": 4, "eval_samples": 3},
        "input": {} if frontend is None else {"frontend": frontend},
        "example": {"train_samples": 4, "eval_samples": 3, "epochs": 1, "flash_bytes": 237_538},
        "step": {"input_bytes": 1960},
        "training": {"lr": 0.003125},
        "trial": None,
        "measured": None,
    }
    monkeypatch.setattr(
        tinytune, "export_bundle", lambda *a, **k: Exported(tmp_path, manifest, "the study")
    )
    code, out, err = _export(["--candidate", "aaaa", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert "example: 4 training and 3 test samples, 232.0 KB more flash for them" in out
    assert ("input: " in out) == (said is not None)
    if said is not None:
        assert said in out
