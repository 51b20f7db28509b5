"""The preflight decodes an image folder at the resolution the study measures first, telling the
progress callback (and the command line draws it), before anything is trained; another
resolution is decoded when a candidate first needs it; a later run reuses the decoded images and
says where they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.test_data import write_image_folder
from tests.search.fakes import search_config
from tinytune.data import ImageFolderDataset
from tinytune.errors import DataError
from tinytune.search.config.search_config import reference_candidate
from tinytune.search.run.events import SearchEvent
from tinytune.search.run.preflight import preflight
from tinytune.spaces import get_supernet


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_preflight_decodes_the_first_resolution_and_reports_it(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    config = search_config(tmp_path / "w.pt", dataset=f"imagefolder:{root}", n_classes=3)
    spec = get_supernet(config.supernet)
    events: list[SearchEvent] = []
    checked = preflight(config, None, events.append)
    folder = ImageFolderDataset(root).decoded
    assert [e.kind for e in events] == ["decoding"] * 15
    assert [e.done for e in events] == list(range(1, 16))
    assert {(e.total, e.path, e.budget) for e in events} == {(15, str(folder.folder), 2)}
    assert checked.val_images == 3
    first = reference_candidate(spec.name).subnet.resolution
    assert folder.missing(spec.resolutions) == [r for r in spec.resolutions if r != first]
    later = max(spec.resolutions)
    ImageFolderDataset(root).load(later)  # a candidate that needs another: decoded then
    assert later not in folder.missing(spec.resolutions)
    events.clear()
    preflight(config, None, events.append)  # a later run
    assert [(e.kind, e.done, e.total, e.path) for e in events] == [
        ("decoded", 15, 15, str(folder.folder))
    ]
    preflight(config, None)  # no callback: nothing to tell


def test_an_unreadable_file_stops_the_preflight_after_every_cheap_check(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    (root / "zebra" / "1.PNG").write_bytes(b"broken")
    config = search_config(tmp_path / "w.pt", dataset=f"imagefolder:{root}", n_classes=3)
    with pytest.raises(DataError, match=r"cannot read image '.*zebra/1\.PNG'"):
        preflight(config, None, lambda e: None)
    wrong = search_config(tmp_path / "w.pt", dataset=f"imagefolder:{root}", n_classes=4)
    from tinytune.errors import ConfigError

    with pytest.raises(ConfigError, match="has 3 classes"):  # said before any image is read
        preflight(wrong, None)


def test_the_command_line_draws_the_decoding_and_says_when_it_is_reused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tinytune
    from tinytune.cli.main import main
    from tinytune.search import Counts, SearchResult

    def optimize(*args: object, progress: object = None, **kwargs: object) -> SearchResult:
        for kind, done in [("decoding", 1), ("decoding", 2), ("decoded", 2)]:
            progress(  # type: ignore[operator]
                SearchEvent(kind, Counts(), 0, 1, 0, done=done, total=2, path="/c/decoded/k")
            )
        return SearchResult("s", Counts(), (), None, 0, (), 1.0, 0)

    monkeypatch.setattr(tinytune, "optimize", optimize)
    assert main(["search", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert "decoded images reused from /c/decoded/k" in " ".join(out.split())
    assert "decoding images" in out


def test_a_second_search_reuses_the_decoded_images(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_checkpoint: Path
) -> None:
    """Two searches of one fine-tune on an image folder: the first decodes it, the second
    says where it found it decoded."""
    from tinytune.cli.main import main

    root = write_image_folder(tmp_path / "images", images_per_class=5)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["search", "--storage", url, "--dataset", f"imagefolder:{root}", "--inline"]
    argv += ["--trials", "1", "--epochs", "1", "--lr", "0.05", "--supernet", "ofa-proxyless-w0.35"]
    argv += ["--weights", str(tiny_checkpoint), "--preset", "bias-only"]
    assert main([*argv, "--study", "first"]) == 0
    first = " ".join(capsys.readouterr().out.split())
    assert main([*argv, "--study", "second"]) == 0
    second = " ".join(capsys.readouterr().out.split())
    folder = ImageFolderDataset(root).decoded.folder
    assert "decoded images reused" not in first
    assert f"decoded images reused from {folder}" in second


@pytest.mark.parametrize(
    ("device", "cuts"),
    [("stm32f746", (3, 4)), ("rpi4", (3, 4, 5, 6))],
)
def test_the_sampler_cuts_the_network_only_where_something_fits(
    tmp_path: Path, device: str, cuts: tuple[int, ...]
) -> None:
    """EfficientNet-Lite0 after block 14 or 15 holds 2.5–3.6 MB of weights: no candidate of
    those cuts fits the STM32F746's 1 MB of flash, so its search never proposes them; a board
    with gigabytes keeps every cut. The default cut is always there."""
    root = write_image_folder(tmp_path / "images")
    config = search_config(
        tmp_path / "w.pt", dataset=f"imagefolder:{root}", n_classes=3, device=device,
        supernet="efficientnet-lite0", sram_budget_bytes=None if device == "rpi4" else 256 * 1024,
    )  # fmt: skip
    assert get_supernet(config.supernet).stage_counts == (3, 4, 5, 6)
    assert preflight(config, None).cuts == cuts
