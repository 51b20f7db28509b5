"""The command line: fast help, one-line errors with exit status 2, stored data kept intact."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.errors import BudgetError, ConfigError
from tinytune.units import (
    MAX_SEED,
    check_integer,
    check_real,
    check_seed,
    parse_bytes,
    parse_seconds,
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


@pytest.fixture
def existing_db(tmp_path: Path) -> tuple[str, Path, str]:
    path = tmp_path / "keep.db"
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name="old", storage=url, directions=["maximize"])
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    return url, path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--supernet", "resnet9000"], "unknown supernet 'resnet9000'"),
        (["--dataset", "cifar"], "unknown data set"),
        (["--preset", "everything"], "--preset must be one of full, last, "),
        (["--sram-budget", "12parsecs"], "is not a size"),
        (["--sram-budget", "1KB"], "no candidate of ofa-proxyless-w0.35 fits"),
        (["--dataset", "imagefolder:/no/such/folder"], "/no/such/folder"),
        (["--time-budget", "soon"], "is not a duration"),
        (["--trials", "0"], "--trials must be >= 1"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--device", "esp32"], "--device must be one of esp32c3, host, nrf52840, "),
        (["--engine", "tflite"], "--engine must be one of bundle, published, pytorch, got 'tfl"),
        (["--device", "rpi4", "--engine", "bundle"], "'rpi4' has no 'bundle' engine; its engi"),
        (["--latency-budget", "fast"], "is not a duration"),
        (["--latency-budget", "1us"], "is not a duration"),
        (["--latency-budget", "500"], "--latency-budget '500' has no unit; write 500ms or 500s"),
        (["--latency-budget", "0.001ms"], "no candidate of ofa-proxyless-w0.35 fits a latency"),
        (["--flash-budget", "2GB"], "is not a size"),
        (["--flash-budget", "2MB"], "exceeds the 1048576 bytes of stm32f746"),
        (["--flash-budget", "100B"], "fits a flash budget of 100 bytes: the smallest needs"),
        (["--device", "nrf52840", "--sram-budget", "300KB"], "exceeds the 262144 bytes"),
        (["--max-retries", "-1"], "--max-retries must be >= 0"),
        (["--patches", "9:1"], "--patches must be auto, none or N:B (N x N patches, N in 2 .."),
        (["--patches", "4:20"], "a patched stage of 20 blocks needs a sub-network of as many"),
        (
            ["--patches", "8:5", "--preset", "mcunetv3"],
            "8 patches per side need a stage output of at least 8 x 8 pixels",
        ),
        (
            ["--patches", "2:9", "--preset", "mcunetv3"],
            "a patched stage must end at or before the first layer that trains anything",
        ),
        (["--patches", "2:2", "--precision", "fp32"], "is planned in int8 only"),
        (["--repeats", "0"], "--repeats must lie in [1, 20], got 0"),
        (["--lr", "12"], "--lr must lie in (0, 10), got 12.0"),
        (["--epochs", "80000000"], "--epochs must lie in [1, 1000], got 80000000"),
        (
            ["--epoch-budget", "4"],
            "--epoch-budget 4 is less than one proposal costs here (a measured fine-tune of 8 "
            "epochs: 8 epochs); give at least 8",
        ),
    ],
)
def test_bad_search_input_is_one_line_and_exit_2(
    args: list[str],
    message: str,
    existing_db: tuple[str, Path, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _path, digest = existing_db
    code, err = _run(["search", "--storage", url, *args], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: ")
    assert message in err
    assert len(optuna.load_study(study_name="old", storage=url).trials) == 3
    assert optuna.load_study(study_name="old", storage=url).best_value is not None
    del digest  # tinytune may add its own tables, but Optuna's study must be untouched


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "esp32"], "--device must be one of esp32c3, host, "),
        (["--weights", "no/such/weights.pt"], "supernet checkpoint 'no/such/weights.pt' does not"),
        (["--supernet", "resnet9000"], "unknown supernet 'resnet9000'"),
        (["--dataset", "cifar"], "unknown data set"),
        (["--sram-budget", "12parsecs"], "is not a size"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--sram-budget", "1KB"], "no candidate of ofa-proxyless-w0.35 fits"),
        (["--flash-budget", "2MB"], "exceeds the 1048576 bytes of stm32f746"),
        (["--flash-budget", "100B"], "raise --flash-budget to at least"),
        (["--resume"], "no study 'tinytune' to resume: the database"),
        (["--inline", "--ray-address", "127.0.0.1:1"], "--inline runs without Ray, so --ray"),
        (["--device", "rpi4", "--engine", "bundle"], "'rpi4' has no 'bundle' engine"),
        (["--seed", "-1"], "--seed must be an integer from 0 to 4294967295, got -1"),
        (["--seed", str(2**32)], "--seed must be an integer from 0 to 4294967295"),
        (["--study", ""], "--study must be a name of 1 to 512 characters"),
        (["--study", "   "], "not only spaces"),
        (["--study", "s" * 513], "--study must be a name of 1 to 512 characters"),
        (
            ["--gpus-per-trial", "1.5"],
            "--gpus-per-trial must be a share of one GPU in [0, 1] or a whole number of GPUs, "
            "got 1.5",
        ),
        (["--gpus-per-trial", "-1"], "--gpus-per-trial must be a share of one GPU"),
        (
            ["--inline", "--gpus-per-trial", "0.25"],
            "--inline fine-tunes in this process, without Ray to give each fine-tune its share",
        ),
    ],
)
def test_bad_search_input_creates_no_database(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "new.db"
    code, err = _run(["search", "--storage", f"sqlite:///{path}", *args], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err
    assert not path.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recipe", "quick", "--workers", "2"], "--workers needs a recipe with per-step draws"),
        (["--recipe", "glyphs-gpu", "--workers", "-1"], "--workers must be >= 0, got -1"),
        (["--recipe", "imagenet"], "unknown pre-training recipe 'imagenet'; allowed: quick"),
        (["--threads", "0"], "--threads must lie in [1, "),
        (["--threads", "100000"], "(this machine's cores), got 100000"),
    ],
)
def test_bad_pretrain_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(["pretrain", "--out", str(tmp_path / "w"), *args], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "w").exists()


def test_pretrain_out_is_checked_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file as --out, a folder under a file, a checkpoint already there (without --force) or a
    negative --checkpoint-every: one line, before any training; the checkpoint is kept."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("notes")
    held = tmp_path / "held"
    held.mkdir()
    checkpoint = held / "ofa-proxyless-w0.35.pt"
    checkpoint.write_bytes(b"a checkpoint")
    for args, message in [
        (["--out", str(a_file)], "is a file; name a folder for the checkpoint"),
        (["--out", str(a_file / "w")], "(not a folder)"),
        (["--out", str(held)], "holds a checkpoint of ofa-proxyless-w0.35 already; pass --force"),
        (["--out", str(tmp_path / "w"), "--checkpoint-every", "-1"], "must be >= 0"),
        (["--out", ""], "--out must name a folder for the checkpoint, got ''"),
        (["--out", "  "], "--out must name a folder for the checkpoint, got '  '"),
    ]:
        code, err = _run(["pretrain", "--steps", "1", *args], capsys)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    assert checkpoint.read_bytes() == b"a checkpoint" and a_file.read_text() == "notes"
    assert not (tmp_path / "w").exists()


def test_pretrain_out_with_a_partial_run_of_another_recipe_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A partial run goes on only under its own recipe: another one is one line naming
    --force, before any training, and the partial file is kept."""
    from tinytune.checkpoints import pretrain_into
    from tinytune.models import PretrainRecipe
    from tinytune.spaces import get_supernet

    recipe = PretrainRecipe(steps=2, batch_size=4, source_classes=8, stream="per-step")
    out = tmp_path / "w"

    def stop(step: int, steps: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pretrain_into(
            get_supernet("ofa-proxyless-w0.35"),
            recipe,
            out / "ofa-proxyless-w0.35.pt",
            progress=stop,
            checkpoint_every=1,
        )
    partial = out / "ofa-proxyless-w0.35.partial.pt"
    kept = partial.read_bytes()
    code, err = _run(["pretrain", "--recipe", "glyphs-gpu", "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert (
        "holds a partial run of another recipe" in err
        and "start over with 'tinytune pretrain --force'" in err
    )
    assert partial.read_bytes() == kept


def test_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["search", "--no-such-flag"], capsys)
    assert code == 2 and err.count("\n") == 1


def test_unreachable_database(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(
        ["search", "--storage", "postgresql+psycopg://nobody@127.0.0.1:1/nothing"], capsys
    )
    assert code == 2 and err.count("\n") == 1 and "127.0.0.1:1" in err


def test_pareto_on_missing_database_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "none.db"
    code, err = _run(["pareto", "--storage", f"sqlite:///{path}"], capsys)
    assert code == 2 and "does not exist" in err
    assert not path.exists()


def test_pareto_names_the_studies(
    existing_db: tuple[str, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _, _ = existing_db
    open_store(url).close()  # tinytune's tables beside the Optuna study
    code, err = _run(["pareto", "--storage", url, "--study", "nope"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "no study 'nope' in" in err and err.endswith("; studies: old\n")


@pytest.mark.parametrize("command", [["pareto"], ["report", "0"]])
def test_reading_another_programs_database_leaves_it_as_it_was(
    command: list[str], existing_db: tuple[str, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An Optuna database that tinytune never opened: refused in one line, not a byte
    changed (opening it would add tinytune's tables and switch its journal)."""
    url, path, digest = existing_db
    code, err = _run([*command, "--storage", url], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "holds no tinytune study (none of its tables)" in err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in path.parent.iterdir()) == ["keep.db"]


def test_published_supernet_offline_says_where_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code, err = _run(
        ["search", "--storage", url, "--supernet", "ofa_mbv3_d234_e346_k357_w1.0"], capsys
    )
    assert code == 2 and "--weights FILE" in err and "ofa_nets/ofa_mbv3" in err


@pytest.mark.parametrize(
    ("text", "value"), [("256KB", 262144), ("1MB", 1048576), ("300", 300), ("0.5 KiB", 512)]
)
def test_parse_bytes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_check_seed() -> None:
    from tinytune.search import SearchConfig

    for seed in (0, 7, MAX_SEED):
        check_seed(seed)
    assert MAX_SEED == 4294967295
    for bad in (-1, MAX_SEED + 1, 1.5, True):
        with pytest.raises(ConfigError, match="--seed must be an integer from 0 to 4294967295"):
            check_seed(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed must be an integer from 0 to 4294967295"):
        SearchConfig(checkpoint="", seed=-3)
    with pytest.raises(ConfigError, match=r"^--seed must be a Python int, got int64 3; pass int"):
        check_seed(np.int64(3))  # type: ignore[arg-type]


def test_check_integer_and_real() -> None:
    check_integer(3, "--x")
    check_real(2.5, "--y")
    check_real(np.float64(2.5), "--y")  # a float
    for bad in (2.5, "3", True, None):
        with pytest.raises(ConfigError, match=r"^--x must be an integer, got "):
            check_integer(bad, "--x")
    with pytest.raises(ConfigError, match=r"^--x must be a Python int, got int64 3; pass int"):
        check_integer(np.int64(3), "--x")  # the study's JSON attributes could not hold it
    for bad in ("1", None, True, float("nan"), np.float32(1.0)):
        with pytest.raises(ConfigError, match=r"^--y must be a number, got "):
            check_real(bad, "--y")


def test_parse_seconds() -> None:
    assert parse_seconds("5m") == 300 and parse_seconds("90") == 90
    with pytest.raises(BudgetError):
        parse_seconds("-1s")


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys; from tinytune.cli.main import main; "
        "rc = main(['--help']); "
        "assert 'torch' not in sys.modules and 'ray' not in sys.modules, sorted(sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ
    )
    assert done.returncode == 0, done.stderr
    assert "search" in done.stdout


def test_the_list_of_commands_is_wrapped_to_the_terminal() -> None:
    """Each command's first paragraph is one summary, wrapped by the width of the terminal,
    not at the docstring's line breaks (once "print the Pareto front" ended a line of 80)."""
    env = {**os.environ, "COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "tinytune.cli.main", "--help"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.strip("│ ").split()) for line in done.stdout.splitlines()]
    assert (
        "search Search sub-networks × lite residuals × sparse update schemes; print the Pareto "
        "front of measured accuracy vs predicted training SRAM and training-step latency."
    ) in lines
    assert (
        "devices List the devices and their engines: SRAM, flash, clock, calibration source and "
        "error (the default engine of each device first)."
    ) in lines


@pytest.mark.slow
def test_a_run_stopped_by_its_own_limit_says_which_and_that_the_study_goes_on(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once the run ended without a word when --proposals, --time-budget or --epoch-budget
    stopped it short of the study's --trials: "12 measured" looked like a finished study."""
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    argv = ["search", "--storage", url, "--inline", "--trials", "2", "--epochs", "1"]
    argv += ["--lr", "0.05", "--pretrain-steps", "2"]
    assert main([*argv, "--proposals", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "the run stopped at --proposals 1, with 0 of the study's 2 measured fine-tunes done (the "
        "reference not counted); the same command goes on with the study"
    ) in out  # its one proposal was the reference, beside the budget
    assert main(argv) == 0
    assert "the run stopped" not in capsys.readouterr().out  # the budget spent: no such line


@pytest.mark.slow
def test_search_end_to_end_with_ray(
    tmp_path: Path,
    tiny_checkpoint: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tinytune.cli.common import console

    monkeypatch.setattr(console, "width", 200)  # the whole table, as in a wide terminal
    url = f"sqlite:///{tmp_path / 'e2e.db'}"
    argv = ["search", "--storage", url, "--trials", "2", "--workers", "1", "--epochs", "1"]
    argv += ["--pretrain-steps", "2"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "Pareto front" in out
    study = optuna.load_study(study_name="tinytune", storage=url)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 3  # the reference beside the budget of 2
    assert "vs full" in out and "(reference)" in out
    from tinytune.search.front.pareto import HYPERVOLUME_BOX

    assert " ".join(HYPERVOLUME_BOX.split()) in " ".join(out.split())  # under the front
    assert "learning rate per scheme family, chosen on validation (12 fine-tunes" in out
    rates = study.user_attrs["lr_calibration"]
    assert set(rates) == {"classifier", "bias", "sparse", "full"}
    from tinytune.db import open_store
    from tinytune.search.run.lr_grid import family_of
    from tinytune.spaces import Candidate, get_supernet

    spec = get_supernet("ofa-proxyless-w0.35")
    with open_store(url) as store:
        measured = store.evaluations("tinytune", fidelity="measured", status="ok")
        assert len(measured) == 3
        for e in measured:  # each fine-tuned at its family's rate
            candidate = Candidate.from_json(store.get_candidate(e.candidate_key).payload)
            assert e.details is not None
            assert e.details["lr"] == rates[family_of(candidate, spec)]["lr"]
    assert main(["pareto", "--storage", url]) == 0
    printed = capsys.readouterr().out
    assert "(reference)" in printed
    chosen = ", ".join(f"{family} {rates[family]['lr']:g}" for family in rates)
    sha = study.user_attrs["tinytune.space"]["weights"]
    assert (
        "measured by fine-tuning 1 epoch at batch 32, the learning rate of each scheme family "
        f"chosen on validation: {chosen}; supernet weights {sha[:12]}… (SHA-256)"
    ) in " ".join(printed.split())


@pytest.mark.parametrize("objectives", [1, 3])
def test_an_optuna_study_tinytune_did_not_make_is_refused_untouched(
    objectives: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'theirs.db'}"
    study = optuna.create_study(
        study_name="theirs",
        storage=url,
        directions=["maximize", "minimize", "minimize"][:objectives],
    )
    study.optimize(lambda t: [t.suggest_float("x", 0, 1)] * objectives, n_trials=2)
    code, err = _run(["search", "--storage", url, "--study", "theirs", "--inline"], capsys)
    assert code == 2 and err.count("\n") == 1
    said = "1 objective(s) (maximize)" if objectives == 1 else "holds 2 trial(s) and no tinytune"
    assert "study 'theirs' was not made by tinytune: " in err and said in err
    assert err.endswith("; choose another --study\n")  # the command line's flag
    again = optuna.load_study(study_name="theirs", storage=url)
    assert again.user_attrs == {} and len(again.trials) == 2 and again.metric_names is None


def test_an_unreadable_image_is_named_before_the_search(
    tmp_path: Path, existing_db: tuple[str, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.data.test_data import write_image_folder

    root = write_image_folder(tmp_path / "images", images_per_class=8)
    (root / "mango" / "3.png").write_bytes(os.urandom(64))  # one corrupt file
    url, _path, _ = existing_db
    argv = ["search", "--storage", url, "--dataset", f"imagefolder:{root}", "--inline"]
    code, err = _run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "mango/3.png" in err
    assert optuna.get_all_study_names(url) == ["old"]  # nothing was started


def test_a_file_the_system_refuses_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import tinytune

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", "/data/.front.png.tmp")

    monkeypatch.setattr(tinytune, "optimize", full)
    assert main(["search", "--trials", "3"]) == 1
    err = capsys.readouterr().err
    assert err == "tinytune: error: No space left on device: '/data/.front.png.tmp'\n"
    monkeypatch.setattr(tinytune, "optimize", lambda *a, **k: 1 / 0)
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path))
    # a defect is not dressed up as bad input: an internal error, exit 1, its traceback kept
    assert main(["search", "--trials", "3"]) == 1
    assert capsys.readouterr().err.startswith("tinytune: internal error: ZeroDivisionError: ")


def test_failed_evaluations_are_printed_once_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tinytune
    from tinytune.search import Counts, SearchResult

    errors = ("RuntimeError: diverged", "DataError: cannot read image 'x.png'")
    result = SearchResult("s", Counts(failed=3), (), None, 3, errors, 1.0, 3)
    monkeypatch.setattr(tinytune, "optimize", lambda *a, **k: result)
    assert main(["search", "--trials", "3"]) == 0
    out = capsys.readouterr().out
    for error in errors:
        assert out.count(error) == 1
    assert "no measured candidate meets the budget yet" in out


@pytest.mark.parametrize(("copies", "printed"), [(0, None), (1, "1 copy "), (7, "7 copies ")])
def test_copies_left_out_of_an_image_folder_are_said(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    copies: int,
    printed: str | None,
) -> None:
    import tinytune
    from tinytune.search import Counts, SearchResult

    result = SearchResult("s", Counts(), (), None, 0, (), 1.0, 0, copies=copies)
    monkeypatch.setattr(tinytune, "optimize", lambda *a, **k: result)
    assert main(["search", "--trials", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    said = "of other images (the same bytes), left out so that no image is both trained and tested"
    assert (said in out) == (printed is not None)
    if printed is not None:
        assert f"the image folder holds {printed}{said}" in out


@pytest.mark.slow
def test_a_tiny_image_folder_is_measured_on_repeated_splits_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.data.test_data import write_image_folder

    root = write_image_folder(tmp_path / "images", images_per_class=8)
    (root / "apple" / "again.png").write_bytes((root / "apple" / "0.png").read_bytes())
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["search", "--storage", url, "--dataset", f"imagefolder:{root}", "--inline"]
    argv += ["--trials", "1", "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2"]
    argv += ["--supernet", "ofa-proxyless-w0.35"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the image folder holds 1 copy of other images (the same bytes), left out" in out
    assert (
        "the validation split has 6 images, too few to rank candidates: every accuracy is the "
        "mean over 5 train/validation partitions" in out
    )
    from tinytune.db import open_store

    with open_store(url) as store:
        measured = store.evaluations("tinytune", fidelity="measured", status="ok")
    assert measured and all(e.details and e.details["repeats"] == 5 for e in measured)


@pytest.mark.slow
def test_verify_int8_measures_the_front_as_the_device_trains_and_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tinytune
    from tests.data.test_data import write_image_folder
    from tinytune.cli.common import console

    monkeypatch.setattr(console, "width", 200)  # the whole table, as in a wide terminal
    from tinytune.db import open_store
    from tinytune.search.run import verify_int8

    # two epochs at two rates, not four at three: the same path at a third of the training
    monkeypatch.setattr(verify_int8, "INT8_EPOCHS", 2)
    monkeypatch.setattr(verify_int8, "INT8_LRS", verify_int8.INT8_LRS[:2])
    from tinytune.search.run.verify_int8 import INT8_EPOCHS, INT8_LRS, INT8_SCHEDULE

    root = write_image_folder(tmp_path / "images", images_per_class=8)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["search", "--storage", url, "--dataset", f"imagefolder:{root}", "--inline"]
    argv += ["--trials", "2", "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2"]
    argv += ["--supernet", "ofa-proxyless-w0.35"]
    assert main([*argv, "--verify-int8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    view = tinytune.load(storage=url)
    keys = {p.candidate_key for p in view.front}
    assert keys and set(view.int8) == keys  # every front point, the reference excluded
    assert f"{len(keys)} front points trained here" in out
    assert "int8: the validation/test accuracy trained as the device trains" in out
    # every rate on every partition, outside the search's compute line
    int8_epochs = len(keys) * INT8_EPOCHS * len(INT8_LRS) * 5
    assert f"{int8_epochs} epochs (every rate tried)" in out
    for key, device in view.int8.items():
        shown = f"{100 * device.val_accuracy:.1f}/{100 * device.test_accuracy:.1f}%"
        assert shown in out, key
    with open_store(url) as store:
        rows = store.evaluations("tinytune", fidelity="int8", status="ok")
    assert len(rows) == len(keys)
    for e in rows:  # the rate chosen on validation, its test accuracy reported
        assert e.details is not None and e.details["epochs"] == INT8_EPOCHS
        assert e.details["schedule"] == INT8_SCHEDULE == "halving"
        # a small validation split: the fp32 partitions, repeated for the device's training too
        with open_store(url) as store:
            fp32 = store.find_evaluation("tinytune", e.candidate_key, "measured")
        assert fp32 is not None and fp32.details is not None
        assert e.details["repeats"] == fp32.details["repeats"] == 5
        assert e.details["train_epochs"] == INT8_EPOCHS * len(INT8_LRS) * 5
        tried = e.details["tried"]
        assert [t["lr"] for t in tried] == list(INT8_LRS)
        best = max(tried, key=lambda t: t["val"])
        assert (e.val_accuracy, e.accuracy, e.details["lr"]) == (
            best["val"],
            best["test"],
            best["lr"],
        )
    assert main([*argv, "--verify-int8"]) == 0  # stored: not trained again
    out = " ".join(capsys.readouterr().out.split())
    assert "0 front points trained here, 0 epochs" in out
    # a point measured at a constant rate is measured again under the halving schedule, so
    # that the front's device accuracies are alike
    import dataclasses

    first = sorted(keys)[0]
    with open_store(url) as store:
        stored = store.find_evaluation("tinytune", first, "int8")
        assert stored is not None and stored.details is not None
        older = {**stored.details, "schedule": "constant"}
        store.add_evaluation(dataclasses.replace(stored, details=older, id=None, created_at=None))
    assert tinytune.load(storage=url).int8[first].schedule == "constant"
    assert main([*argv, "--verify-int8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 front points trained here" in out
    view = tinytune.load(storage=url)
    assert {d.schedule for d in view.int8.values()} == {"halving"}
    assert main(["pareto", "--storage", url]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "int8: the validation/test accuracy trained as the device trains" in shown

    import json

    point = view.front[0]
    assert (
        main(["export", "--storage", url, "--trial", str(point.trial), "-o", str(tmp_path / "b1")])
        == 0
    )
    manifest = json.loads((tmp_path / "b1" / "manifest.json").read_text())
    stored = view.int8[point.candidate_key]
    assert manifest["measured_int8"]["accuracy"] == stored.test_accuracy
    assert manifest["measured_int8"]["source"] == "the study"
    assert manifest["training"]["lr"] == stored.lr  # the bundle trains at the measured rate
    assert manifest["training"]["lr_schedule"] == stored.schedule == "halving"  # and schedule
    assert "#define TT_LR_HALVING 1" in (tmp_path / "b1" / "tt_data.h").read_text()
    assert view.reference is not None and view.reference.candidate_key not in view.int8
    reference = ["export", "--storage", url, "--trial", "0", "--device", "host", "-o"]
    assert main([*reference, str(tmp_path / "b2"), "--no-measure-int8"]) == 0  # none stored
    unmeasured = json.loads((tmp_path / "b2" / "manifest.json").read_text())
    assert unmeasured["measured_int8"] is None
    assert unmeasured["training"]["lr"] == tinytune.exporting.DEFAULT_DEVICE_LR == INT8_LRS[0]
    assert "the smallest rate --verify-int8 tries" in capsys.readouterr().out
    assert unmeasured["training"]["lr_schedule"] == INT8_SCHEDULE
    assert main([*reference, str(tmp_path / "b3")]) == 0  # measured by default
    measured = json.loads((tmp_path / "b3" / "manifest.json").read_text())["measured_int8"]
    assert measured["source"] == "measured by export" and measured["batch_size"] == 1
    printed = capsys.readouterr().out
    assert "measuring the accuracy the device's training reaches" in printed
    assert "int8 training at batch 1" in printed  # the measurement's bar, images and epochs
    assert re.search(r"(\d+)/\1 epochs, (\d+)/\2 images", printed)
    assert "accuracy trained as the bundle trains" in printed
    with open_store(url) as store:  # stored with the study
        again = store.find_evaluation("tinytune", view.reference.candidate_key, "int8")
    assert again is not None and again.accuracy == measured["accuracy"]
    assert again.details is not None and again.details["repeats"] > 1  # as the fp32 one


def test_how_a_study_measures_is_told_from_its_space() -> None:
    from tinytune.cli.pareto import _measured_by
    from tinytune.search.study.study_space import StudySpace

    def _measured_by_attrs(attrs: dict, repeats_seen: set[int]) -> str | None:
        return _measured_by(StudySpace.from_attrs(attrs), "sqlite://", "s", repeats_seen)

    older = {"supernet": "ofa-proxyless-w0.35"}
    assert _measured_by_attrs(older, {1}) is None
    space = {
        "finetune": {"epochs": 8, "batch_size": 32, "lr": 1.6, "repeats": 3},
        "weights": "ab" * 32,
    }
    assert _measured_by_attrs(space, {3}) == (
        "measured by fine-tuning 8 epochs at batch 32, learning rate 1.6, 3 train/validation "
        "partitions each; supernet weights abababababab… (SHA-256)"
    )
    auto = {"finetune": {"epochs": 8, "batch_size": 32, "lr": 1.6, "repeats": "auto"}}
    assert _measured_by_attrs(auto, {1}) == (
        "measured by fine-tuning 8 epochs at batch 32, learning rate 1.6"
    )
    assert _measured_by_attrs(auto, {5}) == (
        "measured by fine-tuning 8 epochs at batch 32, learning rate 1.6, each the mean over 5 "
        "train/validation partitions (the validation split is too small to rank candidates "
        "alone)"
    )


@pytest.mark.parametrize(
    ("flag", "scored", "said"),
    [
        ("--proxy", 1, "proxy: 1 candidate scored in this run, 1 promoted;"),
        ("--halving", 2, "2 candidates screened in this run, 1 promoted; short vs measured"),
    ],
)
def test_the_low_fidelity_counts_say_they_are_this_runs(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    scored: int,
    said: str,
) -> None:
    """This run's screenings, the study's τ: pareto counts the study's (tests/search)."""
    import tinytune
    from tinytune.search import Counts, SearchResult

    counts = Counts(proxy_scored=scored, promoted=1)
    result = SearchResult("s", counts, (), None, 1, (), 1.0, 1, proxy_tau=0.5, proxy_pairs=3)
    monkeypatch.setattr(tinytune, "optimize", lambda *a, **k: result)
    assert main(["search", "--trials", "1", flag]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert said in out and "in the study: Kendall τ 0.50 over 3 candidates measured too" in out


@pytest.mark.parametrize("pretrains", [False, True])
def test_the_total_time_says_pre_training_only_when_there_was_some(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pretrains: bool
) -> None:
    import tinytune
    from tinytune.search import Counts, SearchResult

    result = SearchResult("s", Counts(measured=1), (), None, 1, (), 1.0, 1)

    def optimize(*args: object, **kwargs: Any) -> SearchResult:
        if pretrains:
            kwargs["on_pretrain"](1, 1, 0.5)
        return result

    monkeypatch.setattr(tinytune, "optimize", optimize)
    assert main(["search", "--trials", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "s in all" in out
    assert ("pre-training included" in out) == pretrains


@pytest.mark.parametrize(
    ("devices", "args", "said"),
    [
        ({"cpu": 3}, [], "workers trained on: cpu (3 tasks)"),
        (
            {"cpu": 1},
            ["--gpus-per-trial", "0.5"],
            "workers trained on: cpu (1 task); --gpus-per-trial 0.5 reserved GPUs, but no "
            "worker saw one through CUDA, so they fine-tuned on CPUs",
        ),
        (
            {"cuda:0 (NVIDIA H100)": 4, "cpu": 2},
            ["--gpus-per-trial", "0.25"],
            "workers trained on: cpu (2 tasks), cuda:0 (NVIDIA H100) (4 tasks)",
        ),
    ],
)
def test_the_search_says_which_devices_its_workers_trained_on(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    devices: dict[str, int],
    args: list[str],
    said: str,
) -> None:
    import tinytune
    from tinytune.search import Counts, SearchResult

    result = SearchResult("s", Counts(), (), None, 0, (), 1.0, 0, devices=devices)
    monkeypatch.setattr(tinytune, "optimize", lambda *a, **k: result)
    assert main(["search", "--trials", "1", *args]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert said in out
    assert out.count("workers trained on") == 1
    assert ("reserved GPUs" in out) == ("reserved GPUs" in said)


def test_the_commands_log_names_options_as_flags() -> None:
    """A log message that names an option (``tinytune.errors.Words``) says ``--mutate 0.5`` in
    a command's output, where a Python caller's logging says ``mutate=0.5``; in a process of
    its own, as a command runs (no logging set up before)."""
    code = (
        "import logging\n"
        "from tinytune.cli.common import quiet_logs\n"
        "from tinytune.errors import flag\n"
        "quiet_logs()\n"
        "log = logging.getLogger('tinytune.search.run.driver')\n"
        "log.warning(flag('mutate', 0.5) + ' changes update schemes; it is off with a preset')\n"
        "log.warning('plain text, %d', 2)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stderr.splitlines() == [
        "WARNING tinytune.search.run.driver: --mutate 0.5 changes update schemes; it is off "
        "with a preset",
        "WARNING tinytune.search.run.driver: plain text, 2",
    ]


def test_the_sized_budget_is_said_in_one_line_with_its_reason() -> None:
    from tinytune.cli.search import sized
    from tinytune.search import Sizing

    most = sized(Sizing(12, 157, 7.4, 12.2, 2, 600.0, 4))
    assert most == (
        "the study's budget: 12 measured fine-tunes, the most by default (157 fine-tunes of "
        "about 7 s fit in 10 min on 2 workers beside the reference's 12 s), sized from the "
        "learning-rate grid's fine-tunes and kept with the study; --trials N sets it"
    )
    some = sized(Sizing(7, 7, 120.0, 300.0, 2, 600.0, 4))
    assert some.startswith(
        "the study's budget: 7 measured fine-tunes, as many as fit: 7 fine-tunes of about 120 s "
        "fit in 10 min on 2 workers beside the reference's 300 s, sized"
    )
    floor = sized(Sizing(4, 0, 480.0, 1200.0, 1, 600.0, 4))
    assert floor.startswith(
        "the study's budget: 4 measured fine-tunes, never fewer than the 4 it measures first (0 "
        "fine-tunes of about 480 s fit in 10 min on 1 worker beside the reference's 1200 s)"
    )
    assert "beside the reference" not in sized(Sizing(1, 1, 500.0, 0.0, 1, 600.0, 1))
