"""Which configurations a contribution analysis fine-tunes (:class:`ContributionPlan`, a field
of the search's config), and each one as a candidate (:class:`ContributionEntry`). The analysis
itself is :mod:`tinytune.search.ladder.contribution`."""

from __future__ import annotations

from dataclasses import dataclass

from tinytune.errors import ConfigError
from tinytune.spaces import (
    WEIGHT_RATIOS,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    SubnetConfig,
    SupernetSpec,
    UpdateScheme,
    block_count,
    conv_kinds,
)

__all__ = ["LITE_BRANCH", "ContributionEntry", "ContributionPlan"]

LITE_BRANCH = LiteResidualBranch()
"""The branch shape every lite residual entry is measured with (TinyTL's default)."""


@dataclass(frozen=True)
class ContributionEntry:
    """One configuration to fine-tune: its name in the table and its candidate."""

    entry: str
    part: str
    candidate: Candidate
    layer: int | None = None
    ratio: float | None = None


@dataclass(frozen=True)
class ContributionPlan:
    """Which configurations a contribution analysis fine-tunes.

    Attributes:
        weight_layers: convolutions (from the input) whose weights are analysed; None picks the
            default subset (see :mod:`tinytune.search.ladder.contribution`).
        ratios: input-channel ratios of each analysed weight.
        bias_ks: extra bias tails to measure; the tails that the analysed layers need and all
            biases are always measured.
        lite_offsets: blocks to try a lite residual branch on, counted from the last block (0).
        norm: also measure updating the per-channel scales of the whole tail.
    """

    weight_layers: tuple[int, ...] | None = None
    ratios: tuple[float, ...] = WEIGHT_RATIOS
    bias_ks: tuple[int, ...] | None = None
    lite_offsets: tuple[int, ...] = (0, 1, 2, 4, 7)
    norm: bool = True

    def __post_init__(self) -> None:
        for r in self.ratios:
            if r not in WEIGHT_RATIOS:
                raise ConfigError(
                    f"contribution ratio {r!r} is not allowed; allowed: {list(WEIGHT_RATIOS)}"
                )
        for what, values in (
            ("weight layer", self.weight_layers or ()),
            ("bias k", self.bias_ks or ()),
            ("lite offset", self.lite_offsets),
        ):
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
                raise ConfigError(f"every contribution {what} must be an int >= 0: {values}")

    def layers(self, kinds: tuple[str, ...]) -> tuple[int, ...]:
        """The analysed weight layers of a network whose convolutions have ``kinds``."""
        n = len(kinds)
        if self.weight_layers is not None:
            bad = [i for i in self.weight_layers if i >= n]
            if bad:
                raise ConfigError(
                    f"contribution weight layers {bad} do not exist; the sub-network has "
                    f"convolutions 0 to {n - 1}"
                )
            return tuple(sorted(set(self.weight_layers)))
        last = {kind: i for i, kind in enumerate(kinds)}  # last occurrence of each kind
        pw1 = [i for i, kind in enumerate(kinds) if kind == "pw1"]
        picked = {n - 1, *(last[k] for k in ("pw2", "dw", "pw1") if k in last)}
        if pw1:
            picked.add(pw1[len(pw1) // 2])
        return tuple(sorted(picked))

    def bias_tails(self, kinds: tuple[str, ...]) -> tuple[int, ...]:
        """The bias tails k to measure: the analysed layers' tails, all biases, and extras."""
        n = len(kinds)
        ks = {n - i for i in self.layers(kinds)} | {n}
        if self.bias_ks is not None:
            ks |= {k for k in self.bias_ks if 0 < k <= n}
        else:
            pw1 = [i for i, kind in enumerate(kinds) if kind == "pw1"]
            if pw1:
                ks.add(n - pw1[(3 * len(pw1)) // 4])
        return tuple(sorted(ks))

    def entries(self, spec: SupernetSpec, subnet: SubnetConfig) -> list[ContributionEntry]:
        """Every configuration of the analysis of ``subnet``, base first."""
        kinds = conv_kinds(spec, subnet)
        n = len(kinds)

        def candidate(update: UpdateScheme, lite: LiteResidualConfig | None = None) -> Candidate:
            return Candidate(spec.name, subnet, lite or LiteResidualConfig(), update)

        out = [ContributionEntry("base", "base", candidate(UpdateScheme(0)))]
        for k in self.bias_tails(kinds):
            out.append(ContributionEntry(f"bias:{k}", "bias", candidate(UpdateScheme(k)), k))
        for i in self.layers(kinds):
            for r in self.ratios:
                update = UpdateScheme(n - i, ((i, r),))
                out.append(
                    ContributionEntry(f"weight:{i}:{r:g}", "weight", candidate(update), i, r)
                )
        for offset in sorted(set(self.lite_offsets)):
            block = block_count(spec, subnet) - 1 - offset
            if block >= 1:
                lite = LiteResidualConfig(((block, LITE_BRANCH),))
                out.append(
                    ContributionEntry(
                        f"lite:{block}", "lite", candidate(UpdateScheme(0), lite), block
                    )
                )
        if self.norm:
            out.append(ContributionEntry("norm", "norm", candidate(UpdateScheme(n, norm=True))))
        return out
