"""A vibration network pre-trained on some conditions, searched on new conditions of new machines.

The workflow of on-device condition monitoring: a 1-D CNN over three-axis accelerometer windows
is trained once on a fleet's recordings (8 conditions, 40 synthesised machines,
``bench.vibration``) as ``tinytune pretrain --network cnn-1d`` trains it, and a device on
another machine then learns other conditions (6, on 15 machines it never saw) from a few
windows each.
``tinytune.optimize`` searches how to fine-tune it for that, within 256 KB; every figure is
chosen on validation and reported on test, the test machines held apart (:mod:`bench.transfer`).

    python3 -m bench.vibration_search --out /tmp/vibration --seeds 0 1 2

Prints, per seed, the pre-training's own accuracy, the search's most accurate point within the
SRAM budget and full fine-tuning of the whole network (the study's reference), each with its
training memory.
"""

from __future__ import annotations

from bench.transfer import Transfer
from bench.vibration import STEPS, make

PRETRAIN = {"machines": 40, "takes": 3, "conditions": 8, "first": 0}
TARGET = {"machines": 15, "takes": 4, "conditions": 6, "first": 8}
VIBRATION = Transfer(
    make, PRETRAIN, TARGET, "series", "cnn-1d", (3, 1, STEPS), "vibration", "8 conditions"
)


def main() -> None:
    VIBRATION.main(__doc__)


if __name__ == "__main__":
    main()
