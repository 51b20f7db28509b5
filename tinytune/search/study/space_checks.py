"""The search space a study is stored with, checked against the one a run asks for.

A study keeps the search space it was created with (its user attribute ``tinytune.space``:
supernet, device and engine, data set, budgets, fine-tuning settings, the weights' SHA-256, ...).
A run that asks for another is refused in one line that says what differs and what to pass to
continue the study as it was; an Optuna study that tinytune did not make is not taken over. The
check runs twice: before the weights exist (:func:`check_stored_space`, everything but the
weights), and when the study is opened (:class:`tinytune.search.study.adapter.StudyAdapter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinytune.db import Store
from tinytune.errors import Flag, StorageError, Words, flag
from tinytune.options import SEARCH_OPTIONS
from tinytune.search.config.search_config import (
    DIRECTIONS,
    OBJECTIVES,
    SearchConfig,
    check_new_study_name,
)
from tinytune.search.study.attrs import Attr
from tinytune.search.study.study_space import (
    AUTO_REPEATS,
    PER_FAMILY,
    StudySpace,
)

PEAK_OBJECTIVES = ("accuracy", "peak_sram_bytes", "latency_s")
"""The objectives of a study whose SRAM was the step's arena alone (its static data and stack
not counted)."""

_ABSENT = {o.name: o.stored_absent for o in SEARCH_OPTIONS if o.stored_absent is not None}
"""The fine-tuning settings a study stored before they existed was measured with."""

__all__ = [
    "another_space",
    "check_stored_space",
    "foreign_study",
    "nothing_to_resume",
    "space_difference",
    "weights_hint",
]


def weights_hint(config: SearchConfig, stored: str) -> Words:
    """How to search with a study's own weights: its path, or none where the study searched
    with the checkpoint the package ships."""
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.errors import ModelError
    from tinytune.spaces import get_supernet

    try:
        shipped = shipped_checkpoint(get_supernet(config.supernet))
    except ModelError:  # a damaged shipped file: the path is all there is to say
        shipped = None
    if shipped is not None and Path(stored).resolve() == shipped.resolve():
        return (
            " or leave out "
            + flag("weights")
            + " (the study searched with the shipped checkpoint)"
        )
    return " or pass its own " + flag("weights", stored)


def _finetune_option(key: str, stored: Any) -> Flag | Words:
    """How to ask for a study's own fine-tuning setting ``stored``, by the key of its space's
    ``finetune``: the option with that value, or (a rate chosen per family, repeats chosen by
    the validation split's size) the option left out."""
    if (key, stored) == ("lr", PER_FAMILY):
        return "learning rates (leave out " + flag("lr") + ")"
    if (key, stored) == ("repeats", AUTO_REPEATS):
        return "repeats (leave out " + flag("repeats") + ")"
    return flag(key, stored)


def another_space(
    config: SearchConfig, diff: dict[str, Any], checkpoint: str | None
) -> StorageError:
    """The one-line refusal of a study stored with another search space (``diff``: what
    :func:`space_difference` found), with what to pass instead."""
    hint = Words()
    if "device" in diff:  # its engine follows from its device, unless it was another
        from tinytune.hwmodels.registry import default_engine

        device = diff["device"][0]
        hint += " or pass " + flag("device", device)
        engine = diff.get("engine", (None,))[0]
        if engine is not None and engine != default_engine(str(device)):
            hint += " and " + flag("engine", engine)
    elif "engine" in diff:
        hint += " or pass " + flag("engine", diff["engine"][0])
    if "weights" in diff and checkpoint:
        hint += weights_hint(config, checkpoint)
    refusal = (
        f"study {config.study_name!r} exists with another search space (stored vs requested: "
        f"{diff}); choose another " + flag("study") + " name"
    )
    if "objectives" in diff and list(diff["objectives"][0] or ()) == list(PEAK_OBJECTIVES):
        refusal += (
            " (its SRAM figures are the planner's arenas alone; a study now ranks the arena, "
            "the static data and the stack together, so the two cannot share a front)"
        )
    if "finetune" in diff:
        from tinytune.errors import ConfigError
        from tinytune.options import option

        settings = diff["finetune"]
        try:  # a length stored by a version without today's bound: no option asks for it
            option("epochs").check(settings.get("epochs", (1,))[0])
        except ConfigError as e:
            return StorageError(
                refusal
                + " (its length cannot be asked for now: "
                + e.words
                + "; so it cannot be continued)"
            )
        hint += " or pass the study's own "
        for i, (key, (was, _)) in enumerate(settings.items()):
            hint += (", " if i else "") + _finetune_option(key, was)
    return StorageError(refusal + hint)


def nothing_to_resume(config: SearchConfig, names: Sequence[str]) -> StorageError:
    """The one-line refusal of ``resume`` for a study that is not in the database."""
    return StorageError(
        f"no study {config.study_name!r} to resume in the database; studies: "
        f"{', '.join(names) or '(none)'}"
    )


def check_stored_space(config: SearchConfig, store: Store) -> None:
    """Refuse a study stored with another search space before its weights exist: everything
    but the weights' SHA-256 (compared when the study is opened, once the checkpoint is there)
    is compared here, so that a mismatch costs no pre-training.

    Raises:
        StorageError: the study exists with another search space, or ``resume`` names a
            study that does not exist.
    """
    import optuna
    import sqlalchemy as sa

    try:
        names = optuna.get_all_study_names(store.url)
        if config.study_name not in names:
            if config.resume:
                raise nothing_to_resume(config, names)
            check_new_study_name(config.study_name)
            return
        study = optuna.load_study(study_name=config.study_name, storage=store.url)
        stored = study.user_attrs.get(Attr.SPACE)
    except sa.exc.SQLAlchemyError:  # another driver creating Optuna's tables at this moment:
        return  # the study's own check, when it is opened, still compares the whole space
    if stored is None:
        if (foreign := foreign_study(study)) is not None:
            raise foreign
        return
    requested = {
        k: v for k, v in StudySpace.from_config(config).to_attrs().items() if k != "weights"
    }
    stored = {k: v for k, v in stored.items() if k != "weights"}
    if diff := space_difference(stored, requested):
        raise another_space(config, diff, None)


def foreign_study(study: Any) -> StorageError | None:
    """Why an Optuna study without tinytune's search space is not one tinytune may take over:
    other objectives, or trials already (tinytune stores its space before its first trial, so
    a study of its own without one is one that another driver is creating); None if it may."""
    directions = tuple(d.name.lower() for d in study.directions)
    if directions != DIRECTIONS:
        return StorageError(
            f"study {study.study_name!r} was not made by tinytune: it has {len(directions)} "
            f"objective(s) ({', '.join(directions)}), a tinytune study {len(DIRECTIONS)} "
            f"({', '.join(OBJECTIVES)}); choose another " + flag("study")
        )
    if trials := len(study.get_trials(deepcopy=False)):
        return StorageError(
            f"study {study.study_name!r} was not made by tinytune: it holds {trials} trial(s) "
            "and no tinytune search space; choose another " + flag("study")
        )
    return None


def space_difference(stored: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """The keys whose stored and requested values differ, as (stored, requested); of the
    fine-tuning settings, the settings that differ. A key the stored space lacks differs from
    every value asked for, but for a fine-tuning setting added since with the value every
    fine-tune had before (:attr:`~tinytune.options.Option.stored_absent`)."""
    was = {k: stored.get(k) for k in requested}
    diff = {k: (was[k], v) for k, v in requested.items() if k in was and was[k] != v}
    if "weights" in diff:  # SHA-256s, shortened as git shortens commits
        diff["weights"] = tuple(f"{v[:12]}…" if v else v for v in diff["weights"])
    if "finetune" in diff:
        settings = {**_ABSENT, **(was["finetune"] or {})}
        diff["finetune"] = {
            k: (settings.get(k), v)
            for k, v in requested["finetune"].items()
            if settings.get(k) != v
        }
        if not diff["finetune"]:
            del diff["finetune"]
    return diff
