"""How a camera frame becomes the model's int8 input, as the search made its images.

An image folder's images (:class:`~tinytune.data.ImageFolderDataset`) are 8-bit RGB, resized
to R×R by Pillow's bilinear filter (the aspect ratio not kept), handed out as
:class:`~tinytune.data.Pixels` (0..255 to [−1, 1] in float32) and quantized by
:meth:`~tinytune.quant.QuantizedNet.quantize_input`. The bundle's C does the resize itself
(``kernels/tt_image.c``, Pillow's 8-bit arithmetic) and the rest with one 256-entry table,
made here by running those very functions on every 8-bit value: exact by construction.
"""

from __future__ import annotations

import re

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.quant import QuantizedNet

__all__ = [
    "HORIZONTAL_FIRST",
    "PILLOW13",
    "input_rule",
    "input_table",
    "resize_order",
    "series_rule",
]

# the values of TT_RESIZE_HORIZONTAL_FIRST and TT_RESIZE_PILLOW13 (kernels/tt_int8.h)
HORIZONTAL_FIRST = 0
PILLOW13 = 1


def resize_order(version: str) -> int:
    """The order of the two passes of Pillow ``version``'s bilinear resize: horizontal first
    (Pillow 10 to 12) or, from Pillow 13 on, vertical first when the height loses more than
    twice the pixels the width loses (its ``ImagingResampleInner``).

    Raises:
        BundleError: the version is not a Pillow version of the form ``MAJOR.MINOR...``.
    """
    match = re.match(r"(\d+)\.", version)
    if match is None:
        raise BundleError(f"cannot read Pillow's version {version!r}; expected MAJOR.MINOR...")
    return PILLOW13 if int(match[1]) >= 13 else HORIZONTAL_FIRST


def input_table(net: QuantizedNet) -> np.ndarray:
    """The model's int8 input of each 8-bit sample 0..255, ``(256,)`` int8: the sample as the
    image-folder data set hands it out (:class:`~tinytune.data.Pixels`), quantized by
    ``net.quantize_input``.

    Raises:
        BundleError: the three channels quantize a sample differently (the table is one for
            all three).
    """
    import torch

    from tinytune.data import Pixels

    side = 16  # 16 x 16 = 256: every value once, in each of the three channels
    storage = np.repeat(np.arange(256, dtype=np.uint8).reshape(1, side, side, 1), 3, axis=3)
    floats = Pixels(storage)[0:1]  # (1, 3, 16, 16) float32
    q = net.quantize_input(torch.from_numpy(floats)).numpy().reshape(3, 256)
    if not (q == q[0]).all():
        raise BundleError("the model's input quantization differs between channels")
    return q[0].astype(np.int8)


_RULES = {
    "digits": (
        "scikit-learn's 8x8 digits: 0..16 per pixel scaled to [0, 1] in float32, {resized}, "
        "clipped to [0, 1], mapped to [-1, 1], the grey copied to the three channels, then "
        "quantized. A camera frame is not such a digit: tt_quantize_grey8() applies the "
        "image-folder rule (8-bit samples, Pillow's 8-bit resize), on which this model was not "
        "searched"
    ),
    "procedural": (
        "tinytune's procedural scenes, drawn in float32 in [-1, 1] at {r}x{r} and quantized: "
        "they come from no camera; tt_quantize_rgb888() applies the image-folder rule, on "
        "which this model was not searched"
    ),
}
_FOLDER = (
    "the image folder's files, each converted to 8-bit RGB (Pillow's convert('RGB'): a grey "
    "image to three equal channels, a palette image to its colours, alpha dropped), resized to "
    "{r}x{r} by Pillow's bilinear filter (the aspect ratio not kept), mapped from 0..255 to "
    "[-1, 1] (v / 127.5 - 1 in float32) and quantized: what tt_quantize_rgb888() and "
    "tt_quantize_grey8() do to an 8-bit frame"
)


def series_rule(shape: tuple[int, ...], mean: np.ndarray, std: np.ndarray) -> str:
    """How a series file's samples of ``shape`` (C, H, W) became the model's input: each
    channel standardised with the training split's ``mean`` and ``std``, then quantized, in
    one sentence without a full stop."""
    return (
        f"the series file's samples of {'x'.join(map(str, shape))} (channels first), channel "
        "c standardised as (v - mean[c]) / std[c] with the training split's mean and standard "
        f"deviation (float64: {_numbers(mean)} and {_numbers(std)}), then quantized"
    )


def audio_rule(shape: tuple[int, ...], mean: np.ndarray, std: np.ndarray) -> str:
    """How an audio folder's clips became the model's input of ``shape`` (1, frames, bands):
    their log-mel features in log2 units, standardised, then quantized, in one sentence
    without a full stop."""
    return (
        f"the audio folder's clips as log-mel features of {'x'.join(map(str, shape))} (Q8 log2 "
        "over 256), standardised as (v - mean) / std with the training split's mean and "
        f"standard deviation (float64: {_numbers(mean)} and {_numbers(std)}), then quantized"
    )


def _numbers(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in values) + "]"


def input_rule(dataset: str, resolution: int) -> str:
    """How the samples of ``dataset`` (its name, as :func:`tinytune.data.get_dataset` takes
    it) became the model's input at ``resolution``, in one sentence without a full stop."""
    if dataset.startswith("imagefolder:"):
        return _FOLDER.format(r=resolution)
    rule = _RULES.get(dataset)
    if rule is None:
        raise BundleError(
            f"no input rule is known for data set {dataset!r}; known: imagefolder:PATH, "
            + ", ".join(_RULES)
        )
    resized = (
        "kept at 8x8"
        if resolution == 8
        else f"resized to {resolution}x{resolution} by Pillow's bilinear filter on the float "
        "image (mode F: no 8-bit rounding)"
    )
    return rule.format(r=resolution, resized=resized)
