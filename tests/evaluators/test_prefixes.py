"""Frozen prefixes' outputs kept on disk: a fine-tune that reads them trains bit for bit as one
that computes them; they are found again only for the same stages, weights and images; the
folder stays within its bound; a cache that cannot be written costs nothing but the reuse."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tinytune.data import Pixels, Split, Splits, repeated
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.evaluators.prefixes import PrefixStore, prefix_key
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import LiteResidualConfig, UpdateScheme, default_subnet, get_supernet
from tinytune.spaces.candidate import Candidate

SPEC = get_supernet("ofa-proxyless-w0.35")
CONFIG = FinetuneConfig(epochs=2, batch_size=8, lr=0.5)


def _net(bias_last_k: int, seed: int = 0) -> torch.nn.Module:
    supernet = build_ofa_supernet(SPEC, 40, seed=seed)
    candidate = Candidate(
        SPEC.name, default_subnet(SPEC), LiteResidualConfig(), UpdateScheme(bias_last_k, ())
    )
    return build_candidate(candidate, supernet, 4, calibration=[], seed=0)


def _splits(key: str = "folder/64", images: int = 300, seed: int = 0) -> Splits:
    """Three splits over one storage of ``images`` 8-bit images, as an image folder's are
    (more than one batch of the prefix)."""
    r = default_subnet(SPEC).resolution
    rng = np.random.default_rng(seed)
    storage = rng.integers(0, 256, (images, r, r, 3), dtype=np.uint8)
    order = rng.permutation(images)
    parts = (order[: images // 2], order[images // 2 : 3 * images // 4], order[3 * images // 4 :])
    y = (np.arange(images) % 4).astype(np.int64)
    return Splits(*(Split(Pixels(storage, np.sort(i), key), y[np.sort(i)]) for i in parts))


def _same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    theirs = b.state_dict()
    for name, x in a.state_dict().items():
        assert torch.equal(x, theirs[name]), name


@pytest.mark.parametrize("bias_last_k", [0, 4])
def test_a_kept_prefix_trains_bit_for_bit_as_one_computed(
    bias_last_k: int, tmp_path: Path
) -> None:
    splits = _splits()
    store = PrefixStore(tmp_path)
    first_net, again_net, alone_net = _net(bias_last_k), _net(bias_last_k), _net(bias_last_k)
    assert first_net.frozen_prefix() > 0
    first = finetune(first_net, splits, CONFIG, prefixes=store)
    assert (store.computed, store.reused) == (1, 0)
    assert len(store.files()) == 1
    again = finetune(again_net, splits, CONFIG, prefixes=store)
    assert (store.computed, store.reused) == (1, 1)  # read from the file
    alone = finetune(alone_net, splits, CONFIG)  # no store: computed for this fine-tune
    for other in (again, alone):
        assert (first.accuracy, first.val_accuracy, first.train_loss, first.steps) == (
            other.accuracy,
            other.val_accuracy,
            other.train_loss,
            other.steps,
        )
    _same(first_net, again_net)
    _same(first_net, alone_net)
    other = repeated(splits, 1, 0)  # another train/validation partition of the same images
    assert not np.array_equal(other.train.x.index, splits.train.x.index)
    finetune(_net(bias_last_k), other, CONFIG, prefixes=store)
    assert (store.computed, store.reused) == (1, 2)


def test_a_kept_prefix_is_each_images_output(tmp_path: Path) -> None:
    splits = _splits()
    net = _net(4).eval()
    n = net.frozen_prefix()
    stages = net.stages()[:n]
    outputs = PrefixStore(tmp_path).outputs(stages, splits.train.x, "cpu", 0)
    assert isinstance(outputs, np.memmap)  # on disk, though no memory was allowed
    storage = splits.train.x.storage
    assert outputs.shape[0] == len(storage)
    x = torch.tensor(Pixels(storage)[np.arange(len(storage))])
    with torch.no_grad():
        expected = net.prefix(x, n)
    torch.testing.assert_close(torch.from_numpy(np.array(outputs)), expected)


def test_the_key_follows_the_stages_the_weights_and_the_images() -> None:
    splits = _splits()
    net = _net(4).eval()
    n = net.frozen_prefix()
    cpu = torch.device("cpu")
    key = prefix_key(net.stages()[:n], splits.train.x, cpu)
    assert key == prefix_key(_net(4).eval().stages()[:n], splits.train.x, cpu)
    assert key != prefix_key(net.stages()[: n - 1], splits.train.x, cpu)
    assert key != prefix_key(_net(4, seed=1).eval().stages()[:n], splits.train.x, cpu)
    other = _splits(key="folder/64", seed=1).train.x  # another folder under the same name
    assert key != prefix_key(net.stages()[:n], other, cpu)


def test_the_folder_keeps_the_most_recently_used_within_its_bound(tmp_path: Path) -> None:
    splits = _splits()
    net = _net(4).eval()
    stages = net.stages()
    one = PrefixStore(tmp_path).outputs(stages[:2], splits.train.x, "cpu", 0)
    assert one is not None
    size = one.nbytes
    store = PrefixStore(tmp_path, disk_bytes=size + 1)
    second = store.outputs(stages[:3], splits.train.x, "cpu", 0)
    assert second is not None
    files = store.files()
    assert len(files) == 1 and files[0][1] == second.nbytes  # the first went
    assert sum(s for _, s in files) <= size + 1 or len(files) == 1


def test_an_unwritable_cache_computes_in_memory(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        root = tmp_path / "a-file"
        root.write_text("not a folder")  # no folder can be made below a file, even by root
    else:
        root = tmp_path / "locked"
        root.mkdir(mode=0o500)
    splits = _splits()
    store = PrefixStore(root)
    net, alone_net = _net(4), _net(4)
    kept = finetune(net, splits, CONFIG, prefixes=store)
    assert (store.computed, store.reused) == (1, 0)
    alone = finetune(alone_net, splits, CONFIG)
    assert (kept.accuracy, kept.train_loss) == (alone.accuracy, alone.train_loss)
    _same(net, alone_net)


def test_a_prefix_too_large_for_the_file_and_memory_runs_the_whole_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module("tinytune.evaluators.finetune")
    monkeypatch.setattr(module, "PREFIX_CACHE_BYTES", 0)
    store = PrefixStore(tmp_path, file_bytes=0)
    splits = _splits()
    net, alone_net = _net(4), _net(4)
    whole = finetune(net, splits, CONFIG, prefixes=store)
    assert (store.computed, store.reused, store.files()) == (0, 0, [])
    monkeypatch.undo()
    alone = finetune(alone_net, splits, CONFIG)
    assert whole.steps == alone.steps
    assert whole.train_loss == pytest.approx(alone.train_loss, rel=1e-4)
