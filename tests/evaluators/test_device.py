"""Device accuracy: the int8 training of a whole split at batch 1, and the QAS ablation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.data import Split, Splits
from tinytune.errors import ConfigError
from tinytune.evaluators import FinetuneConfig, FinetuneTask, Int8Settings
from tinytune.evaluators.device import TrainingProgress, int8_accuracy, int8_finetune
from tinytune.quant import QConv, forward, quantize, train_step
from tinytune.quant.quantizer import qas_multipliers
from tinytune.quant.schedule import WEIGHT_LR_SCALE


def _splits(n: int = 24) -> Splits:
    x = images(3 * n, seed=5).clamp(-1, 1).numpy().astype(np.float32)
    y = (np.arange(3 * n) % 5).astype(np.int64)
    return Splits(
        Split(x[:n], y[:n]), Split(x[n : 2 * n], y[n : 2 * n]), Split(x[2 * n :], y[2 * n :])
    )


def _quantized(scheme: str = "bias+pw 1/4"):  # type: ignore[no-untyped-def]
    net = tiny_net(SCHEMES[scheme])
    return quantize(net, [images(16, seed=2)])


def test_without_qas_each_update_is_the_qas_one_times_the_squared_scale() -> None:
    q = _quantized()
    conv = next(layer for layer in q.layers if isinstance(layer, QConv) and layer.trained_channels)
    x_scale = 0.02
    with_qas = qas_multipliers(conv, x_scale, 0.05)
    without = qas_multipliers(conv, x_scale, 0.05, qas=False)

    def real(m: torch.Tensor, n: torch.Tensor, o: int) -> float:
        return int(m[o]) * 2.0 ** -int(n[o])

    for o, s_w in enumerate(conv.w_scale.tolist()):
        s_b = x_scale * s_w
        assert real(without.bias_mult, without.bias_shift, o) == pytest.approx(
            real(with_qas.bias_mult, with_qas.bias_shift, o) * s_b**2, rel=2**-29
        )
        assert real(without.weight_mult, without.weight_shift, o) == pytest.approx(
            real(with_qas.weight_mult, with_qas.weight_shift, o) * s_w**2, rel=2**-29
        )


def test_the_weights_step_at_the_searchs_fraction_of_the_rate() -> None:
    """The device's weights learn at ``WEIGHT_LR_SCALE`` times the rate of its biases, the
    fraction the search's fp32 fine-tunes use: QAS steps lr_w·s_x/s_w and lr/(s_x·s_w)."""
    q = _quantized()
    conv = next(layer for layer in q.layers if isinstance(layer, QConv) and layer.trained_channels)
    x_scale, lr = 0.02, 0.05
    upd = qas_multipliers(conv, x_scale, lr)
    assert FinetuneConfig().weight_lr_scale == WEIGHT_LR_SCALE == 0.3
    for o, s_w in enumerate(conv.w_scale.tolist()):
        weight = int(upd.weight_mult[o]) * 2.0 ** -int(upd.weight_shift[o])
        bias = int(upd.bias_mult[o]) * 2.0 ** -int(upd.bias_shift[o])
        assert weight == pytest.approx(lr * WEIGHT_LR_SCALE * x_scale / s_w, rel=2**-29)
        assert bias == pytest.approx(lr / (x_scale * s_w), rel=2**-29)


def test_the_batched_accuracy_is_that_of_one_image_at_a_time() -> None:
    q, split = _quantized(), _splits().val
    one_by_one = [
        int(np.argmax(forward(q, q.quantize_input(torch.tensor(split.x[i : i + 1]))).logits))
        for i in range(len(split))
    ]
    expected = float(np.mean(np.array(one_by_one) == split.y))
    assert int8_accuracy(q, split, batch_size=7) == expected


