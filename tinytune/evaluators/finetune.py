"""Measured accuracy: fine-tune a candidate's network on the target data and evaluate it on
held-out data.

The optimiser is what the device runs: plain SGD without momentum (MCUNetV3 trains with
"SGD + QAS without momentum"), with a cosine learning-rate decay. Convolution weights learn at
0.3 times the rate of biases, scales and the classifier (as the device's do,
:data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE`), and the gradient norm is clipped:
without BatchNorm to steady it, a folded network fine-tuned in full diverges at rates that suit
bias-only schemes. The data order is drawn from a seeded generator. Accuracy is top-1 on the
test split, which training never sees; the validation accuracy is reported beside it.

Each split goes to the device once, and is indexed there batch by batch. An image folder's
split (:class:`~tinytune.data.Pixels`) goes as its 8-bit storage, once per process and device
when the caller keeps a :class:`DeviceData` (the evaluation task does, for every fine-tune of a
worker; on the CPU it is a view of the memory-mapped file, not a copy), and each batch is
converted to float32 on the device by the lookup table :data:`~tinytune.data.splits.TO_FLOAT`:
the same bits as the float array the split stands for.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinytune.data import Images, Pixels, Split, Splits
from tinytune.errors import ConfigError
from tinytune.evaluators.prefixes import PrefixStore, to_float
from tinytune.models import GraphNet
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.units import check_real

__all__ = [
    "AUGMENTS",
    "AUGMENT_VIEWS",
    "DEVICE_DATA_BYTES",
    "DeviceData",
    "FinetuneConfig",
    "FinetuneResult",
    "accuracy",
    "augment_table",
    "finetune",
    "resized_crops",
]


AUGMENTS = ("none", "crop", "crop-flip")
"""How a fine-tune may augment its training images (:attr:`FinetuneConfig.augment`)."""

AUGMENT_VIEWS = 3
"""Augmented views of the training split besides the images themselves: epoch ``e`` trains on
view ``e mod (AUGMENT_VIEWS + 1)``, view 0 being the images as they are. A view is drawn once
per fine-tune (from its seed), so that a frozen prefix's outputs for it are computed once."""

CROP_AREA = (0.5, 1.0)
"""The share of an image's area a random resized crop keeps (uniform), its aspect kept."""


@dataclass(frozen=True)
class FinetuneConfig:
    """How a candidate is fine-tuned. ``weight_decay`` is SGD's L2 decay of the trained weights
    (convolutions' and the classifier's; biases and per-channel scales have none).
    ``augment`` trains on augmented views of the training images (:data:`AUGMENTS`, see
    :func:`augment_table`): ``none``, ``crop`` (random resized crops) or ``crop-flip`` (and
    horizontal flips, for classes a mirror image keeps)."""

    epochs: int = 8
    batch_size: int = 32
    lr: float = 0.2
    weight_lr_scale: float = WEIGHT_LR_SCALE
    clip_norm: float | None = 1.0
    seed: int = 0
    weight_decay: float = 0.0
    augment: str = "none"

    def __post_init__(self) -> None:
        # the fields that options of a search set (epochs, batch_size, lr, weight_decay, seed)
        # are checked where they enter, by their options' rules (tinytune.options)
        check_real(self.weight_lr_scale, "weight_lr_scale")
        if not 0.0 < self.weight_lr_scale <= 1.0:
            raise ConfigError(f"weight_lr_scale {self.weight_lr_scale} is out of range (0, 1]")
        if self.clip_norm is not None:
            check_real(self.clip_norm, "clip_norm")
        if self.augment not in AUGMENTS:
            raise ConfigError(f"augment '{self.augment}' is not one of {list(AUGMENTS)}")

    def to_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)


@dataclass(frozen=True)
class FinetuneResult:
    """Measured top-1 accuracies (fractions) and the cost of measuring them: in all
    (``wall_time_s``), and of that the seconds spent getting the frozen prefix's outputs for
    every split (``prefix_s``: computing them where ``prefix_computed``, else reading them, or
    waiting for the worker that computes them)."""

    accuracy: float
    val_accuracy: float
    train_loss: float
    wall_time_s: float
    steps: int
    prefix_s: float = 0.0
    prefix_computed: bool = False


