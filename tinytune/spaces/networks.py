"""A user's own network (a ``torch.export`` archive or an ONNX model) as a search space.

The network is read as an op graph (:func:`tinytune.networks.read_network`) into a fixed
:class:`~tinytune.spaces.SupernetSpec` of family ``graph``: its one sub-network is the whole
network, whose convolutions the update schemes index in the graph's own order. The search
chooses the update scheme and the input resolution: the exported size, and where a global pool
before the classifier lets the network take smaller images, three quarters and half of it.
"""

from __future__ import annotations

import os
from typing import Any

from tinytune.errors import ConfigError
from tinytune.networks import conv_roles, read_network, total_stride

__all__ = ["network_fields", "network_resolutions"]

IMAGE_CHANNELS = 3
"""The channels of the images the data sets give."""


def network_resolutions(size: int, stride: int) -> tuple[int, ...]:
    """The input sizes searched for a network exported at ``size`` whose feature map is
    ``stride`` times smaller before its global pool: ``size`` and, rounded down to a multiple
    of 8, ¾ and ½ of it, each at least ``stride`` (one output pixel) and 16."""
    smaller = {size * 3 // 4 // 8 * 8, size // 2 // 8 * 8}
    return tuple(sorted({size} | {r for r in smaller if r >= max(stride, 16) and r < size}))


def network_fields(path: str) -> dict[str, Any]:
    """The fields of the :class:`~tinytune.spaces.SupernetSpec` of the network in ``path``,
    its name the file's absolute path.

    Raises:
        ModelError: the file cannot be read or holds an op tinytune cannot train.
        ConfigError: its input is not a square image of 3 channels, which the data sets give.
    """
    resolved = os.path.abspath(path)
    graph = read_network(resolved)
    _, channels, height, width = graph.input_shape
    if channels != IMAGE_CHANNELS:
        raise ConfigError(
            f"{path!r} takes {channels}-channel input; the data sets tinytune searches give "
            f"{IMAGE_CHANNELS}-channel images (export the network for RGB input)"
        )
    if height != width:
        raise ConfigError(
            f"{path!r} takes a {height}x{width} input; the data sets tinytune searches give "
            "square images (export the network at a square size, e.g. 64x64)"
        )
    roles = conv_roles(graph)
    if not roles:
        raise ConfigError(
            f"{path!r} has no convolution; tinytune fine-tunes convolutional networks"
        )
    return {
        "name": resolved,
        "family": "graph",
        "width_mult": 1.0,
        "resolutions": network_resolutions(height, total_stride(graph)),
        "default_resolution": height,
        "network_file": resolved,
        "conv_roles": roles,
        "input_channels": channels,
    }
