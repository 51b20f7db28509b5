"""Dashboard publishing: the study's hypervolume history drawn on its optuna-dashboard page, as
a callback the driver calls after each recorded evaluation (throttled) and at the end."""

from __future__ import annotations

import logging
import time
from typing import Any

from tinytune.db import Store
from tinytune.search.front.recording import hypervolume_history
from tinytune.search.study.adapter import Attr

__all__ = ["HypervolumePublisher"]

log = logging.getLogger(__name__)


class HypervolumePublisher:
    """Saves the hypervolume history figure with the study, at most every ``every_s``."""

    def __init__(self, study: Any, store: Store, study_name: str, every_s: float = 10.0) -> None:
        self.study, self.store, self.study_name, self.every_s = study, store, study_name, every_s
        self._last = -float("inf")

    def __call__(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        snapshots = self.store.pareto_snapshots(self.study_name)
        if not snapshots:
            return
        try:
            from optuna_dashboard import save_plotly_graph_object

            from tinytune.viz.pareto import hypervolume_history_figure

            measured = self.store.evaluations(self.study_name, fidelity="measured", status="ok")
            history = hypervolume_history(snapshots, measured)
            figure = hypervolume_history_figure(history, title=self.study_name)
            save_plotly_graph_object(self.study, figure, graph_object_id=Attr.HYPERVOLUME_GRAPH)
        except (ImportError, ValueError) as e:  # the search does not depend on the figure
            log.warning("cannot show the hypervolume history in optuna-dashboard: %s", e)
