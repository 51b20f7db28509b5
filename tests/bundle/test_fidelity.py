"""The device fidelity of the search trains what the bundle trains: ``int8_finetune`` (the
``int8`` evaluations, ``--verify-int8``, the manifest's ``measured_int8``) against the compiled
C step (its example program) on the same images in the same order, parameter for parameter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from tests.bundle.support import (
    make,
    needs,
    parse_dump,
    replay,
    trained_state,
    write_test_bundle,
)
from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.data import Split, Splits
from tinytune.evaluators.device import int8_accuracy, int8_finetune
from tinytune.quant import quantize
from tinytune.quant.schedule import MAX_LR_HALVINGS, epoch_lr

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


@needs("host")
def test_a_rate_halved_after_every_epoch_trains_as_the_reference_at_the_halved_rates(
    tmp_path: Path,
) -> None:
    """The example halves its rate with tt_set_lr_halvings (the shifts of the constant update
    multipliers, the float32 classifier's rate times 2^-k); the reference trains each epoch at
    lr * 2^-e; every parameter ends equal, bit for bit."""
    q = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    halved = q.clone()
    train_x, eval_x = images(4, seed=21).clamp(-1, 1), images(3, seed=22).clamp(-1, 1)
    constant_dir, halving_dir = tmp_path / "constant", tmp_path / "halving"
    _, train, evaluation = write_test_bundle(constant_dir, q, train_x, eval_x, lr=LR, epochs=3)
    write_test_bundle(halving_dir, q, train_x, eval_x, lr=LR, epochs=3, schedule="halving")
    constant = parse_dump(make(constant_dir, "run-host", defs="-DTT_DUMP"))
    dump = parse_dump(make(halving_dir, "run-host", defs="-DTT_DUMP"))
    order = [sample for sample, *_ in dump.steps]
    assert order == [sample for sample, *_ in constant.steps] and len(order) == 12

    held_out = Split(eval_x.numpy(), evaluation.labels.astype(np.int64))
    labels = train.labels.astype(np.int64)
    for epoch in range(3):
        part = order[4 * epoch : 4 * epoch + 4]
        stream = Split(train_x.numpy()[part], labels[part])
        int8_finetune(
            halved,
            Splits(stream, held_out, held_out),
            epochs=1,
            lr=epoch_lr(LR, epoch, "halving"),
            seed=None,
        )
    names = list(dump.params)
    assert names and trained_state(halved, names) == {n: dump.params[n][1] for n in names}
    # the halvings changed the training: not the constant rate's parameters
    assert {n: dump.params[n][1] for n in names} != {n: constant.params[n][1] for n in names}
    correct, total = dump.epochs[-1]
    assert int8_accuracy(halved, held_out) == correct / total


def test_int8_finetune_halving_trains_epoch_e_at_the_rate_halved_e_times() -> None:
    q = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    stepwise = q.clone()
    x = images(4, seed=21).clamp(-1, 1).numpy()
    stream = Split(x, np.arange(4) % 2)
    splits = Splits(stream, stream, stream)
    int8_finetune(q, splits, epochs=3, lr=LR, seed=None, schedule="halving")
    for epoch, rate in enumerate((LR, LR / 2, LR / 4)):
        assert epoch_lr(LR, epoch, "halving") == rate
        int8_finetune(stepwise, splits, epochs=1, lr=rate, seed=None)
    got, want = q.trained_state(), stepwise.trained_state()
    assert got.keys() == want.keys()
    for name, value in got.items():
        assert np.array_equal(np.asarray(value), np.asarray(want[name])), name
    assert not all(  # and not what a constant rate gives
        np.array_equal(np.asarray(v), np.asarray(w))
        for v, w in zip(got.values(), _constant(LR).values(), strict=True)
    )


def _constant(lr: float) -> dict[str, object]:
    q = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    x = images(4, seed=21).clamp(-1, 1).numpy()
    stream = Split(x, np.arange(4) % 2)
    int8_finetune(q, Splits(stream, stream, stream), epochs=3, lr=lr, seed=None)
    return dict(q.trained_state())


@needs("host")
def test_the_rate_stops_halving_at_its_limit_and_refuses_other_halvings(tmp_path: Path) -> None:
    """33 epochs: the example's halvings stop at TT_LR_MAX_HALVINGS (30), as the reference's
    epoch_lr does, and the replay at the halved rates matches every step; tt_set_lr_halvings
    refuses a count outside [0, 30] and keeps the rate."""
    q = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    train_x, eval_x = images(2, seed=21).clamp(-1, 1), images(2, seed=22).clamp(-1, 1)
    folder = tmp_path / "bundle"
    _, train, evaluation = write_test_bundle(
        folder, q, train_x, eval_x, lr=LR, epochs=33, schedule="halving"
    )
    assert f"#define TT_LR_MAX_HALVINGS {MAX_LR_HALVINGS}" in (folder / "tt_model.h").read_text()
    dump = parse_dump(make(folder, "run-host", defs="-DTT_DUMP"))
    assert replay(q, LR, train, evaluation, dump, "halving") == 66
    assert epoch_lr(LR, 32, "halving") == epoch_lr(LR, MAX_LR_HALVINGS, "halving") == LR / 2**30

    harness = folder / "harness.c"
    harness.write_text(
        '#include <stdio.h>\n#include "tt_model.h"\n'
        "int main(void) {\n    tt_model_init();\n"
        '    printf("%d %d %d %d\\n", tt_set_lr_halvings(-1), tt_set_lr_halvings(31),\n'
        "           tt_set_lr_halvings(0), tt_set_lr_halvings(TT_LR_MAX_HALVINGS));\n"
        "    return 0;\n}\n"
    )
    binary = folder / "harness"
    kernels = sorted(str(p) for p in (folder / "kernels").glob("*.c"))
    cc = ["gcc", "-std=c99", "-Wall", "-Werror", f"-I{folder}", f"-I{folder / 'kernels'}"]
    subprocess.run(
        [*cc, str(harness), str(folder / "tt_model.c"), *kernels, "-o", str(binary), "-lm"],
        check=True,
    )
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "-1 -1 0 0\n"
