"""Pure descriptions of the Once-for-All supernets that tinytune can search.

A :class:`SupernetSpec` says which sub-networks exist (stages, depths, kernel sizes, expand ratios,
input resolutions) without building any torch module; :mod:`tinytune.models.supernet` builds the
matching ``ofa`` network. The structural constants are those of ``ofa`` 0.1.0
(``ofa/imagenet_classification/elastic_nn/networks/ofa_proxyless.py`` and ``ofa_mbv3.py``):

* ProxylessNAS: stem conv (stride 2), a fixed first MBConv block (3×3, e=1), five elastic stages
  of up to four blocks and a last stage of one block; ReLU6 everywhere.
* MobileNetV3: stem conv (stride 2, h-swish), a fixed first block, five elastic stages of up to
  four blocks, squeeze-and-excitation in stages 2, 4 and 5 (counted from 1), a final 1×1 expand
  conv, global pooling and a 1×1 feature-mix conv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinytune.errors import ConfigError

__all__ = [
    "FAMILIES",
    "PUBLISHED_SUPERNETS",
    "SUPERNET_FORMS",
    "SupernetSpec",
    "family_supernets",
    "get_supernet",
]

FAMILIES = ("proxyless", "mbv3")
SUPERNET_FORMS = (
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
    """The elastic dimensions of one supernet.

    Attributes:
        name: canonical name (``ofa-proxyless-w0.35`` or a published id).
        family: ``"proxyless"`` or ``"mbv3"``.
        width_mult: the fixed width multiplier of the supernet.
        stage_max_depth: blocks per elastic stage in the largest sub-network.
        ks_choices: depthwise kernel sizes.
        expand_choices: expand ratios of the inverted bottlenecks.
        depth_choices: depths an elastic stage may take (capped by its maximum).
        resolutions: the input resolutions the search may pick.
        published: True for the ImageNet supernets released with Once-for-All, whose weights
            must be supplied as a file.
    """

    name: str
    family: str
    width_mult: float
    ks_choices: tuple[int, ...] = (3, 5, 7)
    expand_choices: tuple[int, ...] = (3, 4, 6)
    depth_choices: tuple[int, ...] = (2, 3, 4)
    resolutions: tuple[int, ...] = DEFAULT_RESOLUTIONS
    published: bool = False
    stage_max_depth: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"unknown supernet family {self.family!r}; allowed: {FAMILIES}")
        if not 0.1 <= self.width_mult <= 2.0:
            raise ConfigError(
                f"supernet width multiplier {self.width_mult} is out of range; allowed: 0.1 to 2.0"
            )
        depth = max(self.depth_choices)
        stages = (depth,) * 5 + ((1,) if self.family == "proxyless" else ())
        object.__setattr__(self, "stage_max_depth", stages)

    @property
    def n_stages(self) -> int:
        return len(self.stage_max_depth)

    def stage_depths(self, stage: int) -> tuple[int, ...]:
        """The depths that elastic stage ``stage`` (0-based) may take."""
        cap = self.stage_max_depth[stage]
        return tuple(sorted({min(d, cap) for d in self.depth_choices}))

    @property
    def has_se(self) -> tuple[bool, ...]:
        """Whether the blocks of each elastic stage carry squeeze-and-excitation."""
        if self.family == "mbv3":
            return (False, True, False, True, True)
        return (False,) * self.n_stages


def get_supernet(name: str) -> SupernetSpec:
    """Look a supernet up by name.

    Args:
        name: ``ofa-proxyless-w<width>``, ``ofa-mbv3-w<width>`` (any width multiplier, the
            network pre-trained by ``tinytune pretrain``) or a published Once-for-All id.

    Raises:
        ConfigError: the name has none of the allowed forms.
    """
    if not isinstance(name, str):
        raise ConfigError(f"unknown supernet {name!r:.80}; allowed: {', '.join(SUPERNET_FORMS)}")
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


def family_supernets(width: float) -> tuple[SupernetSpec, ...]:
    """One supernet of every family at width multiplier ``width``, in the order of
    :data:`FAMILIES`: the ``ofa-<family>-w<width>`` forms, pre-trained by tinytune.

    Every family has its own structure (MobileNetV3 adds squeeze-and-excitation, h-swish and a
    head after pooling); the published supernets repeat these structures at ImageNet sizes.
    """
    return tuple(get_supernet(f"ofa-{family}-w{width:g}") for family in FAMILIES)
