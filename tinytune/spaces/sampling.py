"""Define-by-run sampling of the joint space with an Optuna trial.

The parameter names are stable (the database and the dashboard show them):

* ``scheme``: ``joint`` or a preset name (see :func:`suggest_candidate`);
* ``resolution``; ``stages`` the stages a fixed network keeps (where it may be cut);
  ``d<s>`` the depth of stage s; ``k<s>.<b>`` and ``e<s>.<b>`` the kernel size and expand
  ratio of its active block b (each only where the network offers a choice);
* ``lr_blocks`` — lite residual branches on the last m blocks (block 0 never gets one) — and, when
  m > 0, their shared shape ``lr_kernel``, ``lr_groups``, ``lr_downsample``, ``lr_expand``;
* ``bias_last_k``; ``n_weight`` — how many weight-updated layers; for each j, ``w<j>.offset``
  (its distance from the last convolution, inside the bias-updated tail) and ``w<j>.ratio``.
  Two picks of the same layer merge, keeping the larger ratio;
* ``patches``: where the search chooses the device's schedule, the patches per side of the
  frozen prefix (1: whole images).

When a preset is given, only the sub-network is sampled and the preset's scheme is applied to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinytune.spaces.candidate import (
    LITE_DOWNSAMPLE,
    LITE_EXPAND,
    WEIGHT_RATIOS,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    Schedule,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    block_count,
    conv_kinds,
)
from tinytune.spaces.presets import PRESET_NAMES, preset_scheme
from tinytune.spaces.supernets import SupernetSpec

if TYPE_CHECKING:
    import optuna

__all__ = [
    "JOINT",
    "MAX_WEIGHT_LAYERS",
    "SCHEMES",
    "subnet_params",
    "suggest_candidate",
    "suggest_subnet",
]

MAX_WEIGHT_LAYERS = 4
JOINT = "joint"
SCHEMES = (JOINT, *PRESET_NAMES)


def suggest_subnet(
    trial: optuna.Trial, spec: SupernetSpec, cuts: tuple[int, ...] | None = None
) -> SubnetConfig:
    """Sample a sub-network of ``spec``; a fixed network is cut after one of ``cuts`` stages
    (default: every cut it allows)."""
    resolution = trial.suggest_categorical("resolution", list(spec.resolutions))
    counts = cuts or spec.stage_counts
    n_stages = trial.suggest_categorical("stages", list(counts)) if len(counts) > 1 else counts[0]
    stages = []
    for s in range(int(n_stages)):
        depth = _pick(trial, f"d{s}", spec.stage_depths(s))
        ks = tuple(_pick(trial, f"k{s}.{b}", spec.block_kernels(s, b)) for b in range(depth))
        es = tuple(_pick(trial, f"e{s}.{b}", spec.block_expands(s, b)) for b in range(depth))
        stages.append(StageConfig(ks, es))
    return SubnetConfig(int(resolution), tuple(stages))


def _pick(trial: optuna.Trial, name: str, choices: tuple[int, ...]) -> int:
    """A categorical parameter, suggested only where there is a choice."""
    return int(trial.suggest_categorical(name, list(choices))) if len(choices) > 1 else choices[0]


def _suggest_lite(trial: optuna.Trial, n_blocks: int) -> LiteResidualConfig:
    m = trial.suggest_int("lr_blocks", 0, n_blocks - 1)
    if m == 0:
        return LiteResidualConfig()
    branch = LiteResidualBranch(
        kernel_size=trial.suggest_categorical("lr_kernel", [3, 5]),
        groups=trial.suggest_categorical("lr_groups", [2, 4]),
        downsample=trial.suggest_categorical(
            "lr_downsample", [d for d in LITE_DOWNSAMPLE if d > 1]
        ),
        expand=trial.suggest_categorical("lr_expand", [e for e in LITE_EXPAND if e <= 1.0]),
    )
    return LiteResidualConfig(tuple((b, branch) for b in range(n_blocks - m, n_blocks)))


def _suggest_update(trial: optuna.Trial, n_convs: int) -> UpdateScheme:
    k = trial.suggest_int("bias_last_k", 0, n_convs)
    n_weight = trial.suggest_int("n_weight", 0, min(MAX_WEIGHT_LAYERS, k))
    weights: dict[int, float] = {}
    for j in range(n_weight):
        layer = n_convs - 1 - trial.suggest_int(f"w{j}.offset", 0, k - 1)
        ratio = trial.suggest_categorical(f"w{j}.ratio", list(WEIGHT_RATIOS))
        weights[layer] = max(ratio, weights.get(layer, 0.0))
    return UpdateScheme(k, tuple(weights.items()))


def suggest_candidate(
    trial: optuna.Trial,
    spec: SupernetSpec,
    preset: str | None = None,
    cuts: tuple[int, ...] | None = None,
    patches: tuple[int, ...] = (),
) -> Candidate:
    """Sample a candidate of the joint space, or of one preset's sub-space.

    Without ``preset``, the categorical ``scheme`` picks either ``joint`` (lite residuals and
    update scheme sampled freely) or one of the named presets applied to the sampled
    sub-network; enqueuing ``{"scheme": "last", ...}`` thus evaluates a preset as a baseline.
    ``cuts``: the stage counts a fixed network may be cut after (:func:`suggest_subnet`).
    ``patches``: the patches per side a joint scheme's frozen prefix may ask for (``patches``;
    1 is whole images), none where the device's schedule is not searched: a candidate that
    asks for N > 1 carries the schedule ``N`` × ``N`` over the stem alone, and the hardware
    model chooses how many blocks the patches cover
    (:meth:`tinytune.evaluators.HardwareEvaluator.schedule`). What is trained is the same
    whatever the schedule; its memory and time per step are not.
    """
    if preset is None:
        preset = trial.suggest_categorical("scheme", list(SCHEMES))
    subnet = suggest_subnet(trial, spec, cuts)
    schedule = Schedule()
    if preset != JOINT:
        update, lite = preset_scheme(preset, spec, subnet)
    else:
        lite = _suggest_lite(trial, block_count(spec, subnet))
        update = _suggest_update(trial, len(conv_kinds(spec, subnet)))
        if patches:
            n = int(trial.suggest_categorical("patches", list(patches)))
            schedule = Schedule(n, 0) if n > 1 else Schedule()
    return Candidate(spec.name, subnet, lite, update, schedule)


def subnet_params(subnet: SubnetConfig, spec: SupernetSpec) -> dict[str, int]:
    """The sampler parameters that select ``subnet`` (for ``study.enqueue_trial``): those that
    :func:`suggest_subnet` suggests for ``spec``."""
    params: dict[str, int] = {"resolution": subnet.resolution}
    if len(spec.stage_counts) > 1:
        params["stages"] = len(subnet.stages)
    for s, stage in enumerate(subnet.stages):
        if len(spec.stage_depths(s)) > 1:
            params[f"d{s}"] = stage.depth
        for b, (k, e) in enumerate(zip(stage.ks, stage.e, strict=True)):
            if len(spec.block_kernels(s, b)) > 1:
                params[f"k{s}.{b}"] = k
            if len(spec.block_expands(s, b)) > 1:
                params[f"e{s}.{b}"] = e
    return params
