"""The front door: search, load a stored study, export a bundle, list devices.

In the manner of ``optuna.create_study``: keyword arguments with the command line's defaults,
typed results, and every check made before any work. The command line is a thin layer over
these functions.

    import tinytune
    result = tinytune.optimize("digits", trials=8, sram_budget="256KB", device="stm32f746")
    for point in result.front:
        print(point.scheme, point.val_accuracy, point.test_accuracy, point.memory_bytes)
"""

from __future__ import annotations

import inspect
import textwrap
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Unpack

from tinytune import stored as _stored
from tinytune.exporting import Exported, check_callbacks, export_bundle
from tinytune.options import (
    DEFAULT_DATASET,
    DEFAULT_STORAGE,
    DEFAULT_WORKERS,
    SEARCH_OPTIONS,
    SearchOptions,
    describe,
    resolve,
)
from tinytune.samplers import DEFAULT_SAMPLER  # re-exported: the front door's default
from tinytune.spaces.supernets import DEFAULT_SUPERNET, default_network

if TYPE_CHECKING:
    import torch

    from tinytune.hwmodels.profile import DeviceProfile
    from tinytune.models import PretrainRecipe
    from tinytune.search import SearchEvent, SearchResult
    from tinytune.spaces import SupernetSpec
    from tinytune.stored import StudyView

__all__ = [
    "DEFAULT_DATASET",
    "DEFAULT_SAMPLER",
    "DEFAULT_STORAGE",
    "DEFAULT_SUPERNET",
    "DEFAULT_WORKERS",
    "Exported",
    "devices",
    "export_bundle",
    "load",
    "optimize",
]


def _search_signature() -> inspect.Signature:
    """The signature of :func:`optimize` as ``help()`` shows it: the data set (positional too),
    each option of :class:`~tinytune.options.SearchOptions` by keyword with its declared type
    and default, then the callbacks and the example input."""
    own = inspect.signature(optimize, follow_wrapped=False).parameters
    declared = {
        name: typing.get_args(annotation)[0]
        for name, annotation in SearchOptions.__annotations__.items()
    }
    options = [
        inspect.Parameter(
            o.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=o.default,
            # a string for torch's types, which cost no import of torch
            annotation=getattr(declared[o.name], "__forward_arg__", declared[o.name]),
        )
        for o in SEARCH_OPTIONS
        if o.name in declared
    ]
    return inspect.Signature(
        [own["dataset"], *options, *(p for p in own.values() if p.kind is p.KEYWORD_ONLY)],
        return_annotation="SearchResult",
    )


def _network_name(supernet: Any, example: Any) -> str | None:
    """The name the search keeps of ``supernet``: itself, or for a module the ``.pt2`` file it
    is exported to.

    Raises:
        OptionError: an example input without a module, or a module without one.
        ModelError: the module cannot be exported, or holds an op tinytune does not train.
    """
    from tinytune.errors import OptionError, flag

    if supernet is None or isinstance(supernet, str):
        if example is not None:
            raise OptionError(
                "example_input",
                "is the input of a network given as a torch.nn.Module; "
                + flag("supernet")
                + " names one",
            )
        return supernet
    if example is None:
        raise OptionError(
            "example_input",
            "must be given with a network given as a torch.nn.Module: a tensor of its input's "
            "shape, batch 1 (e.g. torch.zeros(1, 3, 64, 64))",
        )
    from tinytune.models import cache_dir, save_module

    return str(save_module(supernet, example, cache_dir() / "networks"))


def optimize(
    dataset: str = DEFAULT_DATASET,
    *,
    progress: Callable[[SearchEvent], None] | None = None,
    on_pretrain: Callable[[int, int, float], None] | None = None,
    example_input: torch.Tensor | None = None,
    **options: Unpack[SearchOptions],
) -> SearchResult:
    """Search how to fine-tune a network on ``dataset`` for ``device``; run or continue the
    study ``study`` in ``storage`` until its budget of ``trials`` measured fine-tunes is spent.
    ``supernet=None`` searches :func:`tinytune.spaces.default_network`: EfficientNet-Lite0 with
    its ImageNet weights for an image folder, the shipped supernet for a built-in data set.

    Every option is one of :class:`tinytune.options.SearchOptions`, where each is declared
    once: its type, default and help (listed below). Budgets are bytes or seconds, or text with
    a unit (``"256KB"``, ``"500ms"``, ``"5m"``). ``progress`` is called with each
    :class:`~tinytune.search.SearchEvent`, ``on_pretrain(step, steps, loss)`` as a missing
    supernet is pre-trained. ``supernet`` may be your own ``torch.nn.Module``, with
    ``example_input`` a tensor of its input's shape (batch 1): it is exported by
    ``torch.export`` into the cache as a ``.pt2`` file named by its graph's digest, and searched
    as that file is (docs/networks.md).

    Returns:
        What the run did and the study's measured Pareto front.

    Raises:
        TypeError: an argument that is no option, as any Python function raises.
        TinyTuneError: bad input (the message names it and what is allowed), before any work;
            an :class:`~tinytune.errors.OptionError` names the option in its ``field``.
    """
    check_callbacks(progress=progress, on_pretrain=on_pretrain)
    if unknown := sorted(set(options) - _OPTION_NAMES):
        raise TypeError(f"optimize() got an unexpected keyword argument {unknown[0]!r}")
    values = resolve({"dataset": dataset, **options})
    values["supernet"] = _network_name(values["supernet"], example_input)
    return _optimize(values, progress, on_pretrain)


_OPTION_NAMES = {o.name for o in SEARCH_OPTIONS}

