"""The built-in networks for samples that are not images (``tinytune pretrain --network``): each
takes its kind of samples and refuses the other in one line; the recipe keeps the epoch of best
validation accuracy and reports the test accuracy of those weights; the command writes a
``torch.export`` file and its record, which a search then takes as its supernet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.vibration import make
from tinytune.builtin_networks import build_network, pretrain_network
from tinytune.cli.main import main
from tinytune.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vibration")
    make(out, machines=10, takes=2, conditions=3)
    return out


@pytest.mark.parametrize(
    ("name", "shape"), [("ds-cnn", (1, 49, 40)), ("ds-cnn", (1, 49, 10)), ("cnn-1d", (6, 1, 64))]
)
def test_a_network_takes_its_kind_of_samples(name: str, shape: tuple[int, int, int]) -> None:
    net = build_network(name, shape, 7).eval()
    assert net(torch.zeros(2, *shape)).shape == (2, 7)


@pytest.mark.parametrize(
    ("name", "shape", "words"),
    [
        ("ds-cnn", (6, 1, 64), "ds-cnn takes a 1xHxW spectrogram of at least 8x8 (audio:), the"),
        ("cnn-1d", (1, 49, 40), "cnn-1d takes a Cx1xT window of at least 16 steps (series:)"),
        ("cnn-1d", (3, 1, 8), "the samples are 3x1x8; for a spectrogram (1xHxW) use ds-cnn"),
        ("lstm", (1, 49, 40), "unknown built-in network 'lstm'; expected one of: ds-cnn, cnn-1d"),
    ],
)
def test_samples_a_network_does_not_take_are_refused(
    name: str, shape: tuple[int, int, int], words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        build_network(name, shape, 3)
    assert words in str(e.value)


def test_the_recipe_keeps_the_epoch_of_best_validation_accuracy(windows: Path) -> None:
    seen: list[float] = []
    trained = pretrain_network(
        "cnn-1d", f"series:{windows}", epochs=4, seed=1, progress=lambda e, n, v: seen.append(v)
    )
    assert len(seen) == 4 and trained.best_epoch == 1 + int(np.argmax(seen))
    assert trained.val_accuracy == max(seen)
    from tinytune.data import get_dataset

    splits = get_dataset(f"series:{windows}", seed=1).load(1)
    with torch.no_grad():
        val, test = (
            float((trained.module(torch.tensor(s.x)).argmax(1).numpy() == s.y).mean())
            for s in (splits.val, splits.test)
        )
    assert (val, test) == (trained.val_accuracy, trained.test_accuracy)  # the kept weights
    again = pretrain_network("cnn-1d", f"series:{windows}", epochs=4, seed=1)
    mine, theirs = trained.module.state_dict(), again.module.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)  # the seed makes it again
    with pytest.raises(DataError, match="holds images; the built-in networks are for audio:"):
        pretrain_network("cnn-1d", "digits")


def test_the_command_writes_a_network_the_search_takes(
    windows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nets"
    argv = ["pretrain", "--network", "cnn-1d", "--dataset", f"series:{windows}", "--out"]
    assert main([*argv, str(out), "--epochs", "3"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"cnn-1d: {out / 'cnn-1d.pt2'} (epoch " in said and "--supernet" in said
    record = json.loads((out / "cnn-1d.json").read_text())
    assert record["input_shape"] == [3, 1, 256] and record["recipe"]["epochs"] == 3
    assert len(record["class_names"]) == 3 and record["file"] == "cnn-1d.pt2"
    storage = f"sqlite:///{tmp_path / 's.db'}"
    search = ["search", "--dataset", f"series:{windows}", "--supernet", str(out / "cnn-1d.pt2")]
    search += ["--trials", "2", "--epochs", "1", "--inline", "--storage", storage]
    assert main(search) == 0
    capsys.readouterr()
    assert main([*argv, str(out)]) == 2  # there already: --force replaces it
    assert "holds a checkpoint of cnn-1d already; pass --force" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--network", "cnn-1d", "--recipe", "formula-cpu"], "--recipe does not apply here"),
        (["--network", "cnn-1d", "--steps", "5"], "--steps does not apply here: --network"),
        (["--network", "cnn-1d", "--out", "o"], "pass --dataset audio:PATH (keyword clips)"),
        (["--network", "cnn-1d", "--dataset", "series:x"], "writes a file: pass --out FOLDER"),
        (["--epochs", "5"], "--epochs does not apply here: it sets how --network trains"),
        (["--dataset", "series:x"], "--dataset does not apply here"),
        (["--network", "gru", "--dataset", "series:x", "--out", "o"], "unknown built-in network"),
    ],
)
def test_bad_network_pretraining_input_is_one_line_and_exit_2(
    args: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pretrain", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_epochs_out_of_range_are_refused_before_any_training(
    windows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["pretrain", "--network", "cnn-1d", "--dataset", f"series:{windows}"]
    assert main([*argv, "--out", str(tmp_path / "nets"), "--epochs", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--epochs must lie in [1, 1000], got 0" in err
    assert not (tmp_path / "nets" / "cnn-1d.pt2").exists()
    with pytest.raises(ConfigError, match=r"^epochs must lie in \[1, 1000\], got 1001$"):
        pretrain_network("cnn-1d", f"series:{windows}", epochs=1001)  # worded for Python
