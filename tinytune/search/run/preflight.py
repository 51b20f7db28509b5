"""Preflight: every check a search makes before it trains anything, run once, by the command
line and the library alike.

It resolves the supernet and the device (with the newest calibration stored for it), checks the
data set (every file of an image folder is read once: decoded at the resolution the study
measures first into the on-disk cache that every worker then maps, or not read at all when that
cache holds it already; a worker decodes another resolution when a candidate first needs it)
and that its classes match the search,
refuses budgets over what the device has or that no candidate can meet, and hands the driver
what it needs to cost candidates.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytune.db import Store
from tinytune.errors import BudgetOptionError, ConfigError, flag
from tinytune.evaluators import HardwareEvaluator
from tinytune.hwmodels.profile import DeviceProfile
from tinytune.search.config.budgets import (
    DEFAULT_TRIALS,
    check_budgets,
    check_feasible,
    epoch_costs,
    feasible_cuts,
)
from tinytune.search.config.search_config import SearchConfig, reference_candidate
from tinytune.spaces import Candidate, SupernetSpec, get_supernet

if TYPE_CHECKING:
    from tinytune.data import DecodeProgress, ImageDataset
    from tinytune.search.run.events import SearchEvent

__all__ = ["Preflight", "preflight", "warn_idle_options"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preflight:
    """What the checks found, for the driver.

    Attributes:
        spec: the supernet.
        device: the device profile a search predicts latency with.
        latency_profile: which profile that is (``"stm32f746 (built-in)"``,
            ``"host (calibration 3)"``), recorded with every evaluation.
        hardware: prices a candidate (memory plan and latency) without trained weights.
        flash_budget: the flash budget, or the device's flash when none was given.
        reference: the study's reference candidate (full fine-tuning of the default
            sub-network).
        val_images: images in the data set's validation split.
        train_images: images in its training split.
        test_images: images in its test split.
        repeats: train/val partitions each candidate is measured on (``config.repeats``, or
            :func:`tinytune.data.val_repeats` of ``val_images``).
        copies: image files left out of the data set as copies of others.
        cuts: the stage counts the sampler may cut a fixed network after
            (:func:`~tinytune.search.config.budgets.feasible_cuts`).
    """

    spec: SupernetSpec
    device: DeviceProfile
    latency_profile: str
    hardware: HardwareEvaluator
    flash_budget: int
    reference: Candidate
    val_images: int = 0
    repeats: int = 1
    train_images: int = 0
    test_images: int = 0
    copies: int = 0
    cuts: tuple[int, ...] = ()


def _fed_by(spec: SupernetSpec, data: ImageDataset) -> SupernetSpec:
    """``spec`` as ``data`` can feed it: a network's own input checked against the samples,
    and searched at the sizes the data set makes (a series: its own alone).

    Raises:
        ConfigError: a network whose input the samples are not, or samples that are not
            images for a built-in supernet.
    """
    if spec.imported:
        from tinytune.spaces.networks import check_network_input

        check_network_input(spec.network_file, data.name, data.input_shape)
        searched = data.searched_at(spec.resolutions)
        if searched != spec.resolutions:  # a series: the one size its samples have
            spec = dataclasses.replace(spec, resolutions=searched)
    elif data.input_shape is not None:
        raise ConfigError(
            f"data set {data.name!r} gives samples of "
            f"{'x'.join(map(str, data.input_shape))}, not images; search it with your own network "
            "of that input as the supernet (FILE.pt2 or FILE.onnx), or train a built-in one on a "
            "larger folder of yours first ('tinytune pretrain --network ds-cnn --dataset "
            "audio:FOLDER --out DIR', or cnn-1d for series:)"
        )
    return spec


def preflight(
    config: SearchConfig,
    store: Store | None,
    progress: Callable[[SearchEvent], None] | None = None,
) -> Preflight:
    """Check a search before it starts; ``store`` holds the device calibrations (None: a
    database not created yet, which holds none, so the built-in profiles). ``progress`` hears
    of an image folder's decoding (:func:`decoding_events`).

    Raises:
        ConfigError: an unknown supernet or device, a data set with another number of
            classes than ``config.n_classes``, a network whose input it cannot feed, or
            augmentation asked of samples that are not images.
        DataError: the data set cannot be read.
        BudgetError: a budget exceeds the device, or no candidate can meet it.
    """
    from tinytune.data import frontend_of, get_dataset, val_repeats
    from tinytune.hwmodels.registry import get_device, profile_label

    spec = get_supernet(config.supernet)
    calibration = (
        store.latest_device_calibration(config.device, config.engine)
        if store is not None
        else None
    )
    device = get_device(config.device, calibration, config.engine)
    check_budgets(config, device)
    data = get_dataset(config.dataset, seed=config.data_seed)
    spec = _fed_by(spec, data)
    if config.finetune.augment != "none" and data.input_shape is not None:
        raise ConfigError(
            flag("augment", config.finetune.augment)
            + f" crops images; data set {data.name!r} gives samples of "
            + "x".join(map(str, data.input_shape))
            + ": leave it at none"
        )
    if data.num_classes != config.n_classes:
        raise ConfigError(
            f"data set {data.name!r} has {data.num_classes} classes, the search was set up for "
            f"{config.n_classes}; expected n_classes={data.num_classes}"
        )
    hardware = HardwareEvaluator(
        spec,
        config.n_classes,
        config.hardware,
        device,
        config.sram_budget_bytes,
        frontend_of(data),
    )
    check_feasible(config, hardware)
    flash_budget = config.flash_budget_bytes or device.flash_bytes
    cuts = feasible_cuts(config, hardware, flash_budget)
    train_images, val_images, test_images = data.split_sizes()
    repeats = config.repeats or val_repeats(val_images)
    check_epoch_budget(config, repeats)
    # the longest check last: every file read, decoded at the resolution the study measures
    # first (its reference, presets and learning-rate grid); a worker decodes another
    # resolution when a candidate first needs it (tinytune.data.imagefolder)
    reference = reference_candidate(spec.name)
    # samples that are not images are made at every resolution searched now (a keyword
    # folder's features, by a front-end of each size; a series data set refuses any other)
    resolutions = spec.resolutions if data.input_shape is not None else ()
    data.check([reference.subnet.resolution, *resolutions], decoding_events(config, progress))
    return Preflight(
        spec=spec,
        device=device,
        latency_profile=f"{device.name}, {device.engine} engine ({profile_label(calibration)})",
        hardware=hardware,
        flash_budget=flash_budget,
        reference=reference,
        val_images=val_images,
        repeats=repeats,
        train_images=train_images,
        test_images=test_images,
        copies=data.copies,
        cuts=cuts,
    )


def decoding_events(
    config: SearchConfig, progress: Callable[[SearchEvent], None] | None
) -> Callable[[DecodeProgress], None] | None:
    """An image folder's decoding told to ``progress`` as search events: ``decoding``
    (``done`` of ``total`` images decoded into the cache folder ``path``) while it decodes, or
    one ``decoded`` when the resolution was in the cache already (``path``: that folder)."""
    if progress is None:
        return None
    from tinytune.search.run.events import Counts, SearchEvent

    def tell(step: DecodeProgress) -> None:
        progress(
            SearchEvent(
                "decoded" if step.reused else "decoding",
                Counts(),
                finished=0,
                budget=config.trials or DEFAULT_TRIALS,
                in_flight=0,
                done=step.done,
                total=step.total,
                path=str(step.folder),
            )
        )

    return tell


def check_epoch_budget(config: SearchConfig, repeats: int) -> None:
    """Refuse an ``epoch_budget`` below what one proposal costs (a measured fine-tune on each
    of ``repeats`` partitions, with its bracket's screenings under ``halving``): every run
    would stop before its first proposal, and the next the same.

    Raises:
        BudgetError: naming the least budget that measures something.
    """
    budget = config.epoch_budget
    if budget is None:
        return
    least, short = epoch_costs(config, repeats)  # what the driver counts a proposal at
    what = f"a measured fine-tune of {config.finetune.epochs} epochs"
    if repeats > 1:
        what += f" on {repeats} train/validation partitions"
    if config.halving:
        least += config.proxy_eta * short
        what += f" and the {config.proxy_eta} short fine-tunes that screen it"
    if budget < least - 1e-9:
        raise BudgetOptionError(
            "epoch_budget",
            f"{budget:g} is less than one proposal costs here ({what}: {least:g} epochs); give "
            f"at least {least:g}",
        )


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SearchConfig)}


def warn_idle_options(config: SearchConfig) -> None:
    """Warn of options that this run's other options make idle."""
    if config.mutate and config.mutate != _DEFAULTS["mutate"] and config.preset is not None:
        # a share asked for, not the default, and not 0 (off, as the preset makes it);
        # Words: each front end's log handler names the option as it does
        log.warning(
            flag("mutate", config.mutate) + " changes update schemes; it is off with a preset"
        )
    if config.climb != _DEFAULTS["climb"] and (config.preset is not None or not config.mutate):
        log.warning(flag("climb", config.climb) + " shares out the mutants; this run makes none")
    if config.reproducible and config.time_budget_s is not None:
        log.warning(
            flag("reproducible", True)
            + " with "
            + flag("time_budget")
            + ": where the clock stops the run depends on the machine's speed, so another "
            "run may measure more or fewer fine-tunes"
        )
    if (config.proxy or config.halving) and config.preset is not None:
        log.warning("the fidelity ladder searches update schemes; it is off with a preset")
