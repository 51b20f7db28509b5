"""The proposal strategies by name: a strategy is its module and its line here."""

from __future__ import annotations

from tinytune.search.proposals.base import Strategy
from tinytune.search.proposals.climbing import Climb
from tinytune.search.proposals.front import FrontDraw
from tinytune.search.proposals.twins import Twins

__all__ = ["STRATEGIES"]

STRATEGIES: dict[str, type[Strategy]] = {
    Climb.name: Climb,
    FrontDraw.name: FrontDraw,
    Twins.name: Twins,
}
