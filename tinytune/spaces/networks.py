"""A user's own network (a ``torch.export`` archive or an ONNX model) as a search space.

The network is read as an op graph (:func:`tinytune.networks.read_network`) into a fixed
:class:`~tinytune.spaces.SupernetSpec` of family ``graph``, whose stages are those of its
:func:`~tinytune.networks.plan` (one block each, between single-tensor cut points). The search
chooses where to cut it (after any stage from the middle on: a global pool and a new classifier
on that stage's output, as for a cut of EfficientNet-Lite0), the update scheme over the
convolutions kept (in the graph's own order), and the input resolution. Where a global pool
precedes the classifier, that is the exported size and three quarters and half of it: the side
of a square input, or the frames of a spectrogram (one channel of frames by bands), its bands in
proportion, which a keyword folder's front-end computes at each
(:meth:`tinytune.data.AudioDataset.at`). A sensor window (one row), and a network whose
classifier reads a flattened map, are searched at the size they were exported at.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from tinytune.errors import ConfigError
from tinytune.networks import (
    conv_roles,
    plan,
    read_network,
    takes_other_sizes,
    total_stride,
)

__all__ = ["check_network_input", "network_fields", "network_resolutions"]

IMAGE_CHANNELS = 3
"""The channels of the images the image data sets give."""


def network_resolutions(size: int, stride: int) -> tuple[int, ...]:
    """The input sizes searched for a network exported at ``size`` whose feature map is
    ``stride`` times smaller before its global pool: ``size`` and, rounded down to a multiple
    of 8, ¾ and ½ of it, each at least ``stride`` (one output pixel) and 16."""
    smaller = {size * 3 // 4 // 8 * 8, size // 2 // 8 * 8}
    return tuple(sorted({size} | {r for r in smaller if r >= max(stride, 16) and r < size}))


def _spectrogram(shape: tuple[int, ...]) -> bool:
    """Whether an input of ``shape`` (N, C, H, W) is a keyword clip's features: one channel of
    frames (H) by bands (W), which a front-end makes at other frames too."""
    return shape[1] == 1 and shape[2] > 1 and shape[2] != shape[3]


def network_fields(path: str) -> dict[str, Any]:
    """The fields of the :class:`~tinytune.spaces.SupernetSpec` of the network in ``path``,
    its name the file's absolute path.

    Raises:
        ModelError: the file cannot be read or holds an op tinytune cannot train.
        ConfigError: it has no convolution.
    """
    resolved = os.path.abspath(path)
    try:
        stat = os.stat(resolved)
    except OSError:
        read_network(resolved)  # its one line: the file cannot be read
        raise
    return dict(_fields(path, resolved, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _fields(path: str, resolved: str, _size: int, _mtime: int) -> tuple[tuple[str, Any], ...]:
    """:func:`network_fields`, read once per file version (every candidate looks its network
    up)."""
    graph = read_network(resolved)
    _, _, height, width = graph.input_shape
    roles = conv_roles(graph)
    if not roles:
        raise ConfigError(
            f"{path!r} has no convolution; tinytune fine-tunes convolutional networks"
        )
    layout = plan(graph)
    blocks, counts = [], []
    for stage in range(len(layout.stages)):
        steps = layout.stage_steps(stage)
        convs = [s.nodes[0] for s in steps if s.op == "conv"]
        stride = 1
        for c in convs:
            stride *= c.attrs["stride"][0]
        kernel = max(c.attrs["kernel"][0] for c in convs)
        blocks.append(((kernel, stride, 1, graph.shapes[steps[-1].output][1]),))
        counts.append(len(convs))
    n = len(blocks)
    fields = {
        "name": resolved,
        "family": "graph",
        "width_mult": 1.0,
        "resolutions": (
            network_resolutions(height, total_stride(graph))
            if takes_other_sizes(graph) and (height == width or _spectrogram(graph.input_shape))
            else (height,)
        ),
        "default_resolution": height,
        "network_file": resolved,
        "blocks": tuple(blocks),
        "min_stages": (n + 1) // 2,
        "default_stages": n,
        "ks_choices": tuple(sorted({b[0][0] for b in blocks})),
        "expand_choices": (1,),
        "head_channels": 0,
        "conv_roles": roles,
        "stage_convs": tuple(counts),
    }
    return tuple(fields.items())


def check_network_input(
    path: str, dataset: str, shape: tuple[int, int, int] | None = None
) -> None:
    """Refuse, in one line, a network whose input data set ``dataset`` cannot feed: samples
    of one ``shape`` (C, H, W) must be the network's input, images (``shape`` None: square
    3-channel images at any resolution) a square 3-channel one.

    Raises:
        ConfigError: the network takes another input.
    """
    _, channels, height, width = read_network(os.path.abspath(path)).input_shape
    if shape is not None:
        if (channels, height, width) != tuple(shape):
            c, h, w = shape
            raise ConfigError(
                f"{path!r} takes a {channels}x{height}x{width} input; data set {dataset!r} "
                f"gives samples of {c}x{h}x{w} (export the network for that input)"
            )
        return
    if channels != IMAGE_CHANNELS or height != width:
        raise ConfigError(
            f"{path!r} takes a {channels}x{height}x{width} input; data set {dataset!r} gives "
            f"square {IMAGE_CHANNELS}-channel images (export the network for RGB input at a "
            "square size, e.g. 1x3x64x64)"
        )
