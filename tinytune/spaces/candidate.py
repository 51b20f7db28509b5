"""A point of the joint search space and its three parts, and how the device schedules it.

A :class:`Candidate` is a sub-network (:class:`SubnetConfig`: of a Once-for-All supernet, or a
cut of a fixed pretrained network), a TinyTL lite
residual configuration (:class:`LiteResidualConfig`) and a sparse update scheme
(:class:`UpdateScheme`), with the :class:`Schedule` of its frozen prefix on the device (whole
images, or patch by patch: the same values, less memory, more time). All are frozen
dataclasses validated on construction, with a canonical JSON form (:meth:`Candidate.to_json`)
whose exact inverse is :meth:`Candidate.from_json`, and a stable key derived from that form.

Conventions (MCUNetV3, "On-Device Training Under 256KB Memory", §2.2, and mit-han-lab/
tiny-training ``partial_backward.py``):

* Convolutions are indexed from the input: 0 is the stem, the classifier is excluded.
* ``bias_last_k`` counts convolutions from the output: the biases of the last k are updated.
* A weight update ``(i, r)`` updates the first ⌈r·C_in⌉ input channels of convolution i,
  r ∈ {1/8, 1/4, 1/2, 1}; every weight-updated convolution lies inside the bias-updated tail.
* The classifier is always trained: a new task needs a new head.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from tinytune.errors import ConfigError
from tinytune.spaces.supernets import SupernetSpec, get_supernet

__all__ = [
    "LITE_DOWNSAMPLE",
    "LITE_EXPAND",
    "LITE_GROUPS",
    "LITE_KERNELS",
    "PATCHES",
    "WEIGHT_RATIOS",
    "Candidate",
    "LiteResidualBranch",
    "LiteResidualConfig",
    "Schedule",
    "StageConfig",
    "SubnetConfig",
    "UpdateScheme",
    "block_count",
    "conv_kinds",
]

WEIGHT_RATIOS = (0.125, 0.25, 0.5, 1.0)
LITE_KERNELS = (3, 5, 7)
LITE_GROUPS = (1, 2, 4)
LITE_DOWNSAMPLE = (1, 2, 4)
LITE_EXPAND = (0.5, 1.0, 2.0)


def _reject_unknown(data: dict[str, Any], allowed: set[str], what: str) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"unknown keys {unknown} in {what}; allowed: {sorted(allowed)}")
    missing = sorted(allowed - set(data))
    if missing:
        raise ConfigError(f"missing keys {missing} in {what}")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class StageConfig:
    """The active blocks of one elastic stage: a kernel size and an expand ratio per block."""

    ks: tuple[int, ...]
    e: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.ks) != len(self.e) or not self.ks:
            raise ConfigError(
                f"a stage needs one kernel size and one expand ratio per block, got ks={self.ks} "
                f"and e={self.e}"
            )

    @property
    def depth(self) -> int:
        return len(self.ks)


@dataclass(frozen=True)
class SubnetConfig:
    """A sub-network: its input resolution and the active blocks of each stage it keeps (every
    stage of a supernet; the first ``len(stages)`` of a fixed network, cut after them)."""

    resolution: int
    stages: tuple[StageConfig, ...]

    @property
    def depths(self) -> tuple[int, ...]:
        return tuple(s.depth for s in self.stages)

    @property
    def n_blocks(self) -> int:
        """Active MBConv blocks, the fixed first block included."""
        return 1 + sum(self.depths)

    def validate(self, spec: SupernetSpec) -> None:
        if self.resolution not in spec.resolutions:
            raise ConfigError(
                f"resolution {self.resolution} is not offered by {spec.name}; allowed: "
                f"{list(spec.resolutions)}"
            )
        if len(self.stages) not in spec.stage_counts:
            if spec.fixed:
                raise ConfigError(
                    f"{spec.name} may be cut after {spec.min_stages} to {spec.n_stages} stages, "
                    f"the sub-network keeps {len(self.stages)}"
                )
            raise ConfigError(
                f"{spec.name} has {spec.n_stages} elastic stages, the sub-network gives "
                f"{len(self.stages)}"
            )
        for i, stage in enumerate(self.stages):
            if stage.depth not in spec.stage_depths(i):
                raise ConfigError(
                    f"stage {i} depth {stage.depth} is not allowed; allowed: "
                    f"{list(spec.stage_depths(i))}"
                )
            for b in range(stage.depth):
                for what, value, allowed in (
                    ("kernel size", stage.ks[b], spec.block_kernels(i, b)),
                    ("expand ratio", stage.e[b], spec.block_expands(i, b)),
                ):
                    if value not in allowed:
                        raise ConfigError(
                            f"{what} {value} in stage {i} is not allowed; allowed: {list(allowed)}"
                        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "resolution": self.resolution,
            "stages": [{"ks": list(s.ks), "e": list(s.e)} for s in self.stages],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubnetConfig:
        _reject_unknown(data, {"resolution", "stages"}, "subnet")
        stages = []
        for i, s in enumerate(data["stages"]):
            _reject_unknown(s, {"ks", "e"}, f"subnet stage {i}")
            stages.append(
                StageConfig(
                    tuple(_int(k, "kernel size") for k in s["ks"]),
                    tuple(_int(e, "expand ratio") for e in s["e"]),
                )
            )
        return cls(_int(data["resolution"], "resolution"), tuple(stages))


@dataclass(frozen=True)
class LiteResidualBranch:
    """The shape of one TinyTL lite residual branch (TinyTL §3.2).

    avg-pool ↓downsample → k×k group conv (``groups``; mid channels = in·expand, rounded to a
    multiple of 8) → GroupNorm → ReLU → 1×1 conv → GroupNorm with its scale initialised to 0 →
    bilinear upsample → added to the block output.
    """

    kernel_size: int = 5
    groups: int = 2
    downsample: int = 2
    expand: float = 1.0

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("kernel size", self.kernel_size, LITE_KERNELS),
            ("groups", self.groups, LITE_GROUPS),
            ("downsample ratio", self.downsample, LITE_DOWNSAMPLE),
            ("expand", self.expand, LITE_EXPAND),
        ):
            if value not in allowed or isinstance(value, bool):
                raise ConfigError(
                    f"lite residual {name} {value!r} is not allowed; allowed: {list(allowed)}"
                )
        object.__setattr__(self, "expand", float(self.expand))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel_size": self.kernel_size,
            "groups": self.groups,
            "downsample": self.downsample,
            "expand": self.expand,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LiteResidualBranch:
        _reject_unknown(data, {"kernel_size", "groups", "downsample", "expand"}, "lite residual")
        return cls(
            _int(data["kernel_size"], "lite residual kernel size"),
            _int(data["groups"], "lite residual groups"),
            _int(data["downsample"], "lite residual downsample ratio"),
            data["expand"],
        )


@dataclass(frozen=True)
class LiteResidualConfig:
    """Which MBConv blocks get a lite residual branch, and its shape.

    ``branches`` maps an active block index (0 is the fixed first block, which never gets one)
    to a branch shape; it is kept sorted by block index.
    """

    branches: tuple[tuple[int, LiteResidualBranch], ...] = ()

    def __post_init__(self) -> None:
        blocks = [b for b, _ in self.branches]
        if blocks != sorted(set(blocks)):
            object.__setattr__(self, "branches", tuple(sorted(dict(self.branches).items())))

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(b for b, _ in self.branches)

    def validate(self, n_blocks: int) -> None:
        """Check the branches sit on blocks 1 to ``n_blocks`` - 1 (:func:`block_count`)."""
        for block, _ in self.branches:
            if not 1 <= block < n_blocks:
                raise ConfigError(
                    f"lite residual on block {block} is not possible; allowed blocks: 1 to "
                    f"{n_blocks - 1} (block 0, the first, gets none)"
                )

    def to_dict(self) -> dict[str, Any]:
        return {"branches": [[b, br.to_dict()] for b, br in self.branches]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LiteResidualConfig:
        _reject_unknown(data, {"branches"}, "lite residual config")
        branches = []
        for item in data["branches"]:
            if not isinstance(item, list) or len(item) != 2:
                raise ConfigError(f"a lite residual entry must be [block, shape], got {item!r}")
            branches.append(
                (_int(item[0], "lite residual block"), LiteResidualBranch.from_dict(item[1]))
            )
        return cls(tuple(branches))


@dataclass(frozen=True)
class UpdateScheme:
    """What the device trains: a sparse layer/tensor update scheme (MCUNetV3 §2.2).

    Attributes:
        bias_last_k: the biases of the last k convolutions (counted from the output) are updated.
        weights: ``(conv index from the input, ratio)`` pairs, sorted; the first ⌈ratio·C_in⌉
            input channels of that convolution's weight are updated.
        norm: the convolutions whose bias is updated also update their per-channel scale (the
            folded BatchNorm γ; FT-Norm+Last in TinyTL).
    """

    bias_last_k: int = 0
    weights: tuple[tuple[int, float], ...] = ()
    norm: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.bias_last_k, bool) or not isinstance(self.bias_last_k, int):
            raise ConfigError(f"bias_last_k must be an integer, got {self.bias_last_k!r}")
        if self.bias_last_k < 0:
            raise ConfigError(f"bias_last_k must be >= 0, got {self.bias_last_k}")
        seen: dict[int, float] = {}
        for item in self.weights:
            idx, ratio = item
            if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
                raise ConfigError(f"a weight-updated layer index must be an int >= 0, got {idx!r}")
            if ratio not in WEIGHT_RATIOS or isinstance(ratio, bool):
                raise ConfigError(
                    f"weight ratio {ratio!r} of layer {idx} is not allowed; allowed: "
                    f"{list(WEIGHT_RATIOS)} (fractions of the input channels)"
                )
            if idx in seen:
                raise ConfigError(f"layer {idx} is listed twice among the weight updates")
            seen[idx] = float(ratio)
        object.__setattr__(self, "weights", tuple(sorted(seen.items())))

    def validate(self, n_convs: int) -> None:
        """Check the scheme against a network of ``n_convs`` convolutions (classifier excluded)."""
        if self.bias_last_k > n_convs:
            raise ConfigError(
                f"bias_last_k {self.bias_last_k} exceeds the {n_convs} convolutions of the "
                f"sub-network; allowed: 0 to {n_convs}"
            )
        first_bias = n_convs - self.bias_last_k
        for idx, _ in self.weights:
            if idx >= n_convs:
                raise ConfigError(
                    f"weight-updated layer {idx} does not exist; the sub-network has convolutions "
                    f"0 to {n_convs - 1}"
                )
            if idx < first_bias:
                raise ConfigError(
                    f"weight-updated layer {idx} lies outside the bias-updated tail (layers "
                    f"{first_bias} to {n_convs - 1} for bias_last_k={self.bias_last_k}); "
                    "a weight-updated layer must also update its bias"
                )

    def weight_ratio(self, idx: int) -> float | None:
        return dict(self.weights).get(idx)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bias_last_k": self.bias_last_k,
            "weights": [[i, r] for i, r in self.weights],
            "norm": self.norm,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpdateScheme:
        _reject_unknown(data, {"bias_last_k", "weights", "norm"}, "update scheme")
        weights = []
        for item in data["weights"]:
            if not isinstance(item, list) or len(item) != 2:
                raise ConfigError(f"a weight update must be [layer, ratio], got {item!r}")
            weights.append((item[0], item[1]))
        if not isinstance(data["norm"], bool):
            raise ConfigError(f"update scheme 'norm' must be true or false, got {data['norm']!r}")
        return cls(data["bias_last_k"], tuple(weights), data["norm"])


PATCHES = tuple(range(1, 9))
"""Patches per side a frozen prefix may run in (1: the whole image at once)."""


@dataclass(frozen=True)
class Schedule:
    """How the device runs the frozen prefix: the stem and the first ``blocks`` blocks in
    ``patches`` × ``patches`` spatial patches, one after the other (MCUNetV2's patch-based
    scheduling; :mod:`tinytune.ir.patches`). The values computed are the same whatever the
    schedule; only the memory and the time of a step change. ``patches`` = 1 runs the whole
    image at once, and then ``blocks`` is 0."""

    patches: int = 1
    blocks: int = 0

    def __post_init__(self) -> None:
        patches, blocks = _int(self.patches, "patches"), _int(self.blocks, "patch blocks")
        if patches not in PATCHES:
            raise ConfigError(
                f"{patches} patches per side are not allowed; allowed: "
                f"{', '.join(map(str, PATCHES))}"
            )
        if patches == 1 and blocks != 0:
            raise ConfigError(f"one patch (the whole image) patches no blocks, got {blocks}")
        if patches > 1 and blocks < 0:
            raise ConfigError(f"patch blocks must be >= 0, got {blocks}")

    @property
    def patched(self) -> bool:
        return self.patches > 1

    def validate(self, n_blocks: int) -> None:
        """Check the patched stage covers at most the ``n_blocks`` blocks there are
        (:func:`block_count`)."""
        if self.blocks > n_blocks:
            raise ConfigError(
                f"a patched stage of {self.blocks} blocks needs a sub-network of as many; this "
                f"one has {n_blocks} (allowed: 0 .. {n_blocks})"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"patches": self.patches, "blocks": self.blocks}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        _reject_unknown(data, {"patches", "blocks"}, "schedule")
        return cls(data["patches"], data["blocks"])


def block_count(spec: SupernetSpec, subnet: SubnetConfig) -> int:
    """The blocks of ``subnet`` after its stem, which lite residual branches (block 0 gets
    none) and patched stages are numbered over: the fixed first block and the active ones of
    a supernet or a built-in network; a user's network's stages after its first but its head
    (the last stages whose convolutions are all 1×1s after the last depthwise one), so that
    block b is stage b + 1 on every network."""
    if not spec.imported:
        return subnet.n_blocks
    kept = len(subnet.stages)
    ends = [sum(spec.stage_convs[: i + 1]) for i in range(kept)]
    while kept > 1 and all(
        role == "head" for role in spec.conv_roles[(ends[kept - 2]) : ends[kept - 1]]
    ):
        kept -= 1  # a head's stage
    return kept - 1


def conv_kinds(spec: SupernetSpec, subnet: SubnetConfig) -> tuple[str, ...]:
    """The kinds of the sub-network's convolutions in execution order, classifier excluded.

    Kinds: ``stem``, ``dw`` (depthwise), ``pw1`` (expansion), ``pw2`` (projection), ``se1`` and
    ``se2`` (squeeze-and-excitation), ``head`` (final 1×1 convolutions); a user's own network
    has those of :func:`tinytune.networks.conv_roles`. Index i of the result is convolution i
    of the update-scheme convention.
    """
    if spec.imported:
        return spec.conv_roles[: sum(spec.stage_convs[: len(subnet.stages)])]
    kinds = ["stem", *(["pw1"] if spec.first_block[2] != 1 else []), "dw", "pw2"]
    for stage, se in zip(subnet.stages, spec.has_se[: len(subnet.stages)], strict=True):
        for _ in range(stage.depth):
            kinds += ["pw1", "dw"] + (["se1", "se2"] if se else []) + ["pw2"]
    kinds += ["head"] * spec.head_convs(len(subnet.stages))
    return tuple(kinds)


@dataclass(frozen=True)
class Candidate:
    """One point of the joint space: sub-network × lite residuals × update scheme, and how the
    device schedules its frozen prefix (:class:`Schedule`; whole images unless told)."""

    supernet: str
    subnet: SubnetConfig
    lite_residual: LiteResidualConfig
    update: UpdateScheme
    schedule: Schedule = Schedule()

    def __post_init__(self) -> None:
        spec = get_supernet(self.supernet)
        if spec.name != self.supernet:
            object.__setattr__(self, "supernet", spec.name)
        self.subnet.validate(spec)
        self.lite_residual.validate(block_count(spec, self.subnet))
        self.update.validate(self.n_convs)
        self.schedule.validate(block_count(spec, self.subnet))

    @property
    def spec(self) -> SupernetSpec:
        return get_supernet(self.supernet)

    @property
    def conv_kinds(self) -> tuple[str, ...]:
        return conv_kinds(self.spec, self.subnet)

    @property
    def n_convs(self) -> int:
        return len(self.conv_kinds)

    @property
    def training(self) -> Candidate:
        """The same candidate on whole images: what is trained and measured, which the
        schedule does not change."""
        return replace(self, schedule=Schedule())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the schedule appears only when the prefix is patched, so that a
        candidate on whole images keeps the form (and the key) it always had."""
        out = {
            "supernet": self.supernet,
            "subnet": self.subnet.to_dict(),
            "lite_residual": self.lite_residual.to_dict(),
            "update": self.update.to_dict(),
        }
        if self.schedule.patched:
            out["schedule"] = self.schedule.to_dict()
        return out

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace; equal candidates give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        parts = {"supernet", "subnet", "lite_residual", "update"}
        schedule = Schedule()
        if isinstance(data, dict) and "schedule" in data:
            data = dict(data)
            schedule = Schedule.from_dict(data.pop("schedule"))
            if not schedule.patched:
                raise ConfigError("a candidate on whole images has no schedule in its JSON form")
        _reject_unknown(data, parts, "candidate")
        if not isinstance(data["supernet"], str):
            raise ConfigError(f"candidate supernet must be a string, got {data['supernet']!r}")
        return cls(
            data["supernet"],
            SubnetConfig.from_dict(data["subnet"]),
            LiteResidualConfig.from_dict(data["lite_residual"]),
            UpdateScheme.from_dict(data["update"]),
            schedule,
        )

    @classmethod
    def from_json(cls, text: str) -> Candidate:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"candidate is not valid JSON: {e.msg} at char {e.pos}") from e
        return cls.from_dict(data)

    @property
    def key(self) -> str:
        """A stable 16-hex-digit key: the SHA-256 of the canonical JSON."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]
