"""Stored studies, read only: a study's front and search space, and the lookup of a candidate by
trial number or key that export and report share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinytune.errors import StorageError, flag
from tinytune.options import DEFAULT_STORAGE
from tinytune.spaces import Candidate, default_subnet, get_supernet

if TYPE_CHECKING:
    from tinytune.db import EvaluationRecord, Store
    from tinytune.search import FrontPoint
    from tinytune.search.run import Int8Accuracy
    from tinytune.search.study import StudySpace

__all__ = ["StoredCandidate", "StudyView", "find_candidate", "load"]


@dataclass(frozen=True)
class StoredCandidate:
    """A candidate and what the database says about it.

    Attributes:
        candidate: the candidate.
        study: the study it comes from (None: a key found in no study).
        trial: its trial number in that study, when known.
        space: the study's search space (data set, seed, device, precision...); that of no
            stored space (its ``supernet`` None) for a candidate of no study.
        checkpoint: the supernet weights the study last searched with, if recorded.
        evaluation: its successful measured evaluation in that study, if any.
    """

    candidate: Candidate
    study: str | None
    trial: int | None
    space: StudySpace
    checkpoint: str | None
    evaluation: EvaluationRecord | None


@dataclass(frozen=True)
class StudyView:
    """A stored study: its search space, its latest measured Pareto front (chosen on validation
    accuracy, test accuracy beside it), its reference (full fine-tuning of the default
    sub-network, measured beside the budget), when measured, and the device's accuracy of its
    points (int8, batch 1, QAS) by candidate key, where measured (``verify_int8``).

    ``budgets`` are those the front was chosen under (``sram_bytes``, ``flash_bytes``,
    ``latency_s``; None where there was none).
    ``recipe`` is the best of the hand-written presets within those budgets (the baseline
    presets on the default sub-network, :func:`~tinytune.search.front.recipe_point`): what the
    papers' recipes alone give, to weigh the front's most accurate point against; None where
    the study measured none within them, or stored no budgets."""

    name: str
    storage: str
    space: StudySpace
    front: tuple[FrontPoint, ...]
    hypervolume: float | None
    reference: FrontPoint | None = None
    int8: dict[str, Int8Accuracy] = field(default_factory=dict)
    budgets: dict[str, Any] | None = None
    recipe: FrontPoint | None = None

    def candidate(self, target: int | str) -> StoredCandidate:
        """The candidate of a trial number, or of a stored key (or a unique prefix of one)."""
        from tinytune.db import open_store

        with open_store(self.storage) as store:
            return find_candidate(store, study=self.name, target=target)


def _study_name(store: Store, study: str | None) -> str:
    """``study``, or the only study of the database: one with tinytune's evaluations or an
    Optuna study (one whose first fine-tunes are still running has only the latter)."""
    from tinytune.db import mask_url

    if study is not None:
        return study
    names = _all_study_names(store)
    if not names:
        raise StorageError(
            f"the database {mask_url(store.url)!r} holds no study; make one with "
            "'tinytune search' first"
        )
    if len(names) != 1:
        raise StorageError(
            f"the database holds {len(names)} studies; choose one with "
            + flag("study")
            + f": {', '.join(names) or '(none)'}"
        )
    return names[0]


def _all_study_names(store: Store) -> list[str]:
    """The studies of the database, sorted: those with tinytune's evaluations and Optuna's."""
    return sorted(set(store.study_names()) | set(_optuna_study_names(store)))


def _optuna_study_names(store: Store) -> list[str]:
    """The Optuna studies of the database, read without creating Optuna's tables where there
    are none (a database of calibrations only)."""
    import optuna
    import sqlalchemy as sa

    def has_studies() -> bool:
        engine = sa.create_engine(store.url)
        try:
            return bool(sa.inspect(engine).has_table("studies"))
        finally:
            engine.dispose()

    if not store.reconnect.call(has_studies):
        return []
    return optuna.get_all_study_names(_storage(store))


def _storage(store: Store) -> Any:
    """Optuna's storage of ``store``'s database, riding out a server that restarts as the
    store does (one wait, shared with it)."""
    from tinytune.search.study import ReconnectingStorage

    return store.reconnect.call(lambda: ReconnectingStorage(store.url, store.reconnect))


def _optuna_study(store: Store, name: str) -> Any:
    import optuna

    from tinytune.db import mask_url

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=name, storage=_storage(store))
    except KeyError as e:
        names = ", ".join(_all_study_names(store)) or "(none)"
        raise StorageError(
            f"no study {name!r} in {mask_url(store.url)!r}; studies: {names}"
        ) from e


def _runs(numbers: list[int]) -> str:
    """Sorted integers as runs: ``[0, 1, 2, 5, 7, 8]`` as ``0–2, 5, 7–8``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def find_candidate(store: Store, *, study: str | None, target: int | str) -> StoredCandidate:
    """The candidate of trial ``target`` in ``study`` (default: the only study), or the stored
    candidate whose key starts with ``target`` (with the study that measured it: ``study``,
    else the only one that did).

    Raises:
        StorageError: no such study, trial or key, or an ambiguous one (the message says which
            to choose from).
    """
    from tinytune.search import Attr
    from tinytune.search.study import StudySpace

    if isinstance(target, bool) or not isinstance(target, int | str):
        raise StorageError(
            f"a candidate is found by a trial number or a stored key, got {target!r:.80}"
        )
    if isinstance(target, int):
        loaded = _optuna_study(store, _study_name(store, study))
        trials = {t.number: t for t in loaded.get_trials(deepcopy=False)}
        found = trials.get(target)
        if found is None or Attr.CANDIDATE not in found.user_attrs:
            numbers = [n for n, t in sorted(trials.items()) if Attr.CANDIDATE in t.user_attrs]
            have = (
                "none has one"
                if not numbers
                else f"trial {numbers[0]} has one"
                if len(numbers) == 1
                else f"trials {_runs(numbers)} have one"
            )
            raise StorageError(
                f"study {loaded.study_name!r} has no trial {target} with a candidate ({have})"
            )
        candidate = Candidate.from_json(found.user_attrs[Attr.CANDIDATE])
        name = loaded.study_name
    else:
        matches = store.find_candidates(target.lower())
        if len(matches) != 1:
            raise StorageError(
                f"candidate key {target!r} matches {len(matches)} stored candidates; give "
                "more of the key, or a trial number with " + flag("study")
            )
        candidate = Candidate.from_json(matches[0].payload)
        names = (
            [study]
            if study is not None
            else [
                n
                for n in store.study_names()
                if store.find_evaluation(n, candidate.key, "measured")
            ]
        )
        if len(names) > 1:
            raise StorageError(
                f"candidate {candidate.key[:12]} was measured in {len(names)} studies; choose "
                "one with " + flag("study") + f": {', '.join(names)}"
            )
        if not names:
            return StoredCandidate(candidate, None, None, StudySpace.from_attrs(None), None, None)
        loaded = _optuna_study(store, names[0])
        name = loaded.study_name
    evaluation = store.find_evaluation(name, candidate.key, "measured")
    trial = target if isinstance(target, int) else evaluation.trial_number if evaluation else None
    return StoredCandidate(
        candidate=candidate,
        study=name,
        trial=trial,
        space=StudySpace.from_attrs(loaded.user_attrs.get(Attr.SPACE)),
        checkpoint=loaded.user_attrs.get(Attr.CHECKPOINT),
        evaluation=evaluation,
    )


