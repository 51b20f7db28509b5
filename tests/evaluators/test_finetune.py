"""The fine-tune that measures a candidate: a frozen prefix computed once trains to what the
whole network at every step trains to."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

from tinytune.data import Split, Splits
from tinytune.errors import OptionError
from tinytune.evaluators import FinetuneTask
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import LiteResidualConfig, UpdateScheme, default_subnet, get_supernet
from tinytune.spaces.candidate import Candidate

SPEC = get_supernet("ofa-proxyless-w0.35")


def _splits(resolution: int, seed: int = 0) -> Splits:
    rng = np.random.default_rng(seed)

    def split(n: int) -> Split:
        x = rng.uniform(-1, 1, (n, 3, resolution, resolution)).astype(np.float32)
        return Split(x, (np.arange(n) % 4).astype(np.int64))

    return Splits(split(40), split(12), split(12))


def _net(bias_last_k: int, weights: tuple[tuple[int, float], ...] = ()) -> torch.nn.Module:
    supernet = build_ofa_supernet(SPEC, 40, seed=0)
    subnet = default_subnet(SPEC)
    candidate = Candidate(
        SPEC.name, subnet, LiteResidualConfig(), UpdateScheme(bias_last_k, weights)
    )
    return build_candidate(candidate, supernet, 4, calibration=[], seed=0)


def test_the_frozen_prefix_ends_before_the_first_trained_module() -> None:
    net = _net(0)
    assert net.frozen_prefix() == len(net.stages())  # the classifier alone trains: all pooled
    net = _net(len(net.convs()))
    assert net.frozen_prefix() == 0  # the stem's bias trains
    net = _net(4)  # the last four convolutions: the head and the last block's three
    # stages: the stem, one a block, the head (with the pool): the stem and all blocks but one
    assert net.frozen_prefix() == len(net.stages()) - 2
    x = torch.randn(2, 3, net.resolution, net.resolution)
    for n in range(1 + len(net.stages())):
        torch.testing.assert_close(net.forward_from(net.prefix(x, n), n), net(x))


@pytest.mark.parametrize("bias_last_k", [0, 7])
def test_a_prefix_computed_once_trains_to_the_same_network(
    bias_last_k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    splits = _splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(epochs=3, batch_size=8, lr=0.5)
    cached = _net(bias_last_k, ((len(_net(0).convs()) - 2, 0.5),) if bias_last_k else ())
    assert cached.frozen_prefix() > 0
    result = finetune(cached, splits, config)
    module = importlib.import_module("tinytune.evaluators.finetune")
    monkeypatch.setattr(module, "PREFIX_CACHE_BYTES", 0)  # every step from the image
    whole = _net(bias_last_k, ((len(_net(0).convs()) - 2, 0.5),) if bias_last_k else ())
    again = finetune(whole, splits, config)
    assert result.steps == again.steps == 15
    assert (result.accuracy, result.val_accuracy) == (again.accuracy, again.val_accuracy)
    assert result.train_loss == pytest.approx(again.train_loss, rel=1e-5)
    trained = [(n, p) for n, p in cached.named_parameters() if p.requires_grad]
    assert trained
    for name, p in trained:
        torch.testing.assert_close(p, dict(whole.named_parameters())[name], rtol=1e-5, atol=1e-6)


def test_the_data_moves_to_the_device_once_not_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves of tensors to the fine-tune's device (``Tensor.to`` with the very device object it
    was given) are as many with five batches an epoch as with one: the splits go over once, as
    whole tensors, and the data order once an epoch."""
    splits = _splits(default_subnet(SPEC).resolution)
    device = torch.device("cpu")
    moves: list[int] = []
    to = torch.Tensor.to

    def counted(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        moves[-1] += bool(args) and args[0] is device
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counted)
    for batch_size in (40, 8):  # 1 and 5 batches of the 40 training images
        moves.append(0)
        finetune(_net(7), splits, FinetuneConfig(epochs=2, batch_size=batch_size), device)
    # an image that sizes the frozen prefix's output, the three splits (each under 256
    # images: one chunk through the prefix), the training labels, the data order twice
    assert moves[0] == moves[1] == 1 + 3 + 1 + 2


