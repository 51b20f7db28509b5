"""``procedural``: drawn images of shape-and-texture classes, at any resolution.

The source task that supernets are pre-trained on (``ProceduralTask``) and a small fixed data
set drawn from such a task (``ProceduralDataset``). Each class is a distinct combination of one
of the shapes and one of the textures of ``tinytune.data.patterns`` and one of ``NUM_SCHEMES``
colour schemes, with its own texture frequency and shape size, all fixed by the task seed. Each
sample places the shape at a random position, size and rotation, shifts the texture's phase,
jitters the colours, lights the background with a random gradient and adds Gaussian noise.
Classes share shapes, textures and colour schemes with others, so a network must combine cues
to tell them apart; no single one suffices.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from tinytune.data.base import ImageDataset, check_resolution, check_seed
from tinytune.data.patterns import SHAPES, TEXTURES
from tinytune.data.splits import Split, Splits
from tinytune.errors import DataError

__all__ = ["ProceduralDataset", "ProceduralTask"]

# Tags that keep the generators of class definitions and of data set samples apart.
_CLASS_STREAM = 0x636C_6173
_SAMPLE_STREAM = 0x7361_6D70
# Colour schemes that classes share, so that colour alone does not tell the classes apart.
NUM_SCHEMES = 8
# Every class is a distinct (shape, texture, colour scheme) combination.
MAX_CLASSES = len(SHAPES) * len(TEXTURES) * NUM_SCHEMES
# Images painted at once; bounds the temporary arrays at large resolutions.
_CHUNK = 256


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Convert ``(n,)`` hue, saturation and value in [0, 1] to ``(n, 3)`` RGB in [0, 1]."""
    k = (np.array([5.0, 3.0, 1.0]) + 6.0 * h[:, None]) % 6.0  # (n, 3)
    return v[:, None] - v[:, None] * s[:, None] * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


