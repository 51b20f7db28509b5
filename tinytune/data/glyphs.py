"""Stroke glyphs: a procedural task of hand-drawn-looking symbols.

Each class is a fixed glyph of two to four strokes (line segments between random points of a
3×3 grid, so that glyphs look like characters rather than scribbles); each sample draws it with
a random affine jitter (scale, rotation, shear, translation), stroke width and blur, in a light
stroke on a dark background with a random tint and noise. Strokes are what handwriting is made
of, so features learned here transfer to characters and digits better than filled shapes do.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from tinytune.data.base import check_resolution, check_seed
from tinytune.errors import DataError

__all__ = ["GlyphTask", "SourceTask"]

_CLASS_STREAM = 0x61_79_70_68  # keeps glyph class definitions apart from other generators
_GRID = np.array([(x, y) for y in (-0.7, 0.0, 0.7) for x in (-0.6, 0.0, 0.6)], np.float32)


class GlyphTask:
    """A classification task of stroke glyphs; see the module docstring.

    Attributes:
        num_classes: Number of classes (distinct glyphs).
        seed: Seed of the class definitions.
    """

    def __init__(self, num_classes: int = 40, seed: int = 0) -> None:
        if not isinstance(num_classes, numbers.Integral) or not 2 <= num_classes <= 500:
            raise DataError(f"num_classes must be an int in [2, 500], got {num_classes!r}")
        self.num_classes = int(num_classes)
        self.seed = check_seed(seed)
        rng = np.random.default_rng([_CLASS_STREAM, self.seed, self.num_classes])
        glyphs: list[np.ndarray] = []
        seen: set[bytes] = set()
        while len(glyphs) < self.num_classes:
            n_strokes = int(rng.integers(2, 5))
            ends = rng.choice(len(_GRID), size=(n_strokes, 2))
            ends = ends[ends[:, 0] != ends[:, 1]]
            if len(ends) < 2:
                continue
            segments = np.sort(ends, axis=1)
            key = np.unique(segments, axis=0).tobytes()
            if key in seen:
                continue
            seen.add(key)
            glyphs.append(_GRID[segments])  # (S, 2 ends, 2 coords)
        self._max_strokes = max(len(g) for g in glyphs)
        # (C, S_max, 2, 2) with unused strokes collapsed far away (they draw nothing)
        self._segments = np.full((self.num_classes, self._max_strokes, 2, 2), 9.0, np.float32)
        for c, g in enumerate(glyphs):
            self._segments[c, : len(g)] = g

    def __repr__(self) -> str:
        return f"GlyphTask(num_classes={self.num_classes}, seed={self.seed})"

    def batch(
        self, n: int, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` samples of uniformly random classes: ``(n, 3, R, R)`` float32 in [-1, 1]
        and labels ``(n,)`` int64."""
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise DataError(f"n must be an int >= 0, got {n!r}")
        labels = rng.integers(0, self.num_classes, int(n), dtype=np.int64)
        return self.render(labels, check_resolution(resolution), rng)

    def render(
        self, labels: Sequence[int] | np.ndarray, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw one sample of each given class."""
        labels = np.asarray(labels, dtype=np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise DataError(f"labels must lie in [0, {self.num_classes - 1}]")
        m, r = len(labels), resolution
        # Random affine map from glyph space to image space ([-1, 1]²), per sample.
        angle = rng.uniform(-0.3, 0.3, m)
        scale = rng.uniform(0.7, 1.0, m)
        shear = rng.uniform(-0.25, 0.25, m)
        shift = rng.uniform(-0.15, 0.15, (m, 2))
        width = rng.uniform(0.09, 0.18, m)  # stroke half-width, in image half-widths
        tint = rng.uniform(0.6, 1.0, (m, 3))
        background = rng.uniform(0.0, 0.25, (m, 3))
        cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
        mat = np.stack([np.stack([cos, -sin + shear], -1), np.stack([sin, cos], -1)], -2)
        seg = self._segments[labels] @ mat.transpose(0, 2, 1)[:, None].astype(np.float32)
        seg = seg + shift[:, None, None, :].astype(np.float32)  # (m, S, 2, 2)
        axis = (np.arange(r, dtype=np.float32) + 0.5) / r * 2.0 - 1.0
        px, py = np.meshgrid(axis, axis)  # (R, R) each, x to the right, y down
        a, b = seg[:, :, None, None, 0, :], seg[:, :, None, None, 1, :]  # (m, S, 1, 1, 2)
        d = b - a
        p = np.stack([px, py], -1)[None, None]  # (1, 1, R, R, 2)
        t = np.clip(((p - a) * d).sum(-1) / np.maximum((d * d).sum(-1), 1e-6), 0.0, 1.0)
        dist = np.linalg.norm(p - (a + t[..., None] * d), axis=-1).min(axis=1)  # (m, R, R)
        soft = 1.5 / r  # anti-aliasing edge of about one pixel
        ink = np.clip((width[:, None, None] - dist) / soft + 0.5, 0.0, 1.0)
        img = background[:, :, None, None] + ink[:, None] * (tint - background)[:, :, None, None]
        img = img + rng.normal(0.0, 0.05, img.shape)
        x = (np.clip(img, 0.0, 1.0) * 2.0 - 1.0).astype(np.float32)
        return x, labels


class SourceTask:
    """The pre-training task: the filled shapes of :class:`ProceduralTask` and the stroke
    glyphs of :class:`GlyphTask`, as one classification task (shape classes first)."""

    def __init__(self, num_classes: int = 80, seed: int = 0) -> None:
        from tinytune.data.procedural import ProceduralTask

        if not isinstance(num_classes, numbers.Integral) or not 4 <= num_classes <= 900:
            raise DataError(f"num_classes must be an int in [4, 900], got {num_classes!r}")
        self.num_classes = int(num_classes)
        self.shapes = ProceduralTask(self.num_classes // 2, seed)
        self.glyphs = GlyphTask(self.num_classes - self.num_classes // 2, seed)

    def batch(
        self, n: int, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples of uniformly random classes of either kind."""
        k = self.shapes.num_classes
        labels = rng.integers(0, self.num_classes, int(n), dtype=np.int64)
        is_shape = labels < k
        x = np.empty((int(n), 3, resolution, resolution), np.float32)
        if is_shape.any():
            x[is_shape] = self.shapes.render(labels[is_shape], resolution, rng)[0]
        if (~is_shape).any():
            x[~is_shape] = self.glyphs.render(labels[~is_shape] - k, resolution, rng)[0]
        return x, labels
