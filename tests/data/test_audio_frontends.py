"""A keyword folder's front-end as part of the candidate: the folder loads at fewer frames (a
front-end of that many frames, its bands in proportion, standardised on its own training part),
a network that pools globally is searched at them, and the front-end's SRAM, tables and time are
counted in the hardware cost; background noise mixed into copies of the training clips
(``audio:PATH?noise=V``) leaves the validation and test clips as they are."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.keywords import make, write
from tinytune.builtin_networks import build_network
from tinytune.data import frontend_of, get_dataset
from tinytune.data.logmel import LogMelSpec, logmel
from tinytune.errors import ConfigError, DataError
from tinytune.hwmodels.frontend import THRESHOLD_BYTES, frontend_cost, frontend_units


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keywords")
    make(out, speakers=10, takes=1, keywords=3, seed=2)
    rng = np.random.default_rng(0)
    (out / "_background_noise_").mkdir()
    write(out / "_background_noise_" / "hiss.wav", rng.normal(0, 2000, 24_000).astype(np.int16))
    write(
        out / "_background_noise_" / "hum.wav",
        (6000 * np.sin(np.arange(40_000) / 50)).astype(np.int16),
    )
    return out


def test_a_front_end_at_fewer_frames_keeps_the_clip_and_scales_the_bands() -> None:
    base = LogMelSpec()
    assert base.at(49) is base
    for frames, bands, window, hop in ((32, 26, 500, 500), (24, 20, 512, 673)):
        spec = base.at(frames)
        assert (spec.frames, spec.bands, spec.window, spec.hop) == (frames, bands, window, hop)
        assert (spec.clip, spec.fft, spec.low_hz, spec.high_hz) == (16_000, 512, 125.0, 7_500.0)
        # the bands as a network's input keeps its aspect: round(40 * frames / 49)
        assert spec.bands == round(40 * frames / 49)
    with pytest.raises(ConfigError, match="two frames or more"):
        base.at(1)


def test_a_folder_loads_at_other_frames_as_that_front_end_computes_them(folder: Path) -> None:
    data = get_dataset(f"audio:{folder}")
    assert data.at(49) is data
    view = data.at(24)
    assert view is data.at(24) and view.at(49) is data  # kept, and shared
    splits = data.load(24)
    assert splits.train.x.shape[1:] == (1, 24, 20) and view.input_shape == (1, 24, 20)
    assert [len(s.y) for s in (splits.train, splits.val, splits.test)] == [
        len(s.y) for s in (data.load(49).train, data.load(49).val, data.load(49).test)
    ]
    assert np.array_equal(splits.test.y, data.load(49).test.y)  # the same clips, split alike
    # each sample: the 24-frame front-end's features of its clip, standardised on the
    # training part's own mean and deviation
    clips = view.recorded("train", len(splits.train.y))
    features = np.stack([logmel(c, view.spec) for c in clips])
    assert view.to_input(features).tobytes() == splits.train.x[:, 0].tobytes()
    scaled = features.astype(np.float64) / 256.0
    assert view.normalisation[0][0] == pytest.approx(scaled.mean())
    assert view.normalisation[0][0] != pytest.approx(data.normalisation[0][0])
    with pytest.raises(DataError, match="cannot load at 1 frames"):
        data.load(1)


def test_a_network_that_pools_is_searched_at_the_front_ends_frames(tmp_path: Path) -> None:
    from tinytune.spaces import get_supernet

    for name, shape, expected in (
        ("ds-cnn", (1, 49, 40), (24, 32, 49)),  # a spectrogram: its frames, and fewer
        ("cnn-1d", (3, 1, 64), (1,)),  # a sensor window: the size it was exported at
    ):
        net = build_network(name, shape, 4).eval()
        program = torch.export.export(net, (torch.zeros(1, *shape),))
        torch.export.save(program, tmp_path / f"{name}.pt2")
        assert get_supernet(str(tmp_path / f"{name}.pt2")).resolutions == expected


def test_a_series_of_taller_samples_is_searched_at_its_own_size(
    folder: Path, tmp_path: Path
) -> None:
    """A series is not resized: a network's other sizes are searched on keyword clips and
    images, not on it."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 1, 49, 40)), np.repeat(np.arange(3), 20)
    np.savez(tmp_path / "spectra.npz", X=x, y=y)
    assert get_dataset(f"series:{tmp_path / 'spectra.npz'}").searched_at((24, 32, 49)) == (49,)
    assert get_dataset(f"audio:{folder}").searched_at((24, 32, 49)) == (24, 32, 49)
    assert get_dataset("digits").searched_at((48, 64)) == (48, 64)


