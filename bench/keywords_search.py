"""A keyword network pre-trained on some words, searched on new words by new voices.

The workflow of on-device keyword learning: a depthwise-separable CNN (DS-CNN) is trained once on
a large folder (8 keywords, 60 synthesised speakers, ``bench.keywords``) as ``tinytune pretrain
--network ds-cnn`` trains it, and the device then learns other words (6, by 20 speakers it
never heard) from a few clips each. ``tinytune.optimize`` searches how to fine-tune it for that,
within 256 KB; every figure is chosen on validation and reported on test, the test speakers
held apart (:mod:`bench.transfer`).

    python3 -m bench.keywords_search --out /tmp/kws --seeds 0 1 2

Prints, per seed, the pre-training's own accuracy, the search's most accurate point within the
SRAM budget and full fine-tuning of the whole network (the study's reference), each with its
training memory.
"""

from __future__ import annotations

from bench.keywords import make
from bench.transfer import Transfer

PRETRAIN = {"speakers": 60, "takes": 2, "keywords": 8, "first": 0}
TARGET = {"speakers": 20, "takes": 2, "keywords": 6, "first": 8}
KEYWORDS = Transfer(make, PRETRAIN, TARGET, "audio", "ds-cnn", (1, 49, 40), "kws", "8 words")


def main() -> None:
    KEYWORDS.main(__doc__)


if __name__ == "__main__":
    main()
