"""Render the example's samples as C: int8 images quantized as the model's input, and labels.

``tt_data.h`` states how many training and evaluation samples there are, how many epochs
the example trains, whether its rate halves after each, and how many evaluation samples
tinytune's integer simulator classifies right before and after each epoch
(:mod:`tinytune.bundle.expected`); ``tt_data.c`` holds them as ``const`` arrays (flash on a
microcontroller).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from string import Template

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.bundle.frontend import c_double
from tinytune.bundle.render import c_values
from tinytune.quant.schedule import check_schedule

__all__ = ["Samples", "render_samples"]


@dataclass(frozen=True, eq=False)
class Samples:
    """Images (N, C, H, W) as int8 values and their labels (N,), from one split; and what a
    device records of them, where the bundle makes its input of that: an audio model's clips
    (N, samples) as ``int16``, a sensor model's values (N, C * H * W) as float64."""

    images: np.ndarray
    labels: np.ndarray
    split: str
    recorded: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.images.dtype != np.int8 or self.images.ndim != 4:
            raise BundleError(f"samples must be int8 (N, C, H, W), got {self.images.dtype}")
        if self.labels.shape != (self.images.shape[0],):
            raise BundleError(
                f"{self.images.shape[0]} images need as many labels, got {self.labels.shape}"
            )
        if self.labels.size and not 0 <= int(self.labels.min()) <= int(self.labels.max()) < 2**16:
            raise BundleError("labels must lie in [0, 65535]")
        rec = self.recorded
        if rec is not None and (
            rec.dtype not in (np.int16, np.float64) or rec.ndim != 2 or len(rec) != len(self)
        ):
            raise BundleError(
                f"{len(self)} samples need as many int16 clips or float64 values, got "
                f"{rec.dtype} {rec.shape}"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])


_HEADER = Template("""\
/* tt_data.h: the samples the example trains and evaluates on: $description. */
#ifndef TT_DATA_H
#define TT_DATA_H

#include <stdint.h>

#include "tt_model.h"

#define TT_TRAIN_SAMPLES $n_train
#define TT_EVAL_SAMPLES $n_eval
/* 1: the samples are also recorded clips (tt_train_clips, tt_eval_clips: int16 at
 * TT_SAMPLE_RATE), of which tt_input_from_pcm16() makes the images; TT_DATA_VALUES 1: a
 * sensor's values (tt_train_values, tt_eval_values: float64, channels first), of which
 * tt_input_from_values() makes them. The example trains and evaluates on what it makes, and
 * first checks that it is the search's input, byte for byte. */
#define TT_DATA_CLIPS $clips
#define TT_DATA_VALUES $values
#define TT_EPOCHS $epochs
/* 1: epoch e (from 1) trains at TT_LEARNING_RATE / 2^(e-1); 0: at TT_LEARNING_RATE. */
#define TT_LR_HALVING $halving
/* 1: tt_expected_correct[e] is how many evaluation samples tinytune's integer simulator
 * classifies right after epoch e (0: before training), trained as the example trains; the
 * example prints its own counts beside them. 0: not computed (too many steps to simulate). */
#define TT_EXPECTED_KNOWN $known

#ifdef __cplusplus
extern "C" {
#endif

extern const int8_t tt_train_images[TT_TRAIN_SAMPLES][TT_INPUT_BYTES];
extern const uint16_t tt_train_labels[TT_TRAIN_SAMPLES];
extern const int8_t tt_eval_images[TT_EVAL_SAMPLES][TT_INPUT_BYTES];
extern const uint16_t tt_eval_labels[TT_EVAL_SAMPLES];
#if TT_DATA_CLIPS
extern const int16_t tt_train_clips[TT_TRAIN_SAMPLES][TT_CLIP_SAMPLES];
extern const int16_t tt_eval_clips[TT_EVAL_SAMPLES][TT_CLIP_SAMPLES];
#endif
#if TT_DATA_VALUES
extern const double tt_train_values[TT_TRAIN_SAMPLES][TT_INPUT_BYTES];
extern const double tt_eval_values[TT_EVAL_SAMPLES][TT_INPUT_BYTES];
#endif
#if TT_EXPECTED_KNOWN
extern const uint16_t tt_expected_correct[TT_EPOCHS + 1];
#endif

#ifdef __cplusplus
}
#endif

#endif /* TT_DATA_H */
""")