def test_the_front_end_is_counted_in_the_candidates_sram_flash_and_time(folder: Path) -> None:
    from tinytune.bundle.frontend import Frontend
    from tinytune.hwmodels.bundle_engine import cycles_per_instruction
    from tinytune.hwmodels.registry import get_device

    data = get_dataset(f"audio:{folder}")
    assert frontend_of(data) == LogMelSpec() and frontend_of(get_dataset("digits")) is None
    device = get_device("stm32f746", None, "bundle")
    fits = json.loads(
        resources.files("tinytune.hwmodels").joinpath("data/frontend.json").read_text()
    )
    for frames in (49, 32, 24):
        spec = LogMelSpec().at(frames)
        cost = frontend_cost(spec, device)
        assert cost.scratch_bytes == 8 * 512
        # the tables the bundle writes, and the input map's 255 thresholds
        steps = np.zeros(255, np.int32)
        assert cost.flash_bytes == Frontend(spec, steps).flash_bytes
        assert steps.nbytes == THRESHOLD_BYTES
        # the fit's instructions at the device's clock and the profile's cycles per instruction
        rate = fits["cores"]["Cortex-M7"]["instructions_per_unit"]
        instructions = float(np.dot(rate, frontend_units(spec)))
        assert cost.seconds == pytest.approx(
            instructions * cycles_per_instruction("Cortex-M7") / 216e6, rel=1e-12
        )
    published = replace(device, engine="published")  # a profile of published models' times
    assert frontend_cost(LogMelSpec(), published).seconds is None  # no model of its time there


def test_the_fit_of_the_front_ends_time_holds_the_counts_it_was_fitted_on() -> None:
    """``bench/frontend_cost.py`` counted each front-end a search tries on each core; the two
    units reproduce every count within a tenth of a percent."""
    fits = json.loads(
        resources.files("tinytune.hwmodels").joinpath("data/frontend.json").read_text()
    )
    assert set(fits["cores"]) == {"Cortex-M7", "Cortex-M4F", "Cortex-M0+", "RV32IMC"}
    for fit in fits["cores"].values():
        assert [p["frames"] for p in fit["points"]] == [24, 32, 49]
        for p in fit["points"]:
            predicted = np.dot(
                fit["instructions_per_unit"], frontend_units(LogMelSpec().at(p["frames"]))
            )
            assert predicted == pytest.approx(p["measured"], rel=1e-3)


def test_a_candidates_cost_holds_its_front_ends(folder: Path) -> None:
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    shape = (1, 49, 40)
    path = folder.parent / "ds-cnn.pt2"
    net = build_network("ds-cnn", shape, 3).eval()
    torch.export.save(torch.export.export(net, (torch.zeros(1, *shape),)), path)
    spec = get_supernet(str(path))
    device = get_device("stm32f746", None, "bundle")
    plain = HardwareEvaluator(spec, 3, HardwareConfig(), device)
    counted = HardwareEvaluator(spec, 3, HardwareConfig(), device, frontend=LogMelSpec())
    for frames in spec.resolutions:
        candidate = make_preset("last", spec)
        candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=frames))
        bare, cost = plain(candidate), counted(candidate)
        fe = frontend_cost(LogMelSpec().at(frames), device)
        assert bare.arena_bytes == cost.arena_bytes and cost.stack_bytes == bare.stack_bytes
        # the front-end's buffers are static data beside the arena, with the engine's
        assert cost.static_bytes == bare.static_bytes + fe.scratch_bytes
        assert cost.sram_bytes == bare.sram_bytes + fe.scratch_bytes
        assert cost.flash_bytes == bare.flash_bytes + fe.flash_bytes
        assert cost.latency_s == pytest.approx(bare.latency_s + fe.seconds, rel=1e-12)


