"""Shapes and textures of the procedural task, as functions of local coordinates.

Every function takes arrays ``px, py`` of shape ``(m, R, R)``: the pixel coordinates of ``m``
images in the frame of each image's shape (origin at its centre, rotated with it, unit = its
radius). A shape returns an approximate signed distance (negative inside, unit = local unit);
a texture returns a field in [0, 1] that blends the shape's two colours, given a frequency of
shape ``(m, 1, 1)`` and phases of shape ``(m, 2)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["SHAPES", "TEXTURES"]

Shape = Callable[[np.ndarray, np.ndarray], np.ndarray]
Texture = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

_SQRT3_2 = np.float32(np.sqrt(3.0) / 2.0)


def _box(px: np.ndarray, py: np.ndarray, half_w: float, half_h: float) -> np.ndarray:
    return np.maximum(np.abs(px) - half_w, np.abs(py) - half_h)


def _disc(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.hypot(px, py) - 1.0


def _ring(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.abs(np.hypot(px, py) - 0.72) - 0.28


def _square(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return _box(px, py, 0.8, 0.8)


def _frame(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.abs(_box(px, py, 0.68, 0.68)) - 0.2


def _triangle(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    # Equilateral, circumradius 1: the largest distance past its three edges (inradius 0.5).
    return np.maximum(np.maximum(-py, _SQRT3_2 * px + 0.5 * py), -_SQRT3_2 * px + 0.5 * py) - 0.5


def _cross(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.minimum(_box(px, py, 1.0, 0.3), _box(px, py, 0.3, 1.0))


def _star(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    # Five points: the radius of the outline swings between 0.45 and 1.0 with the angle.
    outline = 0.725 + 0.275 * np.cos(5.0 * np.arctan2(py, px))
    return np.hypot(px, py) - outline


def _half_disc(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.maximum(np.hypot(px, py + 0.4) - 1.0, -(py + 0.4))


def _bar(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    # An ellipse of semi-axes 1 and 0.4, distance approximated in its short-axis unit.
    return (np.hypot(px, py / 0.4) - 1.0) * 0.4


def _crescent(px: np.ndarray, py: np.ndarray) -> np.ndarray:
    return np.maximum(np.hypot(px, py) - 1.0, 0.8 - np.hypot(px - 0.45, py))


def _solid(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    return np.zeros_like(px)


def _stripes(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.sin(np.pi * freq * px + phase[:, 0, None, None])


def _checker(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    a = np.sin(np.pi * freq * px + phase[:, 0, None, None])
    b = np.sin(np.pi * freq * py + phase[:, 1, None, None])
    return (a * b > 0).astype(px.dtype)


def _dots(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    shift = phase / (2.0 * np.pi)  # (m, 2), in cells
    cx = (0.5 * freq * px + shift[:, 0, None, None]) % 1.0 - 0.5
    cy = (0.5 * freq * py + shift[:, 1, None, None]) % 1.0 - 0.5
    return (np.hypot(cx, cy) < 0.3).astype(px.dtype)


def _radial(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    return np.minimum(np.hypot(px, py), 1.0)


def _rings(px: np.ndarray, py: np.ndarray, freq: np.ndarray, phase: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.cos(2.0 * np.pi * freq * np.hypot(px, py) + phase[:, 0, None, None])


SHAPES: dict[str, Shape] = {
    "disc": _disc,
    "ring": _ring,
    "square": _square,
    "frame": _frame,
    "triangle": _triangle,
    "cross": _cross,
    "star": _star,
    "half_disc": _half_disc,
    "bar": _bar,
    "crescent": _crescent,
}

TEXTURES: dict[str, Texture] = {
    "solid": _solid,
    "stripes": _stripes,
    "checker": _checker,
    "dots": _dots,
    "radial": _radial,
    "rings": _rings,
}