_SOURCE = Template("""\
/* tt_data.c: $description. */
#include "tt_data.h"

const int8_t tt_train_images[TT_TRAIN_SAMPLES][TT_INPUT_BYTES] = {
$train_images
};
const uint16_t tt_train_labels[TT_TRAIN_SAMPLES] = {
$train_labels
};
const int8_t tt_eval_images[TT_EVAL_SAMPLES][TT_INPUT_BYTES] = {
$eval_images
};
const uint16_t tt_eval_labels[TT_EVAL_SAMPLES] = {
$eval_labels
};
$clip_arrays$expected""")


def _recorded_kind(train: Samples, evaluation: Samples) -> str:
    """``clips``, ``values`` or "" (the images alone)."""
    mine, theirs = train.recorded, evaluation.recorded
    if mine is None or theirs is None or mine.dtype != theirs.dtype:
        return ""
    return "clips" if mine.dtype == np.int16 else "values"


def _recorded_arrays(train: Samples, evaluation: Samples) -> str:
    kind = _recorded_kind(train, evaluation)
    if not kind:
        return ""
    ctype, size = (
        ("int16_t", "TT_CLIP_SAMPLES") if kind == "clips" else ("double", "TT_INPUT_BYTES")
    )
    return "".join(
        f"const {ctype} tt_{name}_{kind}[{count}][{size}] = "
        f"{{\n{_recorded_rows(part.recorded)}\n}};\n"
        for name, count, part in (
            ("train", "TT_TRAIN_SAMPLES", train),
            ("eval", "TT_EVAL_SAMPLES", evaluation),
        )
    )


def _recorded_rows(recorded: np.ndarray | None) -> str:
    assert recorded is not None
    if recorded.dtype == np.int16:
        return _images(recorded)
    return "\n".join(
        f"    {{ /* {i} */\n"
        + "\n".join(
            "        " + ", ".join(c_double(v) for v in row[k : k + 4]) + ","
            for k in range(0, len(row), 4)
        )
        + "\n    },"
        for i, row in enumerate(recorded.tolist())
    )


def _images(images: np.ndarray) -> str:
    return "\n".join(
        f"    {{ /* {i} */\n{c_values(img, indent='        ')}\n    }},"
        for i, img in enumerate(images)
    )


def render_samples(
    train: Samples,
    evaluation: Samples,
    *,
    epochs: int,
    description: str,
    schedule: str = "constant",
    expected: Sequence[int] | None = None,
) -> dict[str, str]:
    """``tt_data.h`` and ``tt_data.c`` for the example program, which trains ``epochs`` epochs
    under the rate's ``schedule`` (:data:`tinytune.quant.schedule.LR_SCHEDULES`; ``constant``
    unless given: an exported bundle's comes from its :class:`~tinytune.bundle.BundleRequest`),
    with the simulator's ``expected`` counts of evaluation samples right before training and
    after each epoch, when they were computed
    (:func:`~tinytune.bundle.expected.simulate_example`)."""
    if len(train) < 1 or len(evaluation) < 1:
        raise BundleError(
            f"the example needs at least one training and one evaluation sample, got "
            f"{len(train)} and {len(evaluation)}"
        )
    if train.images.shape[1:] != evaluation.images.shape[1:]:
        raise BundleError("training and evaluation images differ in shape")
    if epochs < 1:
        raise BundleError(f"the example trains at least one epoch, got {epochs}")
    check_schedule(schedule)
    if expected is not None and (
        len(expected) != epochs + 1 or not all(0 <= c <= len(evaluation) for c in expected)
    ):
        raise BundleError(
            f"the example needs {epochs + 1} expected counts in [0, {len(evaluation)}], got "
            f"{list(expected)[:8]}"
        )
    counts = ""
    if expected is not None:
        values = c_values(np.array(expected, dtype=np.uint16))
        counts = f"const uint16_t tt_expected_correct[TT_EPOCHS + 1] = {{\n{values}\n}};\n"
    fields = {
        "description": description.replace("*/", "* /"),
        "n_train": len(train),
        "n_eval": len(evaluation),
        "epochs": epochs,
        "halving": int(schedule == "halving"),
        "train_images": _images(train.images),
        "train_labels": c_values(train.labels.astype(np.uint16)),
        "eval_images": _images(evaluation.images),
        "eval_labels": c_values(evaluation.labels.astype(np.uint16)),
        "known": int(expected is not None),
        "clips": int(_recorded_kind(train, evaluation) == "clips"),
        "values": int(_recorded_kind(train, evaluation) == "values"),
        "clip_arrays": _recorded_arrays(train, evaluation),
        "expected": counts,
    }
    return {"tt_data.h": _HEADER.substitute(fields), "tt_data.c": _SOURCE.substitute(fields)}