def _jittered_rgb(hsv: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Jitter ``(n, 3)`` HSV colours a little and return them as ``(n, 3)`` float32 RGB."""
    n = len(hsv)
    h = (hsv[:, 0] + rng.uniform(-0.03, 0.03, n)) % 1.0
    s = np.clip(hsv[:, 1] * rng.uniform(0.85, 1.15, n), 0.0, 1.0)
    v = np.clip(hsv[:, 2] * rng.uniform(0.85, 1.15, n), 0.0, 1.0)
    return _hsv_to_rgb(h, s, v).astype(np.float32)


class ProceduralTask:
    """A classification task of procedurally drawn images, for pre-training supernets.

    The class definitions depend only on ``(num_classes, seed)``; the images of a call depend
    only on them, the labels, the resolution and the state of the generator passed in. The
    geometry and colours of each sample are drawn before any per-pixel noise, so with the same
    generator state a sample shows the same scene at every resolution.

    Attributes:
        num_classes: Number of classes.
        seed: Seed of the class definitions.
        class_names: ``"<shape>-<texture>-c<scheme>"`` per class.
    """

    def __init__(self, num_classes: int = 40, seed: int = 0) -> None:
        """Draw the fixed parameters of every class.

        Args:
            num_classes: Number of classes, in [2, MAX_CLASSES].
            seed: Seed of the class definitions (non-negative).

        Raises:
            DataError: If ``num_classes`` or ``seed`` is not a valid int.
        """
        if (
            not isinstance(num_classes, numbers.Integral)
            or isinstance(num_classes, bool)
            or not 2 <= num_classes <= MAX_CLASSES
        ):
            raise DataError(
                f"num_classes must be an int in [2, {MAX_CLASSES}], got {num_classes!r}"
            )
        self.num_classes = int(num_classes)
        self.seed = check_seed(seed)

        rng = np.random.default_rng([_CLASS_STREAM, self.seed, self.num_classes])
        # Colour schemes: a foreground, the texture's second colour (a darker shade near the
        # first) and a background, each as (hue, saturation, value) rows of (S, 3) arrays.
        fg_hue = rng.uniform(0.0, 1.0, NUM_SCHEMES)
        fg_value = rng.uniform(0.55, 1.0, NUM_SCHEMES)
        self._fg_hsv = np.stack([fg_hue, rng.uniform(0.45, 1.0, NUM_SCHEMES), fg_value], axis=1)
        self._alt_hsv = np.stack(
            [
                (fg_hue + rng.uniform(-0.12, 0.12, NUM_SCHEMES)) % 1.0,
                rng.uniform(0.3, 1.0, NUM_SCHEMES),
                fg_value * rng.uniform(0.25, 0.6, NUM_SCHEMES),
            ],
            axis=1,
        )
        self._bg_hsv = np.stack(
            [
                (fg_hue + rng.uniform(0.2, 0.8, NUM_SCHEMES)) % 1.0,
                rng.uniform(0.1, 0.7, NUM_SCHEMES),
                rng.uniform(0.15, 0.95, NUM_SCHEMES),
            ],
            axis=1,
        )

        # Classes: distinct (shape, texture, scheme) combinations, each with its own texture
        # frequency and shape size.
        n_textures = len(TEXTURES)
        combos = rng.choice(MAX_CLASSES, size=self.num_classes, replace=False)
        self._shape = combos // (n_textures * NUM_SCHEMES)  # (C,) index into SHAPES
        self._texture = combos // NUM_SCHEMES % n_textures  # (C,) index into TEXTURES
        self._scheme = combos % NUM_SCHEMES  # (C,) index into the colour schemes
        c = self.num_classes
        self._freq = rng.uniform(1.5, 4.0, c).astype(np.float32)  # texture cycles per radius
        self._scale = rng.uniform(0.4, 0.62, c)  # shape radius, in half image widths

        shape_names, texture_names = list(SHAPES), list(TEXTURES)
        self.class_names: tuple[str, ...] = tuple(
            f"{shape_names[shape]}-{texture_names[texture]}-c{scheme}"
            for shape, texture, scheme in zip(
                self._shape, self._texture, self._scheme, strict=True
            )
        )

    def __repr__(self) -> str:
        return f"ProceduralTask(num_classes={self.num_classes}, seed={self.seed})"

    def batch(
        self, n: int, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` samples of uniformly random classes.

        Args:
            n: Number of samples (>= 0).
            resolution: Side of the square images.
            rng: Generator of the labels and of every per-sample choice; it is advanced.

        Returns:
            Images ``(n, 3, R, R)`` float32 in [-1, 1] and labels ``(n,)`` int64.

        Raises:
            DataError: If ``n``, ``resolution`` or ``rng`` is invalid.
        """
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise DataError(f"n must be an int >= 0, got {n!r}")
        _check_rng(rng)
        resolution = check_resolution(resolution)
        labels = rng.integers(0, self.num_classes, int(n), dtype=np.int64)
        return self.render(labels, resolution, rng)

    def render(
        self, labels: Sequence[int] | np.ndarray, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw one sample of each given class.

        Args:
            labels: Class index of each sample, shape ``(n,)``.
            resolution: Side of the square images.
            rng: Generator of every per-sample choice; it is advanced.

        Returns:
            Images ``(n, 3, R, R)`` float32 in [-1, 1] and the labels as ``(n,)`` int64.

        Raises:
            DataError: If a label is not a class index, or ``resolution`` or ``rng`` is invalid.
        """
        _check_rng(rng)
        resolution = check_resolution(resolution)
        y = np.asarray(labels)
        if y.ndim != 1 or (y.size and y.dtype.kind not in "iu"):
            raise DataError(
                f"labels must be a 1-D sequence of ints, got a {y.dtype} array of shape {y.shape}"
            )
        y = y.astype(np.int64)
        if y.size and (y.min() < 0 or y.max() >= self.num_classes):
            raise DataError(
                f"labels must lie in [0, {self.num_classes - 1}], got [{y.min()}, {y.max()}]"
            )
        n = len(y)

        # Per-sample scene, drawn before any pixel so that it does not depend on the resolution.
        scene = {
            "shape": self._shape[y],
            "texture": self._texture[y],
            "freq": self._freq[y],
            "center": rng.uniform(-0.35, 0.35, (n, 2)),
            "scale": self._scale[y] * rng.uniform(0.8, 1.25, n),
            "angle": rng.uniform(0.0, 2.0 * np.pi, n),
            "phase": rng.uniform(0.0, 2.0 * np.pi, (n, 2)).astype(np.float32),
            "fg": _jittered_rgb(self._fg_hsv[self._scheme[y]], rng),
            "alt": _jittered_rgb(self._alt_hsv[self._scheme[y]], rng),
            "bg": _jittered_rgb(self._bg_hsv[self._scheme[y]], rng),
            "light_angle": rng.uniform(0.0, 2.0 * np.pi, n),
            "light_amount": rng.uniform(0.0, 0.4, n),
        }
        noise_sigma = rng.uniform(0.02, 0.1, n).astype(np.float32)

        x = np.empty((n, 3, resolution, resolution), dtype=np.float32)
        for start in range(0, n, _CHUNK):
            part = slice(start, start + _CHUNK)
            image = _paint({key: value[part] for key, value in scene.items()}, resolution)
            noise = rng.standard_normal(image.shape, dtype=np.float32)
            image += noise_sigma[part, None, None, None] * noise
            x[part] = np.clip(image, 0.0, 1.0) * 2.0 - 1.0
        return x, y


def _check_rng(rng: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise DataError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _paint(scene: dict[str, np.ndarray], resolution: int) -> np.ndarray:
    """Paint ``m`` scenes as ``(m, 3, R, R)`` float32 RGB in about [0, 1], without noise."""
    pixel = 2.0 / resolution  # pixel side, in image units ([-1, 1] across)
    coords = ((np.arange(resolution) + 0.5) * pixel - 1.0).astype(np.float32)  # pixel centres
    u = coords[None, None, :]  # (1, 1, R), left to right
    v = coords[None, :, None]  # (1, R, 1), top to bottom

    def per_image(values: np.ndarray) -> np.ndarray:
        return values.astype(np.float32)[:, None, None]  # (m, 1, 1)

    dx = u - per_image(scene["center"][:, 0])  # (m, 1, R)
    dy = v - per_image(scene["center"][:, 1])  # (m, R, 1)
    cos, sin = per_image(np.cos(scene["angle"])), per_image(np.sin(scene["angle"]))
    inv_scale = per_image(1.0 / scene["scale"])
    px = (cos * dx + sin * dy) * inv_scale  # (m, R, R), in the shape's own frame
    py = (cos * dy - sin * dx) * inv_scale

    sdf = np.empty_like(px)
    blend = np.empty_like(px)
    freq = per_image(scene["freq"])
    for k, shape in enumerate(SHAPES.values()):
        idx = np.flatnonzero(scene["shape"] == k)
        if idx.size:
            sdf[idx] = shape(px[idx], py[idx])
    for k, texture in enumerate(TEXTURES.values()):
        idx = np.flatnonzero(scene["texture"] == k)
        if idx.size:
            blend[idx] = texture(px[idx], py[idx], freq[idx], scene["phase"][idx])

    # Coverage with a one-pixel soft edge: the distance is in shape units, a pixel is
    # pixel / scale of them.
    mask = np.clip(0.5 - sdf / (pixel * inv_scale), 0.0, 1.0)[:, None]  # (m, 1, R, R)
    fg, alt, bg = (scene[key][:, :, None, None] for key in ("fg", "alt", "bg"))  # (m, 3, 1, 1)
    foreground = fg + blend[:, None] * (alt - fg)  # (m, 3, R, R)
    light = 1.0 + per_image(scene["light_amount"]) * (
        per_image(np.cos(scene["light_angle"])) * u + per_image(np.sin(scene["light_angle"])) * v
    )  # (m, R, R)
    background = bg * light[:, None]  # (m, 3, R, R)
    return background + mask * (foreground - background)


class ProceduralDataset(ImageDataset):
    """A fixed data set drawn from a ``ProceduralTask``: ``procedural`` on the command line.

    With the defaults it has 10 classes and 50/20/20 samples per class in train/val/test. Its
    task is ``ProceduralTask(num_classes, seed)``; because class definitions depend on the
    number of classes as well as the seed, it is a different task from the 40-class source task
    of the same seed (a fine-tuning target, not a re-run of pre-training). Each part is drawn by
    its own generator spawned from ``seed``, so its samples do not depend on the others' sizes,
    and the scenes do not depend on the resolution. Its ``name`` is ``"procedural"`` whatever
    the arguments; ``get_dataset("procedural", seed)`` builds the defaults.

    Attributes:
        task: The task the samples are drawn from.
        per_class: Samples per class in train, val and test.
    """

    def __init__(
        self, seed: int = 0, num_classes: int = 10, per_class: tuple[int, int, int] = (50, 20, 20)
    ) -> None:
        """Define the task; nothing is drawn until ``load``.

        Args:
            seed: Seed of the class definitions and of the samples.
            num_classes: Number of classes, in [2, MAX_CLASSES].
            per_class: Samples per class in train, val and test, each at least 1.

        Raises:
            DataError: If an argument is out of range.
        """
        counts = tuple(per_class)
        if len(counts) != 3 or not all(
            isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1 for k in counts
        ):
            raise DataError(
                f"per_class must be three ints >= 1 (train, val, test), got {per_class!r}"
            )
        self.task = ProceduralTask(num_classes=num_classes, seed=check_seed(seed))
        self.per_class: tuple[int, int, int] = (int(counts[0]), int(counts[1]), int(counts[2]))
        super().__init__(name="procedural", class_names=self.task.class_names, seed=seed)

    def _build(self, resolution: int) -> Splits:
        streams = np.random.SeedSequence([_SAMPLE_STREAM, self.seed]).spawn(3)
        parts = []
        for count, stream in zip(self.per_class, streams, strict=True):
            rng = np.random.default_rng(stream)
            labels = rng.permutation(np.repeat(np.arange(self.num_classes), count))
            parts.append(Split(*self.task.render(labels, resolution, rng)))
        train, val, test = parts
        return Splits(train=train, val=val, test=test)