def test_the_device_argument_cpu_trains_as_the_default() -> None:
    splits = _splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(epochs=2, batch_size=8, lr=0.5)
    default, named = _net(7), _net(7)
    a = finetune(default, splits, config)
    b = finetune(named, splits, config, torch.device("cpu"))
    assert (a.accuracy, a.val_accuracy, a.train_loss, a.steps) == (
        b.accuracy,
        b.val_accuracy,
        b.train_loss,
        b.steps,
    )
    theirs = named.state_dict()
    for name, x in default.state_dict().items():
        assert torch.equal(x, theirs[name]), name


def test_a_task_fine_tunes_on_a_gpu_only_when_given_one_and_one_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tinytune.evaluators.task import task_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert [task_device(g) for g in (0.0, 0.25, 1.0)] == ["cpu", "cpu", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [task_device(g) for g in (0.0, 0.25, 2.0)] == ["cpu", "cuda", "cuda"]


# --- an image folder's 8-bit storage on the device ---------------------------------------------


def _pixel_splits(resolution: int, seed: int = 0) -> tuple[Splits, Splits]:
    """The same 64 images as Pixels over one uint8 storage and as float32 arrays."""
    from tinytune.data import Pixels

    rng = np.random.default_rng(seed)
    storage = rng.integers(0, 256, (64, resolution, resolution, 3), dtype=np.uint8)
    floats = storage.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0
    parts = (np.arange(0, 40), rng.permutation(np.arange(40, 52)), np.arange(52, 64))
    y = (np.arange(64) % 4).astype(np.int64)
    pixels = Splits(*(Split(Pixels(storage, i, "key"), y[i]) for i in parts))
    arrays = Splits(*(Split(np.ascontiguousarray(floats[i]), y[i]) for i in parts))
    return pixels, arrays


def test_the_device_conversion_gives_the_bits_of_numpys() -> None:
    from tinytune.evaluators.prefixes import to_float

    every = np.arange(256, dtype=np.uint8)
    images = np.stack(
        [every.reshape(16, 16), every.reshape(16, 16).T, every[::-1].reshape(16, 16)]
    )
    images = images.transpose(1, 2, 0)[None]  # (1, 16, 16, 3): every byte in every channel
    expected = images.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        got = to_float(torch.from_numpy(images.copy()).to(device)).cpu()
        assert got.is_contiguous() and got.dtype == torch.float32
        assert got.numpy().tobytes() == expected.tobytes(), device


@pytest.mark.parametrize(("bias_last_k", "prefix"), [(0, True), (7, True), (7, False)])
def test_pixels_fine_tune_exactly_as_their_float_arrays(
    bias_last_k: int, prefix: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not prefix:
        module = importlib.import_module("tinytune.evaluators.finetune")
        monkeypatch.setattr(module, "PREFIX_CACHE_BYTES", 0)  # every step from the image
    pixels, arrays = _pixel_splits(default_subnet(SPEC).resolution)
    config = FinetuneConfig(epochs=2, batch_size=8, lr=0.5)
    a_net, b_net = _net(bias_last_k), _net(bias_last_k)
    a = finetune(a_net, arrays, config)
    b = finetune(b_net, pixels, config)
    assert (a.accuracy, a.val_accuracy, a.train_loss, a.steps) == (
        b.accuracy,
        b.val_accuracy,
        b.train_loss,
        b.steps,
    )
    theirs = b_net.state_dict()
    for name, x in a_net.state_dict().items():
        assert torch.equal(x, theirs[name]), name


def test_a_storage_goes_to_a_device_once_per_process() -> None:
    """On the CPU the kept storage is a view of the array (no copy); on another device one copy
    per storage key, the least recently used dropped beyond the budget."""
    from tinytune.data import Pixels
    from tinytune.evaluators.finetune import DeviceData

    pixels, _ = _pixel_splits(8)
    data = DeviceData()
    first = data.storage(pixels.train.x, "cpu")
    assert first.data_ptr() == pixels.train.x.storage.ctypes.data  # a view
    assert data.storage(pixels.val.x, torch.device("cpu")) is first  # one storage, one entry
    assert data.moves == 0 and len(data) == 1

    storage = pixels.train.x.storage
    one, two = Pixels(storage, key="one"), Pixels(storage, key="two")
    small = DeviceData(max_bytes=storage.nbytes)  # room for one storage on the device
    on_meta = small.storage(one, "meta")
    assert on_meta.device.type == "meta" and small.storage(one, "meta") is on_meta
    assert small.moves == 1
    small.storage(two, "meta")  # over the budget: the older one goes
    assert small.moves == 2 and len(small) == 1
    small.storage(one, "meta")
    assert small.moves == 3
    huge = Pixels(np.zeros((2, 64, 64, 3), np.uint8), key="huge")
    assert DeviceData(max_bytes=1).storage(huge, "meta").shape == (2, 64, 64, 3)  # in use: kept


def test_a_worker_keeps_its_data_set_and_device_copy_between_fine_tunes(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.data.test_data import write_image_folder
    from tinytune.evaluators import task as task_module
    from tinytune.evaluators.finetune import DeviceData
    from tinytune.spaces import make_preset

    monkeypatch.setattr(task_module, "_datasets", {})
    monkeypatch.setattr(task_module, "_splits", {})
    monkeypatch.setattr(task_module, "_on_device", DeviceData())
    hashed: list[str] = []
    real = task_module.get_dataset
    monkeypatch.setattr(
        task_module, "get_dataset", lambda spec, seed: hashed.append(spec) or real(spec, seed=seed)
    )
    root = write_image_folder(tmp_path / "images", images_per_class=6)
    task = FinetuneTask(
        candidate=make_preset("bias-only", SPEC).to_json(),
        checkpoint=str(tiny_checkpoint),
        dataset=f"imagefolder:{root}",
        data_seed=0,
        finetune=FinetuneConfig(epochs=1, batch_size=4, lr=0.1),
    )
    first = task_module.run_evaluation(task)
    kept = dict(task_module._on_device._kept)
    second = task_module.run_evaluation(task.replace(repeats=2))
    assert first.status == second.status == "ok", (first, second)
    assert hashed == [f"imagefolder:{root}"]  # listed and hashed once
    assert len(kept) == 1 and dict(task_module._on_device._kept).keys() == kept.keys()
    ((tensor, _),) = task_module._on_device._kept.values()
    assert tensor is next(iter(kept.values()))[0]  # the same storage, not moved again
    splits, _ = next(iter(task_module._splits.values()))
    assert tensor.data_ptr() == splits.train.x.storage.ctypes.data  # the memory-mapped file


def test_weight_decay_decays_the_trained_weights_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SGD's L2 decay goes to the trained convolution weights and the classifier's weight,
    not to biases or scales; 0 (the default) trains as before."""
    groups: list[list[dict]] = []
    real = torch.optim.SGD

    def recording(params: list[dict], **kwargs: object) -> torch.optim.Optimizer:
        groups.append(params)
        return real(params, **kwargs)

    monkeypatch.setattr(torch.optim, "SGD", recording)
    splits = _splits(default_subnet(SPEC).resolution)
    weights = ((len(_net(0).convs()) - 2, 0.5),)
    plain = finetune(_net(7, weights), splits, FinetuneConfig(epochs=2, batch_size=8, lr=0.5))
    net = _net(7, weights)
    decayed = finetune(
        net, splits, FinetuneConfig(epochs=2, batch_size=8, lr=0.5, weight_decay=0.05)
    )
    trained = {id(p): (n, p) for n, p in net.named_parameters() if p.requires_grad}
    seen = set()
    for group in groups[-1]:
        for p in group["params"]:
            name, _ = trained[id(p)]
            seen.add(id(p))
            assert group.get("weight_decay", 0.0) == (0.05 if p.ndim >= 2 else 0.0), name
    assert seen == set(trained)  # every trained parameter, once
    assert any(p.ndim >= 2 for _, p in trained.values())
    assert plain.train_loss != decayed.train_loss  # the decay changed the training
    # checked where it enters a search, by its option's rule
    from tinytune.search import SearchConfig

    with pytest.raises(OptionError, match=r"weight_decay must lie in \[0, 0.1\], got 0.5"):
        SearchConfig(checkpoint="", finetune=FinetuneConfig(weight_decay=0.5))