@torch.no_grad()
def accuracy(net: nn.Module, split: Split, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``net`` on ``split``."""
    correct = 0
    for i in range(0, len(split), batch_size):
        x = torch.tensor(split.x[i : i + batch_size])
        y = torch.tensor(split.y[i : i + batch_size])
        correct += int((net(x).argmax(dim=1) == y).sum())
    return correct / max(1, len(split))


PREFIX_CACHE_BYTES = 2 << 30
"""The most memory the outputs of a frozen prefix may take for one fine-tune (all three
splits); a larger set is run through the whole network at every step instead."""

DEVICE_DATA_BYTES = 4 << 30
"""The most accelerator memory a :class:`DeviceData` keeps image storages in (the storage in
use always stays, whatever its size); on the CPU storages are views and take none."""


class DeviceData:
    """The 8-bit storages of :class:`~tinytune.data.Pixels` on devices, one copy per storage
    (its ``key``: the same decoded file) and device, kept for later fine-tunes of the process.

    On the CPU the storage is a view of the array (of the memory-mapped file: nothing is
    copied); on an accelerator a copy, the least recently used dropped beyond ``max_bytes``.

    Attributes:
        moves: copies made to a device (not counting the CPU's views).
    """

    def __init__(self, max_bytes: int = DEVICE_DATA_BYTES) -> None:
        self.max_bytes = max_bytes
        self.moves = 0
        # (key, device) -> (the storage on the device, the array it came from: kept alive, so
        # that an id() key is not reused)
        self._kept: OrderedDict[tuple[str, str], tuple[Tensor, np.ndarray]] = OrderedDict()

    def storage(self, pixels: Pixels, device: str | torch.device) -> Tensor:
        """``pixels.storage`` as a uint8 tensor on ``device``, moved there once."""
        where = torch.device(device)
        key = (pixels.key or f"array {id(pixels.storage)}", str(where))
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key][0]
        with warnings.catch_warnings():  # a read-only (memory-mapped) array; never written
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            tensor = torch.from_numpy(pixels.storage)
        if where.type != "cpu":
            tensor = tensor.to(where)
            self.moves += 1
        self._kept[key] = (tensor, pixels.storage)
        self._evict()
        return tensor

    def _evict(self) -> None:
        def held() -> int:
            return sum(t.nbytes for t, _ in self._kept.values() if t.device.type != "cpu")

        while len(self._kept) > 1 and held() > self.max_bytes:
            oldest = next(k for k, (t, _) in self._kept.items() if t.device.type != "cpu")
            if oldest == next(reversed(self._kept)):
                break  # the storage in use stays
            del self._kept[oldest]

    def __len__(self) -> int:
        return len(self._kept)


class _OnDevice:
    """A split's images on the fine-tune's device, read by rows or by batches of indices: a
    float32 tensor (a float array moved whole, or a frozen prefix's outputs), a
    :class:`~tinytune.data.Pixels`'s storage and rows, converted per read, or rows of the
    outputs of a frozen prefix for a whole storage (``outputs``: its rows ``index``)."""

    def __init__(
        self,
        x: Images | Tensor,
        device: str | torch.device,
        data: DeviceData | None = None,
        outputs: Tensor | None = None,
    ) -> None:
        self._floats: Tensor | None = None
        self._convert: Callable[[Tensor], Tensor] = to_float
        if isinstance(x, Tensor):
            self._floats = x
        elif isinstance(x, Pixels) and outputs is not None:
            self._storage, self._convert = outputs, _same
            self._index = torch.tensor(x.index).to(outputs.device)
        elif isinstance(x, Pixels):
            self._storage = (DeviceData() if data is None else data).storage(x, device)
            self._index = torch.tensor(x.index).to(device)
        else:
            self._floats = torch.tensor(x).to(device)

    def __len__(self) -> int:
        return len(self._floats if self._floats is not None else self._index)

    def rows(self, start: int, stop: int) -> Tensor:
        if self._floats is not None:
            return self._floats[start:stop]
        return self._convert(self._storage[self._index[start:stop]])

    def batch(self, idx: Tensor) -> Tensor:
        if self._floats is not None:
            return self._floats[idx]
        return self._convert(self._storage[self._index[idx]])


def _same(x: Tensor) -> Tensor:
    return x


@torch.no_grad()
def _prefix_outputs(net: GraphNet, x: _OnDevice, n: int, batch_size: int = 256) -> Tensor:
    return torch.cat(
        [net.prefix(x.rows(i, i + batch_size), n) for i in range(0, len(x), batch_size)]
    )


def _stored_prefix(
    net: GraphNet,
    parts: tuple[Split, Split, Split],
    n: int,
    device: str | torch.device,
    prefixes: PrefixStore,
) -> tuple[_OnDevice, _OnDevice, _OnDevice] | None:
    """The splits of an image folder (one storage of :class:`~tinytune.data.Pixels`) as rows
    of the outputs of the first ``n`` stages for every image of the storage, from
    ``prefixes`` (computed there when not kept yet); None when the splits are not of one
    storage, or the outputs fit neither the store nor memory."""
    xs = [p.x for p in parts]
    if not all(isinstance(x, Pixels) for x in xs):
        return None
    pixels = cast(list[Pixels], xs)
    if len({(_address(p.storage), p.storage.shape) for p in pixels}) != 1:
        return None  # not views of one storage
    outputs = prefixes.outputs(net.stages()[:n], pixels[0], device, PREFIX_CACHE_BYTES)
    if outputs is None:
        return None
    where = torch.device(device)
    if where.type == "cpu":
        with warnings.catch_warnings():  # a read-only memory map; never written
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            whole = torch.from_numpy(outputs)
        return cast(
            tuple[_OnDevice, _OnDevice, _OnDevice],
            tuple(_OnDevice(p, where, outputs=whole) for p in pixels),
        )
    rows = [torch.from_numpy(np.ascontiguousarray(outputs[p.index])).to(where) for p in pixels]
    return cast(tuple[_OnDevice, _OnDevice, _OnDevice], tuple(_OnDevice(r, where) for r in rows))


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _prefix_fits(net: GraphNet, splits: Splits, n: int, device: str | torch.device) -> bool:
    with torch.no_grad():
        one = net.prefix(torch.tensor(splits.train.x[:1]).to(device), n)
    images = len(splits.train) + len(splits.val) + len(splits.test)
    return one.numel() * one.element_size() * images <= PREFIX_CACHE_BYTES


@torch.no_grad()
def _accuracy(model: Callable[[Tensor], Tensor], x: _OnDevice, y: np.ndarray) -> float:
    correct = 0
    labels: Tensor | None = None
    for i in range(0, len(x), 256):
        batch = x.rows(i, i + 256)
        if labels is None:  # moved once, where the images are
            labels = torch.tensor(y).to(batch.device)
        correct += int((model(batch).argmax(dim=1) == labels[i : i + 256]).sum())
    return correct / max(1, len(x))


def finetune(
    net: nn.Module,
    splits: Splits,
    config: FinetuneConfig,
    device: str | torch.device = "cpu",
    data: DeviceData | None = None,
    prefixes: PrefixStore | None = None,
) -> FinetuneResult:
    """Train the parameters of ``net`` that require a gradient, then measure it.

    Where the update scheme leaves a prefix of a network frozen (the stem and the
    first blocks: no weight, bias, scale or lite residual trained), its output for each image
    is computed once and the rest of the network trains on it: the same arithmetic (frozen
    folded convolutions) without repeating it every epoch. With ``config.augment``, epochs
    cycle through :data:`AUGMENT_VIEWS` augmented views of the training images besides the
    images themselves, each view's prefix outputs computed once where they fit in memory.

    Args:
        net: the network, moved to ``device`` (and left there).
        splits: the data; each split goes to ``device`` once, as one tensor indexed per batch
            (an image folder's as its 8-bit storage, converted per batch).
        config: how to train.
        device: where to train (``"cpu"``, ``"cuda"``); the data order is drawn on the CPU
            either way, so only the arithmetic differs between devices.
        data: keeps image storages on devices across fine-tunes (one per worker process);
            None: the storage moves for this fine-tune only.
        prefixes: keeps the frozen prefix's outputs of an image folder on disk across
            fine-tunes and runs (:mod:`tinytune.evaluators.prefixes`); None: they are computed
            for this fine-tune only. The outputs are the same bits either way.
    """
    start = time.perf_counter()
    net.to(device)
    opt, params = _optimizer(net, config)
    data = DeviceData() if data is None else data
    began, computed = time.perf_counter(), prefixes.computed if prefixes is not None else 0
    train_x, val_x, test_x, model, cut = _features(net, splits, device, data, prefixes)
    prefix_s = time.perf_counter() - began
    fresh = prefixes is None or prefixes.computed > computed
    views = _views(net, cut, splits.train, train_x, config, device, data)
    losses, steps = _train(model, net, opt, params, views, splits, config, device)
    net.eval()
    val = _accuracy(model, val_x, splits.val.y)
    test = _accuracy(model, test_x, splits.test.y)
    per_epoch = math.ceil(len(splits.train) / config.batch_size)
    tail = [float(loss) for loss in losses[-per_epoch:]]
    return FinetuneResult(
        accuracy=test,
        val_accuracy=val,
        train_loss=float(np.mean(tail)) if tail else float("nan"),
        wall_time_s=time.perf_counter() - start,
        steps=steps,
        prefix_s=prefix_s,
        prefix_computed=cut > 0 and (fresh or not isinstance(splits.train.x, Pixels)),
    )


def _optimizer(net: nn.Module, config: FinetuneConfig) -> tuple[torch.optim.SGD, list[Tensor]]:
    """Plain SGD over the parameters that require a gradient (and those parameters): the
    classifier's weight decays, biases and scales do not; trained convolution weights take the
    rate times ``weight_lr_scale``."""
    params = [p for p in net.parameters() if p.requires_grad]
    weights = [
        p for n, p in net.named_parameters() if p.requires_grad and n.endswith("weight_train")
    ]
    weight_ids = {id(w) for w in weights}
    others = [p for p in params if id(p) not in weight_ids]
    decay = config.weight_decay
    groups = [
        {"params": [p for p in others if p.ndim < 2], "base_lr": config.lr},
        {
            "params": [p for p in others if p.ndim >= 2],
            "base_lr": config.lr,
            "weight_decay": decay,
        },
    ]
    if weights:
        groups.append(
            {
                "params": weights,
                "base_lr": config.lr * config.weight_lr_scale,
                "weight_decay": decay,
            }
        )
    groups = [g for g in groups if g["params"]]
    return torch.optim.SGD(groups, lr=config.lr, momentum=0.0, weight_decay=0.0), params


def _features(
    net: nn.Module,
    splits: Splits,
    device: str | torch.device,
    data: DeviceData,
    prefixes: PrefixStore | None,
) -> tuple[_OnDevice, _OnDevice, _OnDevice, Callable[[Tensor], Tensor], int]:
    """What the trained part reads of the train, validation and test splits, the model that
    reads it, and the stages it leaves out: the frozen prefix's outputs (stored, or computed
    now where they fit) and the network after it, else the samples and the whole network."""
    cut = net.frozen_prefix() if isinstance(net, GraphNet) else 0
    parts = (splits.train, splits.val, splits.test)
    stored = (
        _stored_prefix(net, parts, cut, device, prefixes or PrefixStore(file_bytes=0))
        if cut and isinstance(net, GraphNet)
        else None
    )
    if stored is not None:
        return (*stored, functools.partial(net.forward_from, n=cut), cut)
    if cut and not isinstance(splits.train.x, Pixels) and _prefix_fits(net, splits, cut, device):
        train_x, val_x, test_x = (
            _OnDevice(_prefix_outputs(net, _OnDevice(s.x, device, data), cut), device)
            for s in parts
        )
        return train_x, val_x, test_x, functools.partial(net.forward_from, n=cut), cut
    train_x, val_x, test_x = (_OnDevice(s.x, device, data) for s in parts)
    return train_x, val_x, test_x, net, 0


def _train(
    model: Callable[[Tensor], Tensor],
    net: nn.Module,
    opt: torch.optim.SGD,
    params: list[Tensor],
    views: list[_OnDevice] | list[_View],
    splits: Splits,
    config: FinetuneConfig,
    device: str | torch.device,
) -> tuple[list[Tensor], int]:
    """``config.epochs`` epochs of ``model`` in the seed's order, epoch ``e`` on ``views[e mod
    len(views)]``, the rate on a cosine from ``base_lr`` to 0 over the steps: each step's
    loss, and the steps."""
    rng = np.random.default_rng(config.seed)
    n = len(splits.train)
    total = math.ceil(n / config.batch_size) * config.epochs
    step = 0
    losses: list[Tensor] = []
    train_y = torch.tensor(splits.train.y).to(device)
    net.train()
    for epoch in range(config.epochs):
        train_x = views[epoch % len(views)]
        order = torch.from_numpy(rng.permutation(n)).to(device)  # one move an epoch
        for i in range(0, n, config.batch_size):
            idx = order[i : i + config.batch_size]
            x = train_x.batch(idx)  # (B, 3, R, R), or the prefix's (B, C, H, W)
            y = train_y[idx]
            for group in opt.param_groups:
                group["lr"] = 0.5 * group["base_lr"] * (1 + math.cos(math.pi * step / total))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, config.clip_norm)
            opt.step()
            losses.append(loss.detach())  # read back once, after training
            step += 1
    return losses, step


def augment_table(n: int, seed: int, view: int, flip: bool) -> np.ndarray:
    """The crops of view ``view`` of ``n`` training images, drawn from ``seed``: ``(n, 4)``
    float32 rows of the crop's side over the image's (the square root of an area share drawn
    uniformly in :data:`CROP_AREA`), its centre's horizontal and vertical offsets from the
    image's (uniform, the crop inside the image; in halves of the image's side) and 1, or -1
    for a mirror image (half of the images, when ``flip``)."""
    rng = np.random.default_rng([seed, view])
    side = np.sqrt(rng.uniform(*CROP_AREA, n))
    dx, dy = (rng.uniform(-1.0, 1.0, n) * (1.0 - side) for _ in range(2))
    mirror = np.where(rng.random(n) < 0.5, -1.0, 1.0) if flip else np.ones(n)
    return np.stack([side, dx, dy, mirror], axis=1).astype(np.float32)


def resized_crops(x: Tensor, table: Tensor) -> Tensor:
    """The crops ``table`` (rows of :func:`augment_table`) of the images ``x`` ``(B, C, H, W)``,
    each resized to the image's size by bilinear interpolation, as one resampling."""
    theta = torch.zeros(len(x), 2, 3, dtype=x.dtype, device=x.device)
    theta[:, 0, 0] = table[:, 0] * table[:, 3]
    theta[:, 1, 1] = table[:, 0]
    theta[:, 0, 2] = table[:, 1]
    theta[:, 1, 2] = table[:, 2]
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class _View:
    """One augmented view of the training images, read by batches of indices: each image's
    crop of the view, then, where the network's prefix is frozen, the prefix's output."""

    def __init__(
        self, images: _OnDevice, table: Tensor, prefix: Callable[[Tensor], Tensor] | None
    ) -> None:
        self.images, self.table, self.prefix = images, table, prefix

    def __len__(self) -> int:
        return len(self.images)

    @torch.no_grad()
    def batch(self, idx: Tensor) -> Tensor:
        x = resized_crops(self.images.batch(idx), self.table[idx])
        return x if self.prefix is None else self.prefix(x)


def _views(
    net: nn.Module,
    cut: int,
    train: Split,
    train_x: _OnDevice,
    config: FinetuneConfig,
    device: str | torch.device,
    data: DeviceData,
) -> list[_OnDevice] | list[_View]:
    """The training split as the epochs read it: ``[train_x]``, or with ``config.augment``
    also its :data:`AUGMENT_VIEWS` views (:class:`_View`, through the first ``cut`` stages of
    ``net`` where ``train_x`` holds their outputs), each kept as a tensor when the views fit
    in :data:`PREFIX_CACHE_BYTES`."""
    if config.augment == "none":
        return [train_x]
    prefix = functools.partial(cast(GraphNet, net).prefix, n=cut) if cut else None
    images = _OnDevice(train.x, device, data)
    views: list[_View] = []
    for view in range(1, AUGMENT_VIEWS + 1):
        table = augment_table(len(train), config.seed, view, config.augment == "crop-flip")
        views.append(_View(images, torch.from_numpy(table).to(device), prefix))
    one = views[0].batch(torch.zeros(1, dtype=torch.long, device=device))
    if one.numel() * one.element_size() * len(train) * len(views) > PREFIX_CACHE_BYTES:
        return [train_x, *views]  # computed batch by batch, every epoch
    chunks = torch.arange(len(train), device=device).split(256)
    kept = [_OnDevice(torch.cat([v.batch(i) for i in chunks]), device) for v in views]
    return [train_x, *kept]
