"""The device fidelity of the search trains what the bundle trains: ``int8_finetune`` (the
``int8`` evaluations, ``--verify-int8``, the manifest's ``measured_int8``) against the compiled
C step (its example program) on the same images in the same order, parameter for parameter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.bundle.support import make, needs, parse_dump, trained_state, write_test_bundle
from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.data import Split, Splits
from tinytune.evaluators.device import int8_accuracy, int8_finetune
from tinytune.quant import quantize

LR = 0.01


@needs("host")
def test_int8_finetune_ends_with_the_parameters_and_accuracy_of_the_c_step(
    tmp_path: Path,
) -> None:
    q = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    train_x, eval_x = images(4, seed=21).clamp(-1, 1), images(3, seed=22).clamp(-1, 1)
    folder = tmp_path / "bundle"
    _, train, evaluation = write_test_bundle(folder, q, train_x, eval_x, lr=LR, epochs=3)
    dump = parse_dump(make(folder, "run-host", defs="-DTT_DUMP"))
    order = [sample for sample, *_ in dump.steps]  # the program's shuffled order, 3 epochs
    assert (
        len(order) == 12
        and sorted(order) == sorted([0, 1, 2, 3] * 3)
        and order[:4] != [0, 1, 2, 3]
    )

    # the same 12 steps: one pass, in the split's own order, over the images as C took them
    stream = Split(train_x.numpy()[order], train.labels.astype(np.int64)[order])
    held_out = Split(eval_x.numpy(), evaluation.labels.astype(np.int64))
    names = list(dump.params)
    before = trained_state(q, names)
    result = int8_finetune(q, Splits(stream, held_out, held_out), epochs=1, lr=LR, seed=None)

    assert result.steps == 12
    assert trained_state(q, names) != before  # the training moved the parameters
    assert names and trained_state(q, names) == {n: dump.params[n][1] for n in names}
    correct, total = dump.epochs[-1]
    assert result.accuracy == int8_accuracy(q, held_out) == correct / total
