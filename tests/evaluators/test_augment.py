"""Augmented views of the training images: each crop is the bilinear resampling of its window,
drawn once per fine-tune from its seed, and a view's frozen prefix computed once trains to what
the whole network on each augmented batch trains to."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.evaluators.test_finetune import SPEC, _net, _pixel_splits
from tinytune.errors import ConfigError
from tinytune.evaluators.finetune import (
    AUGMENT_VIEWS,
    CROP_AREA,
    FinetuneConfig,
    augment_table,
    finetune,
    resized_crops,
)
from tinytune.spaces import default_subnet

FINETUNE = importlib.import_module("tinytune.evaluators.finetune")


def _bilinear(image: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The crop ``row`` of ``image`` (C, H, W), in float64 by hand: output pixel (i, j) reads
    the window at its centre, ``y = (i + 0.5) / H`` of the window's height from its top, the
    window's side ``s`` of the image's and centred at ``(dx, dy)`` halves of the image from the
    image's centre; mirrored, column j reads the window's column from its right; the four
    nearest pixels weighed by distance, a pixel beyond the border reading the border's."""
    side, dx, dy, mirror = (float(v) for v in row)
    c, h, w = image.shape
    out = np.zeros((c, h, w))
    for i in range(h):
        for j in range(w):
            u = mirror * ((2 * j + 1) / w - 1)  # the output's normalised position
            v = (2 * i + 1) / h - 1
            x = ((side * u + dx + 1) * w - 1) / 2  # the image's pixel coordinates
            y = ((side * v + dy + 1) * h - 1) / 2
            x0, y0 = int(np.floor(x)), int(np.floor(y))
            fx, fy = x - x0, y - y0
            for yy, wy in ((y0, 1 - fy), (y0 + 1, fy)):
                for xx, wx in ((x0, 1 - fx), (x0 + 1, fx)):
                    yc, xc = min(max(yy, 0), h - 1), min(max(xx, 0), w - 1)
                    out[:, i, j] += wy * wx * image[:, yc, xc]
    return out


def test_a_crop_is_the_bilinear_resampling_of_its_window() -> None:
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (6, 3, 9, 9)).astype(np.float32)
    table = np.concatenate([augment_table(4, 3, 1, flip=True), augment_table(2, 4, 2, True)])
    table[0] = (1.0, 0.0, 0.0, 1.0)  # the whole image (itself)
    table[1] = (1.0, 0.0, 0.0, -1.0)  # its mirror image
    got = resized_crops(torch.from_numpy(images), torch.from_numpy(table)).numpy()
    for k in range(6):
        np.testing.assert_allclose(got[k], _bilinear(images[k], table[k]), atol=2e-6)


def test_the_crops_are_drawn_from_the_seed_inside_the_image() -> None:
    a = augment_table(2000, 7, 2, flip=True)
    assert np.array_equal(a, augment_table(2000, 7, 2, flip=True))
    assert not np.array_equal(a, augment_table(2000, 7, 3, flip=True))  # another view
    assert not np.array_equal(a, augment_table(2000, 8, 2, flip=True))  # another seed
    area = a[:, 0] ** 2
    assert CROP_AREA[0] <= area.min() and area.max() <= CROP_AREA[1]
    assert (np.abs(a[:, 1:3]) <= 1 - a[:, :1] + 1e-7).all()  # the window inside the image
    assert set(np.unique(a[:, 3])) == {-1.0, 1.0}
    assert 0.45 < (a[:, 3] < 0).mean() < 0.55
    assert (augment_table(2000, 7, 2, flip=False)[:, 3] == 1.0).all()


def test_an_unknown_augmentation_is_refused() -> None:
    with pytest.raises(ConfigError, match="augment 'rotate' is not one of"):
        FinetuneConfig(augment="rotate")


@pytest.mark.parametrize("augment", ["crop", "crop-flip"])
def test_the_first_epoch_reads_the_images_and_the_next_their_views(augment: str) -> None:
    pixels, _ = _pixel_splits(default_subnet(SPEC).resolution)

    def trained(epochs: int, augment: str) -> dict[str, torch.Tensor]:
        net = _net(7)
        finetune(net, pixels, FinetuneConfig(epochs=epochs, batch_size=8, lr=0.5, augment=augment))
        return {n: p for n, p in net.named_parameters() if p.requires_grad}

    plain, first = trained(1, "none"), trained(1, augment)
    assert all(torch.equal(p, first[n]) for n, p in plain.items())
    plain, second = trained(2, "none"), trained(2, augment)
    assert not all(torch.equal(p, second[n]) for n, p in plain.items())


def test_a_views_prefix_computed_once_trains_to_the_same_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pixels, _ = _pixel_splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(
        epochs=2 * (AUGMENT_VIEWS + 1), batch_size=8, lr=0.5, augment="crop-flip"
    )
    kept = _net(7)
    assert kept.frozen_prefix() > 0
    seen: list[int] = []
    real = FINETUNE._View.batch
    monkeypatch.setattr(FINETUNE._View, "batch", lambda v, i: seen.append(len(i)) or real(v, i))
    result = finetune(kept, pixels, config)
    assert sum(seen) == 1 + AUGMENT_VIEWS * 40  # an image to size the views, then each once
    monkeypatch.setattr(FINETUNE, "PREFIX_CACHE_BYTES", 0)  # every batch from the images
    seen.clear()
    whole = _net(7)
    again = finetune(whole, pixels, config)
    assert sum(seen) == 1 + 2 * AUGMENT_VIEWS * 40  # each view read in each of its epochs
    assert result.steps == again.steps
    assert result.train_loss == pytest.approx(again.train_loss, rel=1e-5)
    for name, p in kept.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(
                p, dict(whole.named_parameters())[name], rtol=1e-5, atol=1e-6
            )


def test_augmenting_samples_that_are_not_images_is_refused_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.networks.zoo import SensorCNN1d, randomise_bn
    from tinytune.cli.main import main

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imu.npz", X=rng.normal(size=(30, 6, 64)), y=np.arange(30) % 3)
    torch.manual_seed(0)
    network = tmp_path / "imu.pt2"
    module = randomise_bn(SensorCNN1d(classes=3))
    torch.export.save(torch.export.export(module, (torch.zeros(1, 6, 64),)), str(network))
    db = tmp_path / "s.db"
    argv = ["search", "--dataset", f"series:{tmp_path / 'imu.npz'}", "--augment", "crop"]
    argv += ["--supernet", str(network), "--storage", f"sqlite:///{db}", "--trials", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--augment crop crops images; data set" in err, err
    assert "gives samples of 6x1x64: leave it at none" in err
    assert not db.exists()
