"""Assemble a device bundle for one candidate: check that it fits, build and quantize it, lower
its training step, render the C, and describe it all in a manifest.

The pipeline (:func:`build_bundle`):

1. cost, without weights: the candidate's training graph and int8 memory plan, exactly as the
   search computed them (:class:`~tinytune.evaluators.HardwareEvaluator`), and its predicted
   step latency on the device; a candidate whose arena (with a keyword model's front-end
   scratch) exceeds the device's SRAM, or that holds
   an op without an int8 kernel (a trained BatchNorm scale: the ``bn+last`` scheme), stops
   here;
2. the network the search fine-tuned, from the supernet weights, with its BatchNorm
   re-estimated on the training images and folded (:func:`~tinytune.models.build_candidate`);
3. post-training int8 quantization calibrated on those images (:func:`~tinytune.quant.quantize`)
   and the lowering of one training step onto the planner's arena
   (:func:`~tinytune.lowering.program.lower_step`); the lowered arena must equal step 1's;
4. the C: the model (:mod:`tinytune.bundle.render`), the example's samples
   (:mod:`tinytune.bundle.samples`), the kernels, the platform files, the Makefile, the CMake,
   Zephyr and Arduino layouts (:mod:`tinytune.bundle.layouts`), a README and
   ``manifest.json``.

Nothing is written here: :func:`tinytune.bundle.writer.write_bundle` writes the result.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.bundle.expected import MAX_SIMULATED_STEPS, ExampleRun, simulate_example
from tinytune.bundle.frames import audio_rule, series_rule
from tinytune.bundle.frames import input_rule as dataset_input_rule
from tinytune.bundle.frontend import Frontend, WindowInput
from tinytune.bundle.layouts import (
    ARDUINO_UNITS,
    LAYOUT_FILES,
    LIBRARY_PROPERTIES,
    arduino_sources,
    render_library_properties,
)
from tinytune.bundle.manifest import BUNDLE_FORMAT, checksums
from tinytune.bundle.render import PARAMS_VERSION, ModelInfo, render_model, render_profile
from tinytune.bundle.samples import Samples, render_samples
from tinytune.errors import BudgetError, flag
from tinytune.evaluators.hardware import HardwareCost
from tinytune.hashing import sha256_file
from tinytune.hwmodels.profile import DeviceProfile
from tinytune.hwmodels.stack import RATE_BYTES
from tinytune.ir import Graph, unrolled
from tinytune.lowering import C_HEADERS, C_SOURCES, csrc_dir
from tinytune.lowering.program import StepProgram
from tinytune.quant import QuantizationError, QuantizedNet
from tinytune.quant.schedule import LR_SCHEDULES, MIN_DEVICE_LR
from tinytune.spaces import Candidate

if TYPE_CHECKING:
    from tinytune.data import ImageDataset
    from tinytune.data.logmel import LogMelSpec

__all__ = [
    "STATIC_FILES",
    "Bundle",
    "BundleRequest",
    "Provenance",
    "build_bundle",
    "c_sources",
    "check_candidate",
    "exported_file_names",
]

log = logging.getLogger(__name__)

# packaged file → its path in the bundle
STATIC_FILES = {
    "bundle.mk": "Makefile",
    "example_main.c": "main.c",
    "cortex_m7_startup.c": "platform/cortex_m7_startup.c",
    "cortex_m7.ld": "platform/cortex_m7.ld",
    "profile_main.c": "platform/profile_main.c",
    **LAYOUT_FILES,
}
README_TEMPLATE = "bundle_readme.md"
FEEDING_IMAGE = "feeding_image.md"
FEEDING_SERIES = "feeding_series.md"
FEEDING_AUDIO = "feeding_audio.md"


def exported_file_names() -> frozenset[str]:
    """The path of every file of an exported bundle besides its manifest: what
    :func:`build_bundle` writes, known before anything is built (to check a destination)."""
    rendered = ("tt_model.h", "tt_model.c", "tt_profile.h", "tt_data.h", "tt_data.c", "README.md")
    kernels = (f"kernels/{name}" for name in (*C_HEADERS, *C_SOURCES))
    return frozenset(
        (*rendered, *kernels, *STATIC_FILES.values(), *ARDUINO_UNITS, LIBRARY_PROPERTIES)
    )


@dataclass(frozen=True)
class BundleRequest:
    """What to export and how the example trains.

    Attributes:
        candidate: the candidate.
        checkpoint: the supernet weights it was searched with.
        device: the device profile (SRAM and flash limits, latency model).
        dataset, data_seed: the data set of the study and the seed of its splits.
        samples: training samples embedded in the example (and at most as many held-out test
            samples for its evaluation).
        epochs: epochs the example trains.
        lr: the on-device learning rate (plain SGD, batch 1, QAS-scaled), of the first epoch.
        lr_schedule: how the example's rate moves over the epochs: ``halving`` after every
            epoch (the default, as the search measures the device's accuracy), or ``constant``
            (:data:`tinytune.quant.schedule.LR_SCHEDULES`).
        seed: seeds the new classifier (as the search's fine-tuning does).
        latency_profile: where the device's latency coefficients came from, for people.
    """

    candidate: Candidate
    checkpoint: Path
    device: DeviceProfile
    dataset: str = "digits"
    data_seed: int = 0
    samples: int = 32
    epochs: int = 3
    lr: float = 0.01
    lr_schedule: str = "halving"
    seed: int = 0
    latency_profile: str = "built-in profile"

    def __post_init__(self) -> None:
        check_options(self.samples, self.epochs, self.lr, self.lr_schedule)


MAX_EXAMPLE_COUNT = 32766
"""The most samples and epochs the example takes: it counts them in a C ``int``, which C99
guarantees up to 32767, and its epoch loop runs to the count inclusive (so one less)."""


def check_options(samples: int, epochs: int, lr: float, lr_schedule: str = "halving") -> None:
    """Validate the example's settings (a :class:`BundleRequest` does it; call it early to
    fail before any work). A refusal names the option of the export's front ends
    (``samples``, ``epochs``, ``lr``, ``lr_schedule``) as each of them words it."""
    for name, value in (("samples", samples), ("epochs", epochs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BundleError(flag(name) + f" must be an integer >= 1, got {value!r:.40}")
        if value > MAX_EXAMPLE_COUNT:
            raise BundleError(
                flag(name) + f" must be at most {MAX_EXAMPLE_COUNT} (the example counts in a C "
                f"int, at least 16 bits), got {value}"
            )
    number = not isinstance(lr, bool) and isinstance(lr, int | float)
    if not (number and math.isfinite(lr) and MIN_DEVICE_LR <= lr < 10.0):
        raise BundleError(flag("lr") + f" must lie in [{MIN_DEVICE_LR:g}, 10), got {lr!r}")
    if lr_schedule not in LR_SCHEDULES:
        raise BundleError(
            flag("lr_schedule") + f" must be one of {', '.join(LR_SCHEDULES)}, got {lr_schedule!r}"
        )


@dataclass(frozen=True)
class Provenance:
    """Where the candidate came from, for the manifest.

    Attributes:
        study, trial: the study and trial number, when exported from one.
        measured: the search's measured ``accuracy`` and ``val_accuracy`` (fractions), if any,
            and ``augment``, how its fine-tunes augmented the training images (``none``; None:
            not recorded), which the bundle's own training does not do.
        int8: the device's accuracy (int8, batch 1, QAS): ``accuracy``, ``val_accuracy``,
            ``lr``, ``epochs`` and where it came from, if measured.
        search_memory_bytes: the peak SRAM the search stored for the trial.
        checkpoint_source: how the weights were chosen (``--weights``, the study, the cache).
    """

    study: str | None = None
    trial: int | None = None
    measured: dict[str, Any] | None = None
    int8: dict[str, Any] | None = None
    search_memory_bytes: int | None = None
    checkpoint_source: str = "--weights"


@dataclass(frozen=True, eq=False)
class Bundle:
    """A rendered bundle, not yet written.

    Attributes:
        files: every file but the manifest, by its path inside the bundle.
        manifest: the manifest (with the checksums of ``files``).
        net: the exported network, before any on-device training.
        program: its lowered training step.
        model: the numbers the C model states.
        train, evaluation: the example's samples.
        example: what the example's evaluations count, by tinytune's integer simulator (None:
            more steps than :data:`~tinytune.bundle.expected.MAX_SIMULATED_STEPS`).
    """

    files: dict[str, bytes]
    manifest: dict[str, Any]
    net: QuantizedNet = field(repr=False)
    program: StepProgram = field(repr=False)
    model: ModelInfo
    train: Samples = field(repr=False)
    evaluation: Samples = field(repr=False)
    example: ExampleRun | None = None


def _platform_file(name: str) -> bytes:
    return (resources.files("tinytune.bundle") / "platform" / name).read_bytes()


def _check_int8_ops(candidate: Candidate, graph: Graph) -> None:
    """Every op must have an int8 kernel; checked on the traced graph before any weight is
    read (the rules of :func:`tinytune.quant.quantize`)."""
    from tinytune.quant.quantizer import check_op

    for op in graph.ops:
        try:
            check_op(op, graph)
        except QuantizationError as e:
            raise QuantizationError(
                f"candidate {candidate.key[:12]} of {candidate.supernet} cannot run int8 "
                f"training: {e}"
            ) from e


def _kb(n: int, *, rounded: bool = False) -> str:
    """A size in the unit that fits and in bytes (a capacity ``rounded``: ``1 MB``)."""
    from tinytune.units import format_bytes

    return f"{format_bytes(n, rounded=rounded)} ({n} B)"


def _scheme(candidate: Candidate) -> str:
    update, parts = candidate.update, []
    if update.bias_last_k:
        parts.append(f"biases of the last {update.bias_last_k} convolutions")
    if update.weights:
        listed = ", ".join(f"{i} ({r:g})" for i, r in update.weights)
        parts.append(f"weights of convolutions {listed} on the given fraction of input channels")
    if candidate.lite_residual.blocks:
        blocks = ", ".join(str(b) for b in candidate.lite_residual.blocks)
        where = "stages" if candidate.spec.imported else "blocks"  # a user's network: stages
        parts.append(f"lite residual branches on {where} {blocks}")
    parts.append("the classifier")
    return "; ".join(parts)


def _samples(
    q: QuantizedNet, x: np.ndarray, y: np.ndarray, split: str, clips: np.ndarray | None = None
) -> Samples:
    import torch

    images = q.quantize_input(torch.from_numpy(np.array(x))).numpy().astype(np.int8)
    return Samples(images, np.asarray(y, dtype=np.int64).copy(), split, clips)


def _example_samples(
    q: QuantizedNet, dataset: ImageDataset, splits: Any, count: int, feeding: _Feeding
) -> tuple[Samples, Samples]:
    """The first ``count`` training and held-out test samples, int8 as the network takes them;
    an audio or sensor model's also as the device records them (its example trains on those,
    as a device does)."""
    recorded = feeding.frontend is not None
    parts = []
    for name, split in (("train", splits.train), ("test", splits.test)):
        n = min(count, len(split))
        raw = dataset.recorded(name, n) if recorded else None  # type: ignore[attr-defined]
        parts.append(_samples(q, split.x[:n], split.y[:n], name, raw))
    return parts[0], parts[1]


def c_sources(
    program: StepProgram,
    net: QuantizedNet,
    train: Samples,
    evaluation: Samples,
    *,
    epochs: int,
    title: str,
    data: str,
    class_names: Sequence[str],
    input_rule: str,
    profile: str | None = None,
    schedule: str = "constant",
    frontend: Frontend | WindowInput | None = None,
) -> tuple[dict[str, bytes], ModelInfo, ExampleRun | None]:
    """Every C source, header and build file of a bundle (no README, no ``library.properties``,
    no manifest): the model of ``program`` (lowered from ``net``; its ``class_names`` and how
    its samples became its input, ``input_rule``), the example's samples (described by
    ``data``), its rate's ``schedule`` over the epochs (``constant`` unless given; an exported
    bundle's is its request's) and the counts the example should print, simulated
    (:func:`~tinytune.bundle.expected.simulate_example`); the kernels, the example program, the
    platform files, the Makefile, the CMake and Zephyr files, the Arduino library's ``src/`` and
    sketch and, when given, the profiler's ``tt_profile.h``
    (:func:`~tinytune.bundle.render.render_profile`); an audio or sensor model's ``frontend``
    makes its input of raw samples (:mod:`tinytune.bundle.frontend`). Returns the files, the
    model's
    numbers and the simulated counts."""
    rendered, model = render_model(
        program,
        net,
        title=title,
        class_names=class_names,
        input_rule=input_rule,
        frontend=None if frontend is None else frontend.render(),
    )
    if profile is not None:
        rendered["tt_profile.h"] = profile
    example = simulate_example(net, program.lr, train, evaluation, epochs, schedule)
    rendered |= render_samples(
        train,
        evaluation,
        epochs=epochs,
        description=data,
        schedule=schedule,
        expected=None if example is None else example.correct,
    )
    files = {name: text.encode() for name, text in rendered.items()}
    src = csrc_dir()
    for name in (*C_HEADERS, *C_SOURCES):
        files[f"kernels/{name}"] = (src / name).read_bytes()
    for packaged, name in STATIC_FILES.items():
        files[name] = _platform_file(packaged)
    files |= {name: text.encode() for name, text in arduino_sources().items()}
    return files, model, example


def check_candidate(
    candidate: Candidate,
    device: DeviceProfile,
    n_classes: int,
    frontend: LogMelSpec | None = None,
) -> HardwareCost:
    """Step 1 alone, without weights (tens of milliseconds): the candidate's int8 training cost
    as the search computed it (with the data set's front-end, :func:`tinytune.data.frontend_of`),
    with its predicted latency on ``device``.

    Raises:
        BudgetError: its arena (and front-end) exceed the device's SRAM.
        QuantizationError: it holds an op without an int8 kernel.
    """
    return _cost_and_graph(candidate, device, n_classes, frontend)[0]


def _cost_and_graph(
    candidate: Candidate,
    device: DeviceProfile,
    n_classes: int,
    frontend: LogMelSpec | None = None,
) -> tuple[HardwareCost, Graph]:
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.spaces import get_supernet

    spec = get_supernet(candidate.supernet)
    config = HardwareConfig(precision="int8")
    hw = HardwareEvaluator(spec, n_classes, config, device, frontend=frontend)
    cost, graph = hw.cost_with_graph(candidate)
    _check_int8_ops(candidate, graph)
    if cost.sram_bytes > device.sram_bytes:
        raise BudgetError(
            f"candidate {candidate.key[:12]} needs {cost.sram_bytes} bytes of SRAM (a "
            f"{cost.arena_bytes}-byte training arena, {cost.static_bytes} of static data and "
            f"{cost.stack_bytes} of stack), more than the {device.sram_bytes} bytes of "
            f"{device.name}"
        )
    return cost, graph


def _lowered(
    request: BundleRequest, splits: Any, n_classes: int, cost: HardwareCost
) -> tuple[QuantizedNet, Any, StepProgram]:
    """The network the search fine-tuned, from the supernet weights, int8, with its frozen
    prefix scheduled as the candidate says and its step lowered onto the planner's arena.

    Raises:
        BundleError: the lowered step's arena is not the one the search planned.
    """
    from tinytune.evaluators.hardware import schedule_plan
    from tinytune.evaluators.task import network_on_data
    from tinytune.hwmodels import plan_memory
    from tinytune.lowering.program import lower_step
    from tinytune.models import load_supernet
    from tinytune.quant import quantize
    from tinytune.spaces import get_supernet

    candidate = request.candidate
    supernet = load_supernet(get_supernet(candidate.supernet), Path(request.checkpoint))
    net, calib = network_on_data(candidate, supernet, splits, n_classes, request.seed)
    q = quantize(net, calib)
    # the frozen prefix as the candidate schedules it (whole images, or patch by patch)
    plan = schedule_plan(q.graph, candidate.schedule)
    program = lower_step(q, request.lr, plan_memory(q.graph, precision="int8", patches=plan))
    if program.arena_bytes != cost.arena_bytes:
        raise BundleError(
            f"the lowered step needs a {program.arena_bytes}-byte arena, the plan of the search "
            f"{cost.arena_bytes}; they must be equal"
        )
    return q, plan, program


def build_bundle(
    request: BundleRequest,
    provenance: Provenance | None = None,
) -> Bundle:
    """Everything a bundle holds for ``request`` (see the module docstring).

    Raises:
        BudgetError: the arena exceeds the device's SRAM, or the constants its flash.
        QuantizationError: the candidate holds an op without an int8 kernel.
        BundleError: the request is invalid, or the lowered step disagrees with the plan.
    """

    from tinytune.data import frontend_of, get_dataset

    provenance = provenance or Provenance()
    candidate, device = request.candidate, request.device
    data = get_dataset(request.dataset, seed=request.data_seed)
    dataset = data.at(candidate.subnet.resolution)  # a keyword folder: that front-end's
    n_classes = dataset.num_classes

    # 1. what the search predicted, before any weight is read
    cost, graph = _cost_and_graph(candidate, device, n_classes, frontend_of(data))

    # 2–3. the network, int8, and its step on the planner's arena
    splits = dataset.load(candidate.subnet.resolution)
    q, plan, program = _lowered(request, splits, n_classes, cost)
    feeding = _Feeding.of(dataset, q, candidate.subnet.resolution)

    # 4. the C
    train, evaluation = _example_samples(q, dataset, splits, request.samples, feeding)
    n_train, n_eval = len(train), len(evaluation)
    title = f"candidate {candidate.key[:12]} ({candidate.supernet}, {feeding.size})"
    files, model, example = c_sources(
        program,
        q,
        train,
        evaluation,
        epochs=request.epochs,
        schedule=request.lr_schedule,
        title=title,
        class_names=dataset.class_names,
        input_rule=feeding.rule,
        data=(
            f"the first {n_train} training and {n_eval} held-out test samples of "
            f"{dataset.name} (split seed {request.data_seed}) at {feeding.size}"
        ),
        profile=render_profile(
            program,
            name=candidate.key,
            device=device.name,
            clock_hz=device.clock_hz,
            # patch by patch, the graph the calls' timings fit: each patch's ops apart
            graph_json=(graph if plan is None else unrolled(q.graph, plan)).to_json(),
        ),
        frontend=feeding.frontend,
    )
    if model.flash_bytes > device.flash_bytes:
        raise BudgetError(
            f"candidate {candidate.key[:12]} needs {model.flash_bytes} bytes of constants, more "
            f"than the {device.flash_bytes} bytes of flash of {device.name}"
        )
    facts = _Facts(
        request,
        provenance,
        cost,
        model,
        title,
        dataset.name,
        tuple(dataset.class_names),
        n_train,
        n_eval,
        graph,
        example,
        feeding,
    )
    manifest = _describe(facts, files)
    log.info(
        "bundle of %s: arena %d B, %d calls", candidate.key[:12], model.arena_bytes, model.n_calls
    )
    return Bundle(files, manifest, q, program, model, train, evaluation, example)


@dataclass(frozen=True)
class _Feeding:
    """What the model is fed: its input's shape (C, H, W), how the search made its samples (a
    sentence), its size in words, a series' per-channel (mean, std), else None, and an audio
    model's front-end, else None."""

    shape: tuple[int, ...]
    rule: str
    size: str
    normalisation: tuple[np.ndarray, np.ndarray] | None
    frontend: Frontend | WindowInput | None = None

    @classmethod
    def of(cls, dataset: ImageDataset, q: QuantizedNet, resolution: int) -> _Feeding:
        shape = tuple(q.graph.tensors[q.graph.input].shape[1:])
        if dataset.input_shape is None:  # images
            return cls(
                shape, dataset_input_rule(dataset.name, resolution), f"{resolution} px", None
            )
        mean, std = dataset.normalisation  # type: ignore[attr-defined]
        frontend = _frontend(dataset, q)
        rule = (audio_rule if isinstance(frontend, Frontend) else series_rule)(shape, mean, std)
        return cls(shape, rule, "x".join(map(str, shape)), (mean, std), frontend)


