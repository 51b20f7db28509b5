"""Named fine-tuning schemes from the literature, as candidates of the joint space.

====================  =====================================================================
name                  what is trained (the classifier is always trained)
====================  =====================================================================
``full``              every weight and bias (FT-Full)
``last``              the classifier only (FT-Last)
``bias-only``         every bias (TinyTL-B)
``bn+last``           every bias and per-channel scale, i.e. the folded BatchNorm γ and β
                      (FT-Norm+Last)
``tinytl``            a lite residual branch on every MBConv block but the first (a user's
                      network: every stage but the first), and every bias (TinyTL-L+B,
                      TinyTL Table 2)
``mcunetv3``          the biases of the last half of the convolutions and the weights of the
                      last six expansion (pw1) convolutions in that tail, the first four in
                      full and the last two on 1/8 and 1/4 of their input channels — the shape
                      of the 100 KB MCUNet scheme shipped with tiny-training
                      (``algorithm/scripts/sparse_update.sh``)
====================  =====================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tinytune.errors import ConfigError
from tinytune.spaces.candidate import (
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    block_count,
    conv_kinds,
)
from tinytune.spaces.supernets import SupernetSpec

__all__ = ["PRESET_NAMES", "default_subnet", "make_preset", "preset_scheme", "smallest_subnet"]


def default_subnet(spec: SupernetSpec, size: str = "min") -> SubnetConfig:
    """A reference sub-network: ``min`` (smallest depths, kernels and expand ratios, the
    default resolution; a fixed network cut at its default stage count, every block kept) or
    ``max``
    (the largest sub-network at the largest resolution)."""
    if size not in ("min", "max"):
        raise ConfigError(f"unknown sub-network size {size!r}; allowed: 'min', 'max'")
    pick = min if size == "min" else max
    n_stages = spec.default_stages if spec.fixed and size == "min" else spec.n_stages
    stages = []
    for i in range(n_stages):
        depth = max(spec.stage_depths(i)) if spec.fixed else pick(spec.stage_depths(i))
        stages.append(
            StageConfig(
                tuple(pick(spec.block_kernels(i, b)) for b in range(depth)),
                tuple(pick(spec.block_expands(i, b)) for b in range(depth)),
            )
        )
    res = spec.default_resolution or spec.resolutions[len(spec.resolutions) // 2]
    res = res if size == "min" else max(spec.resolutions)
    return SubnetConfig(res, tuple(stages))


def smallest_subnet(spec: SupernetSpec, stages: int | None = None) -> SubnetConfig:
    """The cheapest sub-network: every choice at its smallest, the smallest resolution, cut
    after ``stages`` stages (a fixed network; default: its default cut)."""
    n_stages = stages or (spec.default_stages if spec.fixed else spec.n_stages)
    blocks = []
    for i in range(n_stages):
        depth = min(spec.stage_depths(i))
        blocks.append(
            StageConfig(
                tuple(min(spec.block_kernels(i, b)) for b in range(depth)),
                tuple(min(spec.block_expands(i, b)) for b in range(depth)),
            )
        )
    return SubnetConfig(min(spec.resolutions), tuple(blocks))


def _full(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    n = len(kinds)
    return UpdateScheme(n, tuple((i, 1.0) for i in range(n))), LiteResidualConfig()


def _last(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    return UpdateScheme(0), LiteResidualConfig()


def _bias(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    return UpdateScheme(len(kinds)), LiteResidualConfig()


def _norm(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    return UpdateScheme(len(kinds), norm=True), LiteResidualConfig()


def _tinytl(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    branches = tuple((b, LiteResidualBranch()) for b in range(1, n_blocks))
    return UpdateScheme(len(kinds)), LiteResidualConfig(branches)


def _mcunetv3(kinds: tuple[str, ...], n_blocks: int) -> tuple[UpdateScheme, LiteResidualConfig]:
    n = len(kinds)
    k = math.ceil(n / 2)
    pw1 = [i for i in range(n - k, n) if kinds[i] == "pw1"][-6:]
    ratios = [1.0] * max(0, len(pw1) - 2) + [0.125, 0.25][-min(2, len(pw1)) :] if pw1 else []
    return UpdateScheme(k, tuple(zip(pw1, ratios, strict=True))), LiteResidualConfig()


_PRESETS: dict[str, Callable[[tuple[str, ...], int], tuple[UpdateScheme, LiteResidualConfig]]] = {
    "full": _full,
    "last": _last,
    "bias-only": _bias,
    "bn+last": _norm,
    "tinytl": _tinytl,
    "mcunetv3": _mcunetv3,
}
PRESET_NAMES = tuple(_PRESETS)


def preset_scheme(
    name: str, spec: SupernetSpec, subnet: SubnetConfig
) -> tuple[UpdateScheme, LiteResidualConfig]:
    """The update scheme and lite residuals of preset ``name`` on ``subnet``."""
    try:
        build = _PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; allowed: {', '.join(PRESET_NAMES)}") from None
    return build(conv_kinds(spec, subnet), block_count(spec, subnet))


def make_preset(name: str, spec: SupernetSpec, subnet: SubnetConfig | None = None) -> Candidate:
    """Preset ``name`` as a candidate on ``subnet`` (default: :func:`default_subnet`)."""
    subnet = subnet if subnet is not None else default_subnet(spec)
    update, lite = preset_scheme(name, spec, subnet)
    return Candidate(spec.name, subnet, lite, update)
