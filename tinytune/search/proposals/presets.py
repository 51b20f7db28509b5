"""The opening of a new study: the trials queued when it is made, before any other proposal.

First the reference, full fine-tuning of the default sub-network, measured beside the budget so
that the front is read against it; then the baselines: each of
:data:`~tinytune.search.config.search_config.BASELINE_PRESETS` on the default sub-network, or,
in a study of one preset, that preset on it (the learning-rate grid's fine-tune of its family,
reused, not run again). They are queued when the study is made, not by a run's :class:`Policy`,
so that every driver sharing the study finds them.
"""

from __future__ import annotations

from tinytune.search.config.search_config import (
    BASELINE_PRESETS,
    REFERENCE_PRESET,
    SearchConfig,
)
from tinytune.search.proposals.base import Proposal
from tinytune.search.study import Attr
from tinytune.spaces import default_subnet, get_supernet, subnet_params

__all__ = ["opening"]


def opening(config: SearchConfig) -> list[Proposal]:
    """The trials a new study of ``config`` queues first, in order."""
    spec = get_supernet(config.supernet)
    params = subnet_params(default_subnet(spec), spec)
    queued = []
    if config.reference:
        queued.append(Proposal({"scheme": REFERENCE_PRESET, **params}, {Attr.REFERENCE: True}))
    if not config.baselines:
        return queued
    if config.preset is None:
        queued += [Proposal({"scheme": name, **params}, {}) for name in BASELINE_PRESETS]
    elif not (config.reference and config.preset == REFERENCE_PRESET):
        queued.append(Proposal(params, {}))
    return queued
