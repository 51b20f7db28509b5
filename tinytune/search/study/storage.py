"""Optuna's RDB storage, riding out a database server that restarts.

Optuna's :class:`~optuna.storages.RDBStorage` takes SQLAlchemy's engine options, so it gets
tinytune's (:func:`tinytune.db.engine.server_options`: pre-ping, a connect timeout). It has no
retry of its own for a lost connection (only trial creation is retried, five times within
seconds, for deadlocks), and reports one as ``StorageInternalError`` "invalid data in the
commit". :class:`ReconnectingStorage` runs each of its calls again, while the server is away,
through the store's :class:`~tinytune.db.reconnect.Reconnect`: one outage, one bound, whether
tinytune's tables or Optuna's met it first. Import this module lazily (it imports Optuna).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from tinytune.db.engine import server_options
from tinytune.db.reconnect import Reconnect

__all__ = ["ReconnectingStorage"]

# Each is one transaction that is safe to run again after a lost connection: a read; an upsert
# (attributes, heartbeats, intermediate values); a parameter, whose second insert Optuna ignores
# as an integrity error; a study, whose second creation ``create_study(load_if_exists=True)``
# loads. A trial created by a commit whose answer was lost is created again: the first is left
# RUNNING without a heartbeat, and tinytune's drivers fail it a grace period later
# (:meth:`tinytune.search.study.adapter.StudyAdapter.fail_stale`).
_RETRIED = (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "get_all_studies",
    "_create_new_trial",
    "_set_trial_param",
    "get_trial_param",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number",
    "get_trial",
    "_get_trials",
    "_get_best_trial_id",
    "record_heartbeat",
    "_get_stale_trial_ids",
)


class ReconnectingStorage(RDBStorage):
    """:class:`~optuna.storages.RDBStorage` with tinytune's engine options, whose calls are run
    again while the database server is away, up to ``reconnect``'s bound.

    Args:
        url: The database's URL.
        reconnect: The retries shared with tinytune's store of the same database.
        **kwargs: :class:`~optuna.storages.RDBStorage`'s other arguments (heartbeat).
    """

    def __init__(self, url: str, reconnect: Reconnect, **kwargs: Any) -> None:
        self.reconnect = reconnect
        super().__init__(url, engine_kwargs=server_options(url), **kwargs)

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        """Optuna's, run again while the server is away. A retry that finds the trial finished
        in ``state`` already took effect (the commit went through, its answer was lost)."""
        attempts = 0

        def once() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                return RDBStorage.set_trial_state_values(self, trial_id, state, values)
            except optuna.exceptions.UpdateFinishedTrialError:
                if attempts > 1 and RDBStorage.get_trial(self, trial_id).state == state:
                    return True
                raise

        return self.reconnect.call(once)


def _retried(name: str) -> Callable[..., Any]:
    method = getattr(RDBStorage, name)

    @functools.wraps(method)
    def retried(self: ReconnectingStorage, *args: Any, **kwargs: Any) -> Any:
        return self.reconnect.call(lambda: method(self, *args, **kwargs))

    return retried


for _name in _RETRIED:
    setattr(ReconnectingStorage, _name, _retried(_name))