# what help() and inspect show: every option with its default and type (the declaration's),
# then the callbacks, and the help of every option after the summary
optimize.__signature__ = _search_signature()  # type: ignore[attr-defined]
optimize.__doc__ = f"{optimize.__doc__}\n{textwrap.indent(describe(), '    ')}\n"


def _optimize(
    values: dict[str, Any],
    progress: Callable[[SearchEvent], None] | None,
    on_pretrain: Callable[[int, int, float], None] | None,
) -> SearchResult:
    """:func:`optimize` of the options' checked ``values``."""
    import dataclasses

    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.data import get_dataset
    from tinytune.db import database_exists, mask_url, open_store
    from tinytune.errors import StorageError
    from tinytune.evaluators import run_evaluation
    from tinytune.models.supernet import require_weights
    from tinytune.search import (
        Executor,
        InlineExecutor,
        RayExecutor,
        SearchConfig,
        preflight,
        run_search,
    )
    from tinytune.search.config import check_new_study_name
    from tinytune.search.execution import check_reachable
    from tinytune.search.study import check_stored_space
    from tinytune.spaces import get_supernet

    supernet, weights, storage = values["supernet"], values["weights"], values["storage"]
    inline, ray_address = values["inline"], values["ray_address"]
    spec = get_supernet(default_network(values["dataset"]) if supernet is None else supernet)
    require_weights(spec, weights)
    workers = DEFAULT_WORKERS if values["workers"] is None else values["workers"]
    recipe = _pretrain_recipe(spec, values["pretrain_steps"])  # before any database work
    _check_inline(inline, "workers", values["workers"] is not None, workers)
    data = get_dataset(values["dataset"])
    config = SearchConfig.from_options(
        values, checkpoint="", supernet=spec.name, dataset=data.name, n_classes=data.num_classes
    )
    _check_inline(inline, "gpus_per_trial", bool(config.gpus_per_trial), config.gpus_per_trial)
    _check_inline(inline, "ray_address", ray_address is not None, ray_address)
    if ray_address is not None:
        check_reachable(ray_address)  # before any pre-training or database work
    # no database file yet: check the search on the built-in profiles before creating one
    checked = None if database_exists(storage) else preflight(config, None, progress)
    if checked is not None and config.resume:
        raise StorageError(
            f"no study {config.study_name!r} to resume: the database "
            f"{mask_url(storage)!r} does not exist yet"
        )
    if checked is not None:  # a new database: a new study
        check_new_study_name(config.study_name)
    with open_store(storage) as store:
        if checked is None:  # an existing database: its study's space, before pre-training
            checked = preflight(config, store, progress)
            # compared as the study stores it: with the engine that predicts its latencies
            check_stored_space(dataclasses.replace(config, engine=checked.device.engine), store)

        def start_workers() -> Executor:
            if inline:
                return InlineExecutor(run_evaluation)
            return RayExecutor(
                run_evaluation,
                workers=workers,
                address=ray_address,
                max_retries=values["max_retries"],
                gpus=config.gpus_per_trial,
            )

        # GPUs asked for: the workers before any pre-training, so that a cluster without them
        # is refused in seconds, not after minutes of it
        executor = start_workers() if config.gpus_per_trial else None
        try:
            checkpoint = ensure_checkpoint(spec, recipe, weights, progress=on_pretrain)
            config = dataclasses.replace(config, checkpoint=str(checkpoint))
            if executor is None:
                executor = start_workers()
            return run_search(config, store, executor, progress=progress, checked=checked)
        finally:
            if executor is not None:
                executor.close()


def _pretrain_recipe(spec: SupernetSpec, steps: int | None) -> PretrainRecipe | None:
    """The quick recipe for ``steps`` pre-training steps (None: the shipped checkpoint).

    Raises:
        OptionError: a fixed network, which comes with its own weights.
    """
    from tinytune.errors import OptionError, flag
    from tinytune.models import PretrainRecipe

    if steps is None:
        return None
    if spec.fixed:
        raise OptionError.saying(
            "pretrain_steps",
            f"{spec.name} comes with its ImageNet weights and is not pre-trained here: leave "
            "out " + flag("pretrain_steps") + ", or name a supernet with " + flag("supernet"),
        )
    return PretrainRecipe(steps=steps)


_WITHOUT_RAY = {
    "workers": " runs in this process, so ",
    "gpus_per_trial": (
        " fine-tunes in this process, without Ray to give each fine-tune its share of a GPU, so "
    ),
    "ray_address": " runs without Ray, so ",
}
"""Why ``--inline`` ignores each option of Ray's."""


def _check_inline(inline: bool, name: str, given: bool, value: Any) -> None:
    """Refuse option ``name`` of Ray's (``given``, its value ``value``) with ``inline``.

    Raises:
        OptionError: both given.
    """
    from tinytune.errors import OptionError, flag

    if given and inline:
        raise OptionError.saying(
            name,
            flag("inline", True)
            + _WITHOUT_RAY[name]
            + flag(name, value)
            + " would be ignored; give one of the two",
        )


def devices(storage: str | None = None) -> list[DeviceProfile]:
    """Every device a search can target, with the newest calibration stored in ``storage``
    (when given and the database exists) in place of its built-in latency profile."""
    from tinytune.db import database_exists, open_store
    from tinytune.hwmodels.registry import device_names, get_device

    # no database yet (reading creates no empty file): the built-in profiles
    if storage is None or not database_exists(storage):
        return [get_device(name) for name in device_names()]
    with open_store(storage) as store:
        return [get_device(n, store.latest_device_calibration(n)) for n in device_names()]


def load(study: str | None = None, storage: str = DEFAULT_STORAGE) -> StudyView:
    """A stored study (default: the only one in the database), read only.

    Raises:
        StorageError: no database file, no such study, or several to choose from.
    """
    return _stored.load(study, storage)
