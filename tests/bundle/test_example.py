"""The example says what it is: a smoke test whose counts tinytune's integer simulator computed
at export, in the example's own order of samples; it fails (exit status 2) when a count or the
restore differs, and says so when the steps were too many to simulate."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.bundle.support import RUN_ENV, check_restore, make, needs, parse_dump, write_test_bundle
from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.bundle import expected as expected_module
from tinytune.bundle.expected import example_order, simulate_example
from tinytune.quant import QuantizedNet, quantize

LR = 0.01


@pytest.fixture(scope="module")
def net() -> QuantizedNet:
    return quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])


@needs("host")
def test_the_example_trains_in_the_order_and_to_the_counts_computed_at_export(
    net: QuantizedNet, tmp_path: Path
) -> None:
    train_x, eval_x = images(5, seed=21).clamp(-1, 1), images(4, seed=22).clamp(-1, 1)
    folder = tmp_path / "b"
    program, train, evaluation = write_test_bundle(
        folder, net, train_x, eval_x, lr=LR, epochs=3, schedule="halving"
    )
    dump = parse_dump(make(folder, "run-host", defs="-DTT_DUMP"))
    order = [sample for sample, *_ in dump.steps]
    assert order == [k for epoch in example_order(5, 3) for k in epoch]
    run = simulate_example(net, program.lr, train, evaluation, 3, "halving")
    assert run is not None and run.total == 4
    assert [correct for correct, _ in dump.epochs] == list(run.correct)
    data = (folder / "tt_data.c").read_text()
    counts = ", ".join(str(c) for c in run.correct)
    assert f"tt_expected_correct[TT_EPOCHS + 1] = {{\n    {counts},\n}};" in data
    plain = make(folder, "run-host")
    assert plain.splitlines()[1] == (
        "smoke test: 5 training samples, 3 epochs, accuracy on 4 evaluation samples (not the "
        "search's accuracy)"
    )
    check_restore(plain, 24 + sum(len(data) for _, data in dump.params.values()))
    assert plain.splitlines()[-1] == (
        "smoke test passed: every accuracy is the simulator's, the restore exact"
    )


@needs("host")
def test_a_count_other_than_the_simulators_fails_the_example(
    net: QuantizedNet, tmp_path: Path
) -> None:
    x = images(3, seed=5).clamp(-1, 1)
    folder = tmp_path / "b"
    write_test_bundle(folder, net, x, x, lr=LR, epochs=2)
    data = folder / "tt_data.c"
    text = data.read_text()
    block = re.search(r"tt_expected_correct\[TT_EPOCHS \+ 1\] = \{\n    ([\d, ]+),\n\}", text)
    assert block is not None
    counts = [int(v) for v in block[1].split(", ")]
    counts[-1] = (counts[-1] + 1) % 4  # not what the step reaches
    data.write_text(text.replace(block[1], ", ".join(map(str, counts))))
    make(folder, "host")
    done = subprocess.run(
        [str(folder / "build" / "host" / "train")], capture_output=True, text=True, env=RUN_ENV
    )
    assert done.returncode == 2
    assert done.stdout.splitlines()[-1] == (
        "smoke test FAILED: an accuracy is not the simulator's"
    )


@needs("host")
def test_too_many_steps_to_simulate_leave_the_counts_out(
    net: QuantizedNet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(expected_module, "MAX_SIMULATED_STEPS", 5)
    x = images(3, seed=5).clamp(-1, 1)
    folder = tmp_path / "b"
    write_test_bundle(folder, net, x, x, lr=LR, epochs=2)  # 6 steps
    assert "#define TT_EXPECTED_KNOWN 0" in (folder / "tt_data.h").read_text()
    assert "tt_expected_correct" not in (folder / "tt_data.c").read_text()
    plain = make(folder, "run-host")
    assert "(simulator: " not in plain
    assert plain.splitlines()[-1] == (
        "smoke test passed: the restore exact (no simulator counts for so many steps)"
    )