def load(study: str | None = None, storage: str = DEFAULT_STORAGE) -> StudyView:
    """A stored study (default: the only one in the database), read only.

    Raises:
        StorageError: no database file, no such study, or several to choose from.
    """
    from tinytune.db import open_store, require_tinytune
    from tinytune.search import Attr, FrontPoint
    from tinytune.search.config import Budgets, reference_candidate
    from tinytune.search.front import recipe_point, reference_point
    from tinytune.search.run import int8_accuracies
    from tinytune.search.study import StudySpace

    require_tinytune(storage)
    with open_store(storage) as store:
        name = _study_name(store, study)
        try:
            space = StudySpace.from_attrs(_optuna_study(store, name).user_attrs.get(Attr.SPACE))
        except StorageError:
            if name not in store.study_names():
                raise
            space = StudySpace.from_attrs(None)  # tinytune's records, the Optuna side gone
        snapshot = store.latest_pareto(name)
        supernet = space.supernet
        reference = (
            reference_point(store, name, reference_candidate(supernet).key) if supernet else None
        )
        points = (
            tuple(FrontPoint.from_dict({**p, "study": name}) for p in snapshot.points)
            if snapshot
            else ()
        )
        int8 = int8_accuracies(store, name, [p.candidate_key for p in points])
        budgets = snapshot.budgets if snapshot is not None else None
        recipe = (
            recipe_point(
                store, name, Budgets.from_stored(budgets), default_subnet(get_supernet(supernet))
            )
            if supernet and budgets is not None
            else None
        )
    return StudyView(
        name=name,
        storage=storage,
        space=space,
        front=points,
        hypervolume=snapshot.hypervolume if snapshot is not None else None,
        reference=reference,
        int8=int8,
        budgets=budgets,
        recipe=recipe,
    )
