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
from tinytune.bundle.render import c_values
from tinytune.quant.schedule import check_schedule

__all__ = ["Samples", "render_samples"]


@dataclass(frozen=True, eq=False)
class Samples:
    """Images (N, C, H, W) as int8 values and their labels (N,), from one split; for an audio
    model, also the clips (N, samples) as ``int16`` that the images are the features of."""

    images: np.ndarray
    labels: np.ndarray
    split: str
    clips: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.images.dtype != np.int8 or self.images.ndim != 4:
            raise BundleError(f"samples must be int8 (N, C, H, W), got {self.images.dtype}")
        if self.labels.shape != (self.images.shape[0],):
            raise BundleError(
                f"{self.images.shape[0]} images need as many labels, got {self.labels.shape}"
            )
        if self.labels.size and not 0 <= int(self.labels.min()) <= int(self.labels.max()) < 2**16:
            raise BundleError("labels must lie in [0, 65535]")
        if self.clips is not None and (
            self.clips.dtype != np.int16 or self.clips.shape[:1] != self.labels.shape
        ):
            raise BundleError(
                f"{len(self)} samples need as many int16 clips, got {self.clips.dtype} "
                f"{self.clips.shape}"
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
 * TT_SAMPLE_RATE), of which tt_input_from_pcm16() makes the images; the example trains and
 * evaluates on what it makes, and first checks that it is the search's features, byte for byte. */
#define TT_DATA_CLIPS $clips
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


def _clip_arrays(train: Samples, evaluation: Samples) -> str:
    if train.clips is None or evaluation.clips is None:
        return ""
    return "".join(
        f"const int16_t tt_{name}_clips[{count}][TT_CLIP_SAMPLES] = {{\n{_images(clips)}\n}};\n"
        for name, count, clips in (
            ("train", "TT_TRAIN_SAMPLES", train.clips),
            ("eval", "TT_EVAL_SAMPLES", evaluation.clips),
        )
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
        "clips": int(train.clips is not None and evaluation.clips is not None),
        "clip_arrays": _clip_arrays(train, evaluation),
        "expected": counts,
    }
    return {"tt_data.h": _HEADER.substitute(fields), "tt_data.c": _SOURCE.substitute(fields)}