def test_background_noise_is_mixed_into_copies_of_the_training_clips(folder: Path) -> None:
    clean = get_dataset(f"audio:{folder}")
    noisy = get_dataset(f"audio:{folder}?noise=0.3")
    assert noisy.name == f"audio:{folder}?noise=0.3"
    n_train = len(clean.load(49).train.y)
    splits = noisy.load(49)
    assert len(splits.train.y) == 2 * n_train  # each training clip, then its noisy copy
    assert np.array_equal(splits.train.y[n_train:], splits.train.y[:n_train])
    # the speakers stay apart: a copy is its clip's speaker's
    assert list(noisy.sources[len(noisy.files) :]) == [
        noisy.sources[int(i)] for i in noisy._parts[0][:n_train]
    ]
    for name in ("val", "test"):  # as they were, but for the training part's standardisation
        assert np.array_equal(getattr(splits, name).y, getattr(clean.load(49), name).y)
        assert np.array_equal(noisy.recorded(name, 99), clean.recorded(name, 99))
    # a copy is the clip plus the noise at a volume of at most 0.3, and its features those of
    # the mixed clip
    clips = noisy.recorded("train", 2 * n_train)
    assert np.array_equal(clips[:n_train], clean.recorded("train", n_train))
    assert not np.array_equal(clips[n_train:], clips[:n_train])
    assert np.abs(clips[n_train:].astype(int) - clips[:n_train]).max() <= 0.3 * 32768 + 1
    features = np.stack([logmel(c) for c in clips])
    assert noisy.to_input(features).tobytes() == splits.train.x[:, 0].tobytes()
    again = get_dataset(f"audio:{folder}?noise=0.3")  # the same mix, from the cache or not
    assert again.load(49).train.x.tobytes() == splits.train.x.tobytes()
    assert noisy.load(24).train.x.shape == (2 * n_train, 1, 24, 20)


@pytest.mark.parametrize("volume", ["0", "1.5", "loud", ""])
def test_a_noise_volume_outside_0_to_1_is_refused(folder: Path, volume: str) -> None:
    with pytest.raises(DataError, match=r"is not a volume; expected audio:PATH\?noise=V"):
        get_dataset(f"audio:{folder}?noise={volume}")


def test_noise_without_recordings_is_refused(tmp_path: Path) -> None:
    make(tmp_path, speakers=10, takes=1, keywords=3, seed=3)
    with pytest.raises(DataError, match=r"has no _background_noise_ folder of \.wav recordings"):
        get_dataset(f"audio:{tmp_path}?noise=0.1")


def test_the_noisy_copies_features_are_read_back_from_the_cache(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tinytune.data.audio as audio

    first = get_dataset(f"audio:{folder}?noise=0.2").load(49).train.x
    calls: list[int] = []
    real = audio.logmel

    def counted(samples: np.ndarray, spec: LogMelSpec | None = None) -> np.ndarray:
        calls.append(1)
        return real(samples, spec)

    monkeypatch.setattr(audio, "logmel", counted)
    again = get_dataset(f"audio:{folder}?noise=0.2").load(49).train.x
    assert calls == [] and again.tobytes() == first.tobytes()  # no clip transformed again


def test_the_budgets_floor_is_priced_at_the_sizes_the_data_set_makes(
    folder: Path, tmp_path: Path
) -> None:
    """A series of spectrograms is searched at its own 49 frames: the SRAM floor is the
    classifier alone at 49, not at the 24 that the network offers a keyword folder."""
    import dataclasses

    from tinytune.errors import BudgetError
    from tinytune.evaluators import HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.search import SearchConfig
    from tinytune.search.config.budgets import check_feasible
    from tinytune.search.run.preflight import _fed_by
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    shape = (1, 49, 40)
    path = tmp_path / "ds-cnn.pt2"
    net = build_network("ds-cnn", shape, 3).eval()
    torch.export.save(torch.export.export(net, (torch.zeros(1, *shape),)), path)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "s.npz", X=rng.normal(size=(60, *shape)), y=np.repeat(np.arange(3), 20))
    wide = get_supernet(str(path))
    series = _fed_by(wide, get_dataset(f"series:{tmp_path / 's.npz'}"))
    assert (wide.resolutions, series.resolutions) == ((24, 32, 49), (49,))
    assert _fed_by(wide, get_dataset(f"audio:{folder}")).resolutions == (24, 32, 49)
    config = SearchConfig(checkpoint=None, supernet=str(path), n_classes=3)
    hw = HardwareEvaluator(series, 3, config.hardware, get_device("stm32f746"))
    floor = hw(make_preset("last", series, default_subnet(series))).sram_bytes
    check_feasible(dataclasses.replace(config, sram_budget_bytes=floor), hw)
    with pytest.raises(BudgetError, match=f"needs {floor} bytes"):
        check_feasible(dataclasses.replace(config, sram_budget_bytes=floor - 1), hw)
