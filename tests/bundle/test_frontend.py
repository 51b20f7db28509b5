"""An audio bundle's input map (:mod:`tinytune.bundle.frontend`): 255 thresholds give the int8
level of every ``int16`` feature as the evaluated map does; a map that is not monotone, or not
one level per value, is refused; the example's clips are checked against their samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinytune.bundle.errors import BundleError
from tinytune.bundle.frontend import (
    LEVELS,
    Frontend,
    WindowInput,
    input_steps,
    render_frontend,
)
from tinytune.bundle.samples import Samples
from tinytune.data.logmel import LogMelSpec

VALUES = np.arange(-(2**15), 2**15)


def _level(steps: np.ndarray, v: int) -> int:
    """The C's binary search, step by step: the thresholds at or below ``v``, less 128."""
    low, high = 0, LEVELS
    while low < high:
        mid = (low + high) >> 1
        if steps[mid] <= v:
            low = mid + 1
        else:
            high = mid
    return low - 128


@pytest.mark.parametrize(
    "levels",
    [
        np.clip(np.round(VALUES / 97.3) - 3, -128, 127),  # the usual: rounded, clamped both ends
        np.clip(np.round((VALUES - 2000) / 1.7), -128, 127),  # a steep map: most values clamp
        np.full(VALUES.size, 5),  # one level for every value
        np.clip(np.floor(VALUES / 256.0), -128, 127),  # every level reached
    ],
)
def test_the_thresholds_give_every_values_level(levels: np.ndarray) -> None:
    steps = input_steps(levels)
    assert steps.dtype == np.int32 and steps.shape == (LEVELS,)
    assert np.all(np.diff(steps) >= 0)
    found = np.searchsorted(steps, VALUES, side="right") - 128
    assert np.array_equal(found, levels)
    for v in (-32768, -1, 0, 1, 12345, 32767):  # the C's search, as written
        assert _level(steps, v) == levels[v + 32768]


def test_a_map_that_is_not_monotone_or_not_one_level_a_value_is_refused() -> None:
    levels = np.clip(np.round(VALUES / 97.3), -128, 127)
    with pytest.raises(BundleError, match="not monotone: its standardisation has a negative"):
        input_steps(levels[::-1])
    with pytest.raises(BundleError, match="needs 65536 int8 levels"):
        input_steps(levels[:-1])
    with pytest.raises(BundleError, match="needs 65536 int8 levels"):
        input_steps(levels * 2)


def test_the_rendered_front_end_holds_the_specs_tables_and_the_thresholds() -> None:
    spec = LogMelSpec(clip=8000, bands=20)
    frontend = Frontend.of(spec, lambda v: np.clip(np.round(v / 64.0), -128, 127))
    decls, impl, doc = render_frontend(frontend)
    assert "tt_input_from_pcm16() makes it" in doc
    assert "#define TT_CLIP_SAMPLES 8000" in decls and "int tt_input_from_pcm16(" in decls
    assert f"#define TT_FRONTEND_SCRATCH_BYTES {spec.scratch_bytes}" in decls
    assert f"#define TT_FRONTEND_TABLE_BYTES {frontend.flash_bytes}" in decls
    assert "static const int16_t tt_fe_hann[480]" in impl
    assert f"static const uint16_t tt_fe_band_weights[{spec.band_weights.size}]" in impl
    assert f"for (frame = 0; frame < {spec.frames}; frame++)" in impl
    entry = frontend.entry()
    assert (entry["clip_samples"], entry["bands"], entry["frames"]) == (8000, 20, spec.frames)
    tables = 2 * (480 + 256 + 256 + 20 + 20 + spec.band_weights.size) + 4 * LEVELS
    assert frontend.flash_bytes == tables


def test_the_examples_recorded_samples_are_int16_clips_or_float64_values() -> None:
    images = np.zeros((2, 1, 49, 40), np.int8)
    labels = np.array([0, 1])
    Samples(images, labels, "train", np.zeros((2, 16_000), np.int16))
    Samples(images, labels, "train", np.zeros((2, 1960), np.float64))
    with pytest.raises(BundleError, match="2 samples need as many int16 clips or float64"):
        Samples(images, labels, "train", np.zeros((3, 16_000), np.int16))
    with pytest.raises(BundleError, match="float64 values, got float32"):
        Samples(images, labels, "train", np.zeros((2, 16_000), np.float32))


def test_a_sensors_values_become_the_input_the_search_made_of_them(tmp_path: Path) -> None:
    """``WindowInput.reference`` (what ``tt_input_from_values`` computes) against the data
    set's own standardisation and the quantizer's own rounding, on a folder's windows and on
    values placed next to every rounding boundary of the input's scale; the constants are
    written as exact hexadecimal doubles."""
    import torch

    from bench.vibration import make
    from tinytune.data import get_dataset
    from tinytune.quant.model import ActQuant

    make(tmp_path, machines=6, takes=2, conditions=3, seed=3)
    data = get_dataset(f"series:{tmp_path}")
    act = ActQuant(0.037, -3)
    window = WindowInput(*data.normalisation, act.scale, act.zero)
    values = data.recorded("train", 8)
    x = np.concatenate([values, values * 1.001 + 1e-3, values * 40.0])  # clamped ones too
    searched = act.quantize(torch.from_numpy(data.standardise(x.reshape(-1, 3, 1, 256))))
    mine = window.reference(x.reshape(-1, 3, 256))
    assert np.array_equal(mine.reshape(-1), searched.numpy().astype(np.int8).reshape(-1))
    # a value on each side of every boundary between two levels, channel 0
    mean, std = data.normalisation[0][0], data.normalisation[1][0]
    edges = (np.arange(-128, 128) + 0.5) * act.scale * std + mean
    near = np.stack([np.nextafter(edges, -np.inf), edges, np.nextafter(edges, np.inf)])
    probe = np.repeat(near.reshape(-1)[:, None], 3, axis=1)[:, :, None, None]
    searched = act.quantize(torch.from_numpy(data.standardise(probe))).numpy().astype(np.int8)
    assert np.array_equal(window.reference(probe[:, :, 0, :]), searched[:, :, 0, :])
    decls, impl, doc = window.render()
    assert "int tt_input_from_values(const double *values, int8_t *input);" in decls
    assert f"static const double tt_in_scale = {float(act.scale).hex()};" in impl
    assert float.fromhex(impl.split("tt_in_mean[3] = {")[1].split(",")[0]) == mean
    assert "tt_input_from_values() makes it" in doc
