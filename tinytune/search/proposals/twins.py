"""Schedule twins: a fine-tune just measured, priced under every other patch count.

The frozen prefix computes the same values patch by patch, so the same candidate asking for
another patch count the search proposes (:attr:`tinytune.evaluators.HardwareEvaluator.
patch_choices`) has the measured accuracies at its own cost: a front point of less SRAM for more
time, or the converse, at no fine-tune. Each twin within the budgets that the joint space
expresses and the study has not stored is enqueued; the run tells it from the fine-tune it
shares. None with a preset (its schedule is the one that fits) or for the reference.
"""

from __future__ import annotations

from tinytune.search.proposals.base import Proposal, Strategy, schedules
from tinytune.search.proposals.encoding import joint_params
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate

__all__ = ["Twins"]


class Twins(Strategy):
    """The strategy that follows each measured fine-tune (see the module docstring)."""

    name = "twins"

    def follow(self, candidate: Candidate, trial_number: int) -> list[Proposal]:
        context = self.context
        patches = context.hardware.patch_choices
        if not patches or context.config.preset is not None:
            return []
        out = []
        for asked, scheduled in schedules(context.hardware, candidate):
            if scheduled.key == candidate.key:
                continue
            study = context.config.study_name
            if context.store.find_evaluation(study, scheduled.key, "measured") is not None:
                continue
            params = joint_params(asked, context.spec, patches)
            if params is not None and context.fits(asked):
                out.append(Proposal(params, {Attr.TWIN_OF: trial_number}))
        return out