def _frontend(dataset: ImageDataset, q: QuantizedNet) -> Frontend | WindowInput | None:
    """What makes the input of a device's raw samples as the search made it of its files (the
    data set's standardisation, the network's input quantization): an audio data set's
    front-end, a series data set's standardisation; None for images."""
    import torch

    from tinytune.data import AudioDataset, SeriesDataset

    if not isinstance(dataset, SeriesDataset):
        return None
    if not isinstance(dataset, AudioDataset):
        mean, std = dataset.normalisation
        q_in = q.acts[q.graph.input]
        return WindowInput(mean, std, float(q_in.scale), int(q_in.zero))

    def to_input(features: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(dataset.to_input(features).reshape(-1, 1, 1, 1))
        return q.quantize_input(x).numpy().reshape(-1)

    return Frontend.of(dataset.spec, to_input)


@dataclass(frozen=True)
class _Facts:
    """What the README and the manifest state about a bundle."""

    request: BundleRequest
    provenance: Provenance
    cost: HardwareCost
    model: ModelInfo
    title: str
    dataset: str
    class_names: tuple[str, ...]
    n_train: int
    n_eval: int
    graph: Graph
    example: ExampleRun | None
    feeding: _Feeding

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def train_step_s(self) -> float | None:
        return self.cost.latency.train_step_s if self.cost.latency else None


def _describe(f: _Facts, files: dict[str, bytes]) -> dict[str, Any]:
    """Add the README and ``library.properties`` to ``files``; the manifest of them all."""
    files["README.md"] = _readme(f).encode()
    files[LIBRARY_PROPERTIES] = render_library_properties(
        _platform_file(LIBRARY_PROPERTIES).decode(),
        key=f.request.candidate.key,
        title=f.title,
        device=f.request.device.name,
        arena_bytes=f.model.arena_bytes,
        version=_version(),
    ).encode()
    return _manifest(f, files)


def _readme(f: _Facts) -> str:
    candidate, device, model = f.request.candidate, f.request.device, f.model
    accuracy = (f.provenance.measured or {}).get("accuracy")
    measured = "none stored"
    if accuracy is not None:
        measured = f"{100 * accuracy:.1f} % on the held-out test split"
        if f.provenance.study:
            measured += f" (study {f.provenance.study!r})"
    int8 = f.provenance.int8
    if int8 is not None and int8.get("accuracy") is not None:
        measured += (
            f"; trained as this bundle trains (int8, batch 1, QAS, {int8['epochs']} epochs over "
            f"the training split): {100 * int8['accuracy']:.1f} %"
        )
    return Template(_platform_file(README_TEMPLATE).decode()).substitute(
        **_example_words(f),
        classes=_markdown_names(f.class_names),
        params=_kb(model.params_bytes),
        params_bytes=model.params_bytes,
        model_id=model.model_id,
        **_feeding_words(f),
        pillow=_pillow_version(),
        title=f.title,
        key=candidate.key,
        supernet=candidate.supernet,
        resolution=candidate.subnet.resolution,
        n_classes=f.n_classes,
        scheme=_scheme(candidate),
        device=device.name,
        device_sram=_kb(device.sram_bytes, rounded=True),
        device_flash=_kb(device.flash_bytes, rounded=True),
        arena=_kb(model.arena_bytes),
        scratch=f"{model.scratch_bytes} B",
        exponents=f"{model.exponent_bytes} B",
        **_sram_words(model, f.cost),
        model_flash=_kb(model.flash_bytes),
        latency=(
            f"{1000 * f.train_step_s:.1f} ms" if f.train_step_s is not None else "not predicted"
        ),
        latency_source=f.request.latency_profile,
        engine=device.engine,
        accuracy=measured,
        n_train=f.n_train,
        n_eval=f.n_eval,
        dataset=f.dataset,
        epochs=f.request.epochs,
        lr=f"{f.request.lr:g}"
        + (", halved after every epoch" if f.request.lr_schedule == "halving" else ""),
    )


def _feeding_words(f: _Facts) -> dict[str, str]:
    """The README's words on feeding the model: an image model's camera frames, or a series
    model's standardised windows."""
    fields = {
        "input_rule": f.feeding.rule,
        "resolution": str(f.request.candidate.subnet.resolution),
        "pillow": _pillow_version(),
    }
    if isinstance(f.feeding.frontend, Frontend):
        return _audio_words(f, fields)
    if f.feeding.normalisation is None:
        feeding = Template(_platform_file(FEEDING_IMAGE).decode()).substitute(fields)
        r = f.request.candidate.subnet.resolution
        return {
            "input_size": f"{r}×{r} px",
            "feeding": feeding.rstrip("\n"),
            "frame_helpers": (
                "`tt_quantize_rgb888()` and `tt_quantize_grey8()` (a camera frame to the input), "
            ),
            "made_from": "image, made from the camera's frame by `tt_quantize_rgb888()`",
        }
    mean, std = f.feeding.normalisation
    feeding = Template(_platform_file(FEEDING_SERIES).decode()).substitute(
        fields,
        shape="×".join(map(str, f.feeding.shape)),
        means=", ".join(f"{float(v):.6g}" for v in mean),
        stds=", ".join(f"{float(v):.6g}" for v in std),
    )
    return {
        "input_size": "×".join(map(str, f.feeding.shape)),
        "feeding": feeding.rstrip("\n"),
        "frame_helpers": "`tt_input_from_values()` (a sensor's values to the input), ",
        "made_from": "window's input, made from the sensor's values by `tt_input_from_values()`",
    }


def _audio_words(f: _Facts, fields: dict[str, str]) -> dict[str, str]:
    """The README's words on feeding an audio model: a microphone's samples."""
    assert isinstance(f.feeding.frontend, Frontend)
    entry = f.feeding.frontend.entry()
    feeding = Template(_platform_file(FEEDING_AUDIO).decode()).substitute(
        fields | entry,
        shape="×".join(map(str, f.feeding.shape)),
        low_hz=f"{entry['low_hz']:g}",
        high_hz=f"{entry['high_hz']:g}",
    )
    return {
        "input_size": "×".join(map(str, f.feeding.shape)),
        "feeding": feeding.rstrip("\n"),
        "frame_helpers": "`tt_input_from_pcm16()` (a microphone's samples to the input), ",
        "made_from": "clip's input, made from the microphone's samples by `tt_input_from_pcm16()`",
    }


def _example_words(f: _Facts) -> dict[str, str]:
    """The README's words on what the example prints: the simulator's counts, or why none."""
    run = f.example
    if run is None:
        steps = f.n_train * f.request.epochs
        why = (
            f"not simulated ({steps} training steps, more than the {MAX_SIMULATED_STEPS} the "
            "export simulates)"
        )
        return {"expected": why, "expected_sentence": f"its counts were {why}."}
    counts = ", ".join(f"{c}/{run.total}" for c in run.correct)
    return {
        "expected": (
            f"expected after {run.epochs} epochs: {run.correct[-1]}/{run.total} (the integer "
            "simulator's figure; the C prints the same)"
        ),
        "expected_sentence": (
            f"tinytune's integer simulator counts {counts} right before training and after "
            f"each epoch, and the example prints the same counts on every target."
        ),
    }


def _markdown_names(names: Sequence[str]) -> str:
    """Class names as a Markdown list inside a table cell: quoted, ``|`` escaped."""
    return ", ".join(json.dumps(name, ensure_ascii=False).replace("|", "\\|") for name in names)


def _pillow_version() -> str:
    import PIL

    return str(PIL.__version__)


def _patches(f: _Facts) -> dict[str, Any] | None:
    """How the step runs its frozen prefix patch by patch (None: whole images): the schedule,
    the ops of the patched stage, and its multiply-accumulates patch by patch and whole."""
    plan = f.cost.memory.patches
    if plan is None:
        return None
    patched, whole = plan.macs(f.graph)
    schedule = f.request.candidate.schedule
    return {
        "per_side": schedule.patches,
        "blocks": schedule.blocks,
        "stage_ops": plan.stage_end,
        "stage_macs_patched": patched,
        "stage_macs_whole": whole,
    }


def _example_bytes(f: _Facts) -> int:
    """The flash of the example's samples (``tt_data.c``): each its int8 input and its
    ``uint16_t`` label, and what a device recorded of it: an audio model's clip (``int16``), a
    sensor model's values (float64)."""
    per_sample = f.model.input_bytes + 2
    if isinstance(f.feeding.frontend, Frontend):
        per_sample += 2 * f.feeding.frontend.spec.clip
    elif isinstance(f.feeding.frontend, WindowInput):
        per_sample += 8 * f.model.input_bytes
    return (f.n_train + f.n_eval) * per_sample


def _feeding_and_saving(f: _Facts) -> dict[str, Any]:
    """The manifest's entries on feeding the model, on its example and on its parameters'
    blob."""
    model = f.model
    feeding: dict[str, Any] = {
        "shape": list(f.feeding.shape),
        "layout": "channels first (R, G, B planes)",
        "scale": model.input_scale,
        "zero": model.input_zero,
        "rule": f.feeding.rule,
    }
    if f.feeding.normalisation is None:
        feeding |= {
            "frames": "tt_quantize_rgb888, tt_quantize_grey8: the image-folder rule",
            "pillow": _pillow_version(),
            "resize_order": ("horizontal first", "Pillow 13")[model.resize_order],
        }
    else:
        mean, std = f.feeding.normalisation
        feeding["layout"] = "channels first"
        feeding["normalisation"] = {"mean": mean.tolist(), "std": std.tolist()}
    if f.feeding.frontend is not None:
        feeding["frontend"] = f.feeding.frontend.entry()
    return {
        "input": feeding,
        "example": {
            "smoke_test": True,
            "train_samples": f.n_train,
            "eval_samples": f.n_eval,
            "epochs": f.request.epochs,
            "flash_bytes": _example_bytes(f),
            "expected_correct": list(f.example.correct) if f.example else None,
            "expected_from": "tinytune.quant.train_step in the example's order"
            if f.example
            else f"not simulated: more than {MAX_SIMULATED_STEPS} steps",
        },
        "params_blob": {
            "bytes": model.params_bytes,
            "model_id": model.model_id,
            "format_version": PARAMS_VERSION,
            "byte_order": "little-endian",
        },
    }


def _manifest(f: _Facts, files: dict[str, bytes]) -> dict[str, Any]:
    request, candidate, device, model = f.request, f.request.candidate, f.request.device, f.model
    return {
        "format": BUNDLE_FORMAT,
        "tinytune_version": _version(),
        "candidate": candidate.to_dict(),
        "candidate_key": candidate.key,
        "supernet": {
            "name": candidate.supernet,
            "weights": str(request.checkpoint),
            "weights_sha256": sha256_file(Path(request.checkpoint)),
            "weights_from": f.provenance.checkpoint_source,
        },
        "study": f.provenance.study,
        "trial": f.provenance.trial,
        "dataset": {
            "name": f.dataset,
            "data_seed": request.data_seed,
            "classes": f.n_classes,
            "class_names": list(f.class_names),
            "train_samples": f.n_train,
            "eval_samples": f.n_eval,
            "eval_split": "test",
        },
        **_feeding_and_saving(f),
        "device": {
            "name": device.name,
            "core": device.core,
            "sram_bytes": device.sram_bytes,
            "flash_bytes": device.flash_bytes,
            "latency_profile": request.latency_profile,
        },
        "precision": "int8",
        "training": {
            "optimizer": "SGD without momentum, QAS (MCUNetV3 Eq. 4)",
            "batch_size": 1,
            "lr": request.lr,
            "lr_schedule": request.lr_schedule,
            "epochs": request.epochs,
            "seed": request.seed,
        },
        "memory": {
            "arena_bytes": model.arena_bytes,
            **_sram(model, f.cost),
            "predicted_peak_sram_bytes": f.cost.memory.peak_bytes,
            "search_memory_bytes": f.provenance.search_memory_bytes,
            "scratch_bytes": model.scratch_bytes,
            "exponent_bytes": model.exponent_bytes,
            "model_flash_bytes": model.flash_bytes,
            "planner_flash_bytes": f.cost.flash_bytes,
            "patches": _patches(f),
        },
        "predicted_latency": {
            "engine": device.engine,
            "train_step_s": f.train_step_s,
            "frontend_s": None if f.cost.frontend is None else f.cost.frontend.seconds,
            "inference_s": f.cost.latency.inference_s if f.cost.latency else None,
        },
        "measured": f.provenance.measured,
        "measured_int8": f.provenance.int8,
        "step": {"calls": model.n_calls, "input_bytes": model.input_bytes},
        "files": checksums(files),
    }


def _sram(model: Any, cost: HardwareCost) -> dict[str, int]:
    """What the bundle needs of the device's SRAM beside its arena, and in all (the front's
    memory): the static data of its sources (the float32 scratch, the exponents, the rate's
    state, a front-end's buffers) and the stack of its deepest function on the device's core
    (:mod:`tinytune.hwmodels.stack`; 0 for the host)."""
    frontend = 0 if cost.frontend is None else cost.frontend.scratch_bytes
    static = model.scratch_bytes + model.exponent_bytes + RATE_BYTES + frontend
    if static != cost.static_bytes:
        raise BundleError(
            f"the bundle's static data takes {static} bytes, the plan of the search "
            f"{cost.static_bytes}; they must be equal"
        )
    return {
        "static_bytes": static,
        "stack_bytes": cost.stack_bytes,
        "sram_bytes": model.arena_bytes + static + cost.stack_bytes,
    }


def _sram_words(model: Any, cost: HardwareCost) -> dict[str, str]:
    """The README's fields of :func:`_sram`: ``sram`` and ``stack`` in KB, ``static`` in
    bytes."""
    sram = _sram(model, cost)
    return {
        "sram": _kb(sram["sram_bytes"]),
        "static": f"{sram['static_bytes']} B",
        "stack": _kb(sram["stack_bytes"]),
    }


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tinytune")
    except PackageNotFoundError:
        return "unknown"
