"""The fidelity ladder: its brackets (:class:`Ladder`), the rule that promotes a proxy-scored
candidate to a measured fine-tune, the decisions it hands the driver, the proxy rung and the
additive proxy, and the contribution analysis with the table the proxy reads."""

from __future__ import annotations

from tinytune.search.ladder.brackets import Ladder, LadderContext
from tinytune.search.ladder.contribution import run_contributions
from tinytune.search.ladder.contribution_table import ContributionTable
from tinytune.search.ladder.proxy import estimate, kendall_tau, rank_correlation

__all__ = [
    "ContributionTable",
    "Ladder",
    "LadderContext",
    "estimate",
    "kendall_tau",
    "rank_correlation",
    "run_contributions",
]
