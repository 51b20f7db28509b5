"""A candidate as the joint scheme's sampler parameters: what a proposal enqueues for Optuna
(``enqueue_trial``), so that the sampler learns from its result as from any other trial."""

from __future__ import annotations

import warnings
from typing import Any

from tinytune.spaces import Candidate, SupernetSpec, conv_kinds, subnet_params, suggest_candidate
from tinytune.spaces.sampling import JOINT, MAX_WEIGHT_LAYERS

__all__ = ["joint_params"]


def joint_params(
    candidate: Candidate, spec: SupernetSpec, patches: tuple[int, ...] = ()
) -> dict[str, Any] | None:
    """The joint scheme's sampler parameters that select ``candidate``, or None when the joint
    space cannot express it (more weight layers than it samples, a lite residual shape or a
    norm update it does not draw, a schedule other than a patch count asked for). Checked by
    sampling them back with Optuna's ``FixedTrial``; ``patches``: the counts the space offers
    (:func:`tinytune.spaces.suggest_candidate`)."""
    import optuna

    update, lite = candidate.update, candidate.lite_residual
    if len(update.weights) > MAX_WEIGHT_LAYERS:
        return None
    n_convs = len(conv_kinds(spec, candidate.subnet))
    params: dict[str, Any] = {"scheme": JOINT, **subnet_params(candidate.subnet, spec)}
    params["lr_blocks"] = len(lite.branches)
    if lite.branches:
        branch = lite.branches[0][1]
        params.update(
            lr_kernel=branch.kernel_size,
            lr_groups=branch.groups,
            lr_downsample=branch.downsample,
            lr_expand=branch.expand,
        )
    params["bias_last_k"] = update.bias_last_k
    params["n_weight"] = len(update.weights)
    for j, (layer, ratio) in enumerate(update.weights):
        params[f"w{j}.offset"] = n_convs - 1 - layer
        params[f"w{j}.ratio"] = ratio
    if patches:
        params["patches"] = candidate.schedule.patches
    trial = optuna.trial.FixedTrial(params)
    try:
        with warnings.catch_warnings():  # an integer out of its range: checked below
            warnings.simplefilter("ignore", UserWarning)
            again = suggest_candidate(trial, spec, patches=patches)
    except ValueError:  # a value outside a categorical parameter's choices
        return None
    within = all(
        dist._contains(dist.to_internal_repr(trial.params[name]))
        for name, dist in trial.distributions.items()
    )  # FixedTrial only warns about an integer out of its range
    return dict(trial.params) if within and again == candidate else None