def test_int8_finetune_is_the_simulators_steps_in_a_seeded_order_at_a_constant_rate() -> None:
    splits = _splits()
    q = _quantized()
    by_hand = q.clone()
    result = int8_finetune(q, splits, epochs=2, lr=0.05, seed=3)
    rng = np.random.default_rng(3)
    n = len(splits.train)
    for _ in range(2):
        for i in rng.permutation(n):
            x = by_hand.quantize_input(torch.tensor(splits.train.x[i : i + 1]))
            train_step(by_hand, x, int(splits.train.y[i]), 0.05)
    assert result.steps == 2 * n
    for key, value in by_hand.trained_state().items():
        other = q.trained_state()[key]
        assert np.array_equal(np.asarray(value), np.asarray(other)), key
    assert result.val_accuracy == int8_accuracy(by_hand, splits.val)
    assert result.accuracy == int8_accuracy(by_hand, splits.test)


def test_qas_off_trains_the_integer_parameters_differently_and_touches_nothing_frozen() -> None:
    splits = _splits()
    before = _quantized()
    on, off = before.clone(), before.clone()
    int8_finetune(on, splits, epochs=1, lr=0.05, qas=True)
    int8_finetune(off, splits, epochs=1, lr=0.05, qas=False)
    start, s_on, s_off = before.trained_state(), on.trained_state(), off.trained_state()
    moved_on = moved_off = 0
    for layer in before.layers:
        if not isinstance(layer, QConv):
            continue
        key = f"{layer.op.name}.bias"
        if not layer.bias_trained:  # frozen: never written
            assert torch.equal(s_on[key], start[key]) and torch.equal(s_off[key], start[key])
            continue
        moved_on += int((s_on[key] != start[key]).sum())
        moved_off += int((s_off[key] != start[key]).sum())
    assert moved_on > 0 and moved_off < moved_on  # s² < 1: far smaller integer steps


def test_bad_int8_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="epochs >= 1 and a learning rate in"):
        int8_finetune(_quantized(), _splits(), epochs=0, lr=0.05)


def test_int8_finetune_reports_every_image_and_epoch_and_trains_the_same() -> None:
    splits, base = _splits(), _quantized()
    quiet, heard = base.clone(), base.clone()
    reports: list[TrainingProgress] = []
    expected = int8_finetune(quiet, splits, epochs=2, lr=0.05, seed=3)
    result = int8_finetune(heard, splits, epochs=2, lr=0.05, seed=3, progress=reports.append)
    n = len(splits.train)
    assert [p.images_done for p in reports] == list(range(1, 2 * n + 1))
    assert [p.epochs_done for p in reports] == [k // n for k in range(1, 2 * n + 1)]
    assert {(p.epochs, p.images) for p in reports} == {(2, 2 * n)}
    assert (result.accuracy, result.val_accuracy, result.steps) == (
        expected.accuracy,
        expected.val_accuracy,
        expected.steps,
    )
    for key, value in quiet.trained_state().items():
        assert np.array_equal(np.asarray(value), np.asarray(heard.trained_state()[key])), key


def test_an_int8_task_reports_its_progress_over_every_rate_and_partition(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """The measurement that ``tinytune export`` draws as a bar: one count over every rate tried
    on every train/validation partition, rising image by image to the task's whole work."""
    from tests.data.test_data import write_image_folder
    from tinytune.data import get_dataset
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.spaces import get_supernet, make_preset

    root = write_image_folder(tmp_path / "images", images_per_class=6)
    candidate = make_preset("bias-only", get_supernet("ofa-proxyless-w0.35"))
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    task = FinetuneTask(
        candidate=candidate.to_json(),
        checkpoint=str(tiny_checkpoint),
        dataset=f"imagefolder:{root}",
        data_seed=0,
        finetune=FinetuneConfig(seed=0),
        int8=Int8Settings(1, (0.0125, 0.1), schedule="halving"),
        repeats=2,
    )
    reports: list[TrainingProgress] = []
    result = run_evaluation(task, progress=reports.append)
    assert result.status == "ok", result.error
    n = len(get_dataset(f"imagefolder:{root}").load(32).train)
    runs = 2 * 2  # rates x partitions, one epoch each
    assert [p.images_done for p in reports] == list(range(1, runs * n + 1))
    assert [p.epochs_done for p in reports] == [k // n for k in range(1, runs * n + 1)]
    assert {(p.epochs, p.images) for p in reports} == {(runs, runs * n)}
    assert reports[-1].epochs_done == result.train_epochs == runs
