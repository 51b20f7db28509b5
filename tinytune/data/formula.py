"""Formula-driven source task: fractals, contours, shapes and glyphs, for pre-training.

Formula-driven supervised learning (FDSL) pre-trains on images that a formula draws, with the
formula's parameters as the class. This module mixes four kinds of classes:

* **IFS fractals** (Kataoka et al., "Pre-training without Natural Images", ACCV 2020), with the
  contractive sampling of Anderson & Farrell ("Improving Fractal Pre-training", WACV 2022):
  each of the N affine maps has the linear part ``R(θ) · diag(σ1, σ2) · R(φ) · D`` (rotations
  R, a random reflection D, singular values 0 < σ2 ≤ σ1 < 1), and the σ-factor
  ``α = Σ_k (σ1_k + 2 σ2_k)`` is drawn from ``U[(5 + N)/2, (6 + N)/2]``. The attractor is drawn
  by the chaos game, batched over systems and walkers in torch.
* **Contours** in the manner of RCDB and VisualAtom (Kataoka et al., CVPR 2022; Takashima et
  al., CVPR 2023): nested closed curves (orbits) on an ellipse, pushed radially by two
  sinusoids of class-specific integer frequencies and a smooth periodic noise.
* The filled **shapes** of :class:`~tinytune.data.procedural.ProceduralTask` and the stroke
  **glyphs** of :class:`~tinytune.data.glyphs.GlyphTask`, as grey masks.

A few base images per class are rendered once, in grey, at the largest resolution asked for
(OFDB and 1p-frac show that few base images and strong augmentation suffice). Samples are drawn
from them on the fly: a random-resized crop with flips and transposition, sometimes a coarse
re-sampling (as of an up-scaled low-resolution image), a random colour on a random background
(flat, plasma-like or dead leaves) and noise. Mixup and CutMix, which also matter (OFDB,
1p-frac), mix labels and therefore live in the training loop.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

import numpy as np

from tinytune.data.base import check_resolution, check_seed
from tinytune.errors import DataError

if TYPE_CHECKING:
    import torch

__all__ = [
    "FormulaTask",
    "render_contours",
    "render_ifs",
    "sample_contour_params",
    "sample_ifs",
]

_CLASS_STREAM = 0x666F_726D  # keeps formula class definitions apart from other generators
MAX_MAPS = 7
_TRIES = 64  # bound of every rejection loop


def sample_ifs(rng: np.random.Generator, n_maps: int) -> tuple[np.ndarray, np.ndarray]:
    """One contractive IFS with the σ-factor sampling of Anderson & Farrell (WACV 2022, §3.1).

    Args:
        rng: Generator of the system; it is advanced.
        n_maps: Number of affine maps N, in [2, MAX_MAPS].

    Returns:
        Linear parts ``(N, 2, 2)`` and translations ``(N, 2)``, float64; every linear part has
        singular values in (0, 1) and their σ-factor lies in ``[(5 + N)/2, (6 + N)/2]``.

    Raises:
        DataError: If ``n_maps`` is out of range, or no valid system is found in a bounded
            number of tries.
    """
    if not 2 <= n_maps <= MAX_MAPS:
        raise DataError(f"n_maps must be in [2, {MAX_MAPS}], got {n_maps!r}")
    alpha = rng.uniform((5 + n_maps) / 2, (6 + n_maps) / 2)
    for _ in range(_TRIES):
        s = np.sort(rng.uniform(0.05, 1.0, (n_maps, 2)), axis=1)[:, ::-1]  # (N, 2): σ1 ≥ σ2
        s = s * alpha / (s[:, 0] + 2.0 * s[:, 1]).sum()
        if s.max() < 0.98:
            break
    else:
        raise DataError(f"no contractive IFS with σ-factor {alpha:.2f} in {_TRIES} tries")
    theta, phi = rng.uniform(0.0, 2.0 * np.pi, (2, n_maps))
    reflect = rng.choice([-1.0, 1.0], (n_maps, 2))

    def rot(a: np.ndarray) -> np.ndarray:
        c, s_ = np.cos(a), np.sin(a)
        return np.stack([np.stack([c, -s_], -1), np.stack([s_, c], -1)], -2)  # (N, 2, 2)

    diag = np.zeros((n_maps, 2, 2))
    diag[:, 0, 0], diag[:, 1, 1] = s[:, 0], s[:, 1]
    flip = np.zeros((n_maps, 2, 2))
    flip[:, 0, 0], flip[:, 1, 1] = reflect[:, 0], reflect[:, 1]
    linear = rot(theta) @ diag @ rot(phi) @ flip
    return linear, rng.uniform(-1.0, 1.0, (n_maps, 2))


def render_ifs(
    linear: np.ndarray,
    shift: np.ndarray,
    resolution: int,
    points: int,
    seed: int,
    walkers: int = 64,
    burn_in: int = 12,
) -> np.ndarray:
    """Draw the attractors of B systems by the chaos game, as binary images.

    Each system runs ``walkers`` chains in parallel; a chain picks map k with probability
    ∝ |det A_k| (Barnsley's rule) and its first ``burn_in`` points are dropped. The points of a
    system are scaled to fill the image (their bounding box, keeping the aspect ratio, onto
    pixels 1..R-2: a one-pixel margin) and every pixel hit is set.

    Args:
        linear: ``(B, N, 2, 2)`` linear parts; unused maps have a zero determinant.
        shift: ``(B, N, 2)`` translations.
        resolution: Side of the square images.
        points: Points per image (after burn-in), about.
        seed: Seed of the map choices and start points.
        walkers: Parallel chains per system.
        burn_in: Steps dropped from the start of each chain.

    Returns:
        ``(B, R, R)`` float32 images in {0, 1}.
    """
    import torch  # deferred: tinytune.data stays light to import

    gen = torch.Generator().manual_seed(int(seed))
    a = torch.as_tensor(linear, dtype=torch.float32)  # (B, N, 2, 2)
    b = torch.as_tensor(shift, dtype=torch.float32)  # (B, N, 2)
    n_sys = a.shape[0]
    prob = torch.linalg.det(a).abs()  # (B, N): Barnsley's rule; unused maps have 0
    steps = max(1, math.ceil(points / walkers))
    picks = torch.multinomial(prob, walkers * (steps + burn_in), replacement=True, generator=gen)
    picks = picks.view(n_sys, walkers, steps + burn_in)  # (B, W, T)
    x = torch.rand(n_sys, walkers, 2, generator=gen) * 2.0 - 1.0  # (B, W, 2)
    rows = torch.arange(n_sys)[:, None]
    trace = torch.empty(n_sys, walkers, steps, 2)
    for t in range(steps + burn_in):
        k = picks[:, :, t]  # (B, W)
        x = (a[rows, k] @ x[..., None]).squeeze(-1) + b[rows, k]  # x ← A_k x + b_k
        if t >= burn_in:
            trace[:, :, t - burn_in] = x
    pts = trace.view(n_sys, -1, 2)  # (B, P, 2)
    lo, hi = pts.amin(1, keepdim=True), pts.amax(1, keepdim=True)  # (B, 1, 2)
    span = (hi - lo).amax(-1, keepdim=True).clamp_min(1e-6)  # (B, 1, 1): keeps aspect ratio
    u = (pts - (lo + hi) / 2.0) / span + 0.5  # (B, P, 2) in [0, 1]
    pix = (1 + u * (resolution - 2)).floor().long().clamp(1, resolution - 2)  # 1-pixel margin
    flat = rows * resolution * resolution + pix[..., 1] * resolution + pix[..., 0]  # (B, P)
    image = torch.zeros(n_sys * resolution * resolution)
    image[flat.reshape(-1)] = 1.0
    return image.view(n_sys, resolution, resolution).numpy()


def sample_contour_params(rng: np.random.Generator) -> dict[str, float | int]:
    """The fixed parameters of one contour class (RCDB / VisualAtom style).

    Returns:
        ``vertices`` (polygon corners, 3..64: few make polygons, many make curves), ``orbits``
        (nested curves, 1..5), ``n1``, ``n2`` (distinct integer frequencies in 0..12) with
        amplitudes ``a1``, ``a2``, ``noise`` (strength of the smooth periodic noise), ``width``
        (line half-width in image half-widths) and ``gap`` (radial step between orbits).
    """
    n1, n2 = rng.choice(13, size=2, replace=False)
    return {
        "vertices": int(np.clip(round(rng.exponential(20.0)), 3, 64)),
        "orbits": int(rng.integers(1, 6)),
        "n1": int(n1),
        "n2": int(n2),
        "a1": float(rng.uniform(0.0, 0.25)),
        "a2": float(rng.uniform(0.0, 0.15)),
        "noise": float(rng.uniform(0.0, 0.15)),
        "width": float(rng.uniform(0.02, 0.06)),
        "gap": float(rng.uniform(0.1, 0.25)),
    }


def render_contours(
    params: dict[str, float | int], n: int, resolution: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw ``n`` instances of one contour class as grey masks.

    Each orbit is a closed polygon of ``vertices`` corners on an ellipse, its radius pushed by
    ``a1 sin(n1 t + p1) + a2 sin(n2 t + p2)`` and by noise that is smooth in t; the next orbit
    lies ``gap`` further out. Per instance the radius, the ellipse's ratio and angle, the phases
    and the noise are redrawn.

    Returns:
        ``(n, R, R)`` float32 masks in {0, 1}.
    """
    import torch  # deferred: tinytune.data stays light to import
    import torch.nn.functional as F

    v, k = int(params["vertices"]), int(params["orbits"])
    samples = 8 * resolution  # points along each orbit: several per pixel
    t = np.linspace(0.0, 2.0 * np.pi, samples, endpoint=False)  # (T,)
    corner = np.linspace(0.0, 2.0 * np.pi, v + 1)  # polygon corners, closed
    out = np.zeros((n, resolution, resolution), np.float32)
    for i in range(n):
        base = rng.uniform(0.15, 0.4)
        ratio, tilt = rng.uniform(1.0, 1.6), rng.uniform(0.0, np.pi)
        p1, p2 = rng.uniform(0.0, 2.0 * np.pi, 2)
        harm = rng.normal(0.0, 1.0, (k, 4, 2)) / np.arange(1, 5)[None, :, None]  # (K, 4, 2)
        wave = params["a1"] * np.sin(params["n1"] * corner + p1) + params["a2"] * np.sin(
            params["n2"] * corner + p2
        )  # (V+1,)
        curves = []
        for o in range(k):
            f = np.arange(1, 5)[:, None]
            noise = (
                harm[o, :, :1] * np.sin(f * corner) + harm[o, :, 1:] * np.cos(f * corner)
            ).sum(0)
            radius = (base + o * params["gap"]) * (1.0 + wave + params["noise"] * noise)
            radius = np.maximum(radius, 0.02)
            cx, cy = radius * np.cos(corner) * ratio, radius * np.sin(corner)
            # straight edges between the corners, sampled at T points
            seg = np.interp(t, corner, np.arange(v + 1))
            j = np.minimum(seg.astype(int), v - 1)
            w = seg - j
            px = cx[j] * (1 - w) + cx[j + 1] * w
            py = cy[j] * (1 - w) + cy[j + 1] * w
            curves.append(np.stack([px, py], -1))
        pts = np.concatenate(curves)  # (K·T, 2)
        c, s = np.cos(tilt), np.sin(tilt)
        pts = pts @ np.array([[c, s], [-s, c]])
        pts = pts / max(1.0, np.abs(pts).max() / 0.92)  # keep it inside the image
        pix = np.clip(((pts + 1.0) / 2.0 * resolution).astype(int), 0, resolution - 1)
        out[i, pix[:, 1], pix[:, 0]] = 1.0  # y down, x right
    if params["width"] > 0.05:  # lines wider than a pixel: a 3×3 dilation
        out = F.max_pool2d(torch.from_numpy(out)[:, None], 3, 1, 1)[:, 0].numpy()
    return out


def _plasma(n: int, resolution: int, gen: torch.Generator) -> torch.Tensor:
    """``(n, 3, R, R)`` smooth colour noise in [0, 1]: two octaves of up-sampled noise."""
    import torch  # deferred: tinytune.data stays light to import
    import torch.nn.functional as F

    img = torch.zeros(n, 3, resolution, resolution)
    for cells, weight in ((3, 0.65), (7, 0.35)):
        grid = torch.rand(n, 3, cells, cells, generator=gen)
        img += weight * F.interpolate(
            grid, size=(resolution, resolution), mode="bicubic", align_corners=False
        )
    return img.clamp(0.0, 1.0)


def _dead_leaves(n: int, resolution: int, gen: torch.Generator) -> torch.Tensor:
    """``(n, 3, R, R)`` dead-leaves images (Baradad et al., NeurIPS 2021): discs of random
    colour, radii ∝ r⁻³ on [0.03, 1] of the image, stacked until the image is covered."""
    import torch  # deferred: tinytune.data stays light to import

    axis = (torch.arange(resolution) + 0.5) / resolution * 2.0 - 1.0
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    img = torch.zeros(n, 3, resolution, resolution)
    covered = torch.zeros(n, resolution, resolution, dtype=torch.bool)
    for _ in range(48):
        u = torch.rand(n, generator=gen)
        rmin, rmax = 0.03, 1.0  # inverse CDF of a density ∝ r^-3 on [rmin, rmax]
        r = (rmin**-2 - u * (rmin**-2 - rmax**-2)) ** -0.5 * 2.0
        centre = torch.rand(n, 2, generator=gen) * 2.4 - 1.2
        colour = torch.rand(n, 3, generator=gen)
        disc = (xx - centre[:, 0, None, None]) ** 2 + (yy - centre[:, 1, None, None]) ** 2 < (
            r[:, None, None] ** 2
        )
        new = disc & ~covered  # leaves fall behind those already there
        img += new[:, None] * colour[:, :, None, None]
        covered |= disc
    return img


class FormulaTask:
    """A classification task of formula-drawn images; see the module docstring.

    The class definitions and the base images depend only on the constructor's arguments;
    the samples of :meth:`batch` only on them and the generator passed in.

    Attributes:
        num_classes: Number of classes.
        seed: Seed of the class definitions.
        counts: Classes of each kind, in label order: ``fractal``, ``contour``, ``shape``,
            ``glyph``.
        base: ``(C, K, S, S)`` uint8 grey base images, K per class, at the largest resolution S.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        seed: int = 0,
        per_class: int = 4,
        max_resolution: int = 48,
        mix: tuple[float, float, float, float] = (0.5, 0.3, 0.08, 0.12),
    ) -> None:
        """Define the classes and render their base images.

        Args:
            num_classes: Number of classes, in [4, 5000].
            seed: Seed of the class definitions and base images.
            per_class: Base images per class (K >= 1).
            max_resolution: Side S of the base images: the largest resolution served.
            mix: Shares of fractal, contour, shape and glyph classes (summing to 1).

        Raises:
            DataError: If an argument is out of range.
        """
        if not isinstance(num_classes, numbers.Integral) or not 4 <= num_classes <= 5000:
            raise DataError(f"num_classes must be an int in [4, 5000], got {num_classes!r}")
        if not isinstance(per_class, numbers.Integral) or per_class < 1:
            raise DataError(f"per_class must be an int >= 1, got {per_class!r}")
        if len(mix) != 4 or min(mix) < 0 or not math.isclose(sum(mix), 1.0):
            raise DataError(f"mix must be four shares >= 0 summing to 1, got {mix!r}")
        self.num_classes = int(num_classes)
        self.seed = check_seed(seed)
        self.per_class = int(per_class)
        self.max_resolution = check_resolution(max_resolution)
        n_shape = min(max(1, round(mix[2] * num_classes)), 400) if mix[2] else 0
        n_glyph = min(max(1, round(mix[3] * num_classes)), 500) if mix[3] else 0
        n_contour = round(mix[1] * num_classes)
        n_fractal = self.num_classes - n_shape - n_glyph - n_contour
        if n_fractal < 0:
            raise DataError(f"mix {mix!r} leaves no room for {num_classes} classes")
        self.counts = {
            "fractal": n_fractal,
            "contour": n_contour,
            "shape": n_shape,
            "glyph": n_glyph,
        }
        rng = np.random.default_rng([_CLASS_STREAM, self.seed, self.num_classes])
        s, k = self.max_resolution, self.per_class
        parts = [
            self._fractals(n_fractal, rng),
            self._contours(n_contour, rng),
            self._borrowed("shape", n_shape, rng),
            self._borrowed("glyph", n_glyph, rng),
        ]
        base = np.concatenate([p for p in parts if len(p)]).reshape(self.num_classes, k, s, s)
        self.base = np.round(base * 255.0).astype(np.uint8)
        # Batches take consecutive classes of this fixed shuffle, so each holds every kind.
        self._order = rng.permutation(self.num_classes)

    def __repr__(self) -> str:
        return (
            f"FormulaTask(num_classes={self.num_classes}, seed={self.seed}, "
            f"per_class={self.per_class}, max_resolution={self.max_resolution})"
        )

    def _fractals(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n·K, S, S)`` base images of ``n`` IFS classes; a system whose attractor fills
        under 8 % of the image (a near-point or a thin line) is drawn again."""
        s = self.max_resolution
        points = int(5.5 * s * s)  # ≈ 12k at 48 px, the rate measured for the chaos game
        kept: list[np.ndarray] = []
        for _ in range(_TRIES):
            if len(kept) >= n:
                break
            m = 2 * (n - len(kept)) + 8
            linear = np.zeros((m, MAX_MAPS, 2, 2))
            shift = np.zeros((m, MAX_MAPS, 2))
            for i in range(m):
                n_maps = int(rng.integers(2, 5))
                linear[i, :n_maps], shift[i, :n_maps] = sample_ifs(rng, n_maps)
            probe = render_ifs(linear, shift, s, points, int(rng.integers(2**31)))
            for i in np.flatnonzero(probe.mean((1, 2)) >= 0.08):
                if len(kept) < n:
                    kept.append(self._fractal_instances(linear[i], shift[i], probe[i], rng))
        else:
            raise DataError(f"found only {len(kept)} of {n} fractal classes in {_TRIES} rounds")
        return np.concatenate(kept) if kept else np.zeros((0, s, s), np.float32)

    def _fractal_instances(
        self, linear: np.ndarray, shift: np.ndarray, first: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """K renderings of one system: itself, then with one map's linear part scaled by
        U(0.8, 1.1) (Anderson & Farrell), kept contractive."""
        s, k = self.max_resolution, self.per_class
        if k == 1:
            return first[None]
        used = np.flatnonzero(np.abs(np.linalg.det(linear)) > 0)
        lin = np.repeat(linear[None], k - 1, 0)
        for j in range(k - 1):
            m = rng.choice(used)
            factor = rng.uniform(0.8, 1.1)
            top = np.linalg.svd(lin[j, m], compute_uv=False)[0]
            lin[j, m] *= min(factor, 0.98 / top)
        more = render_ifs(lin, np.repeat(shift[None], k - 1, 0), s, int(5.5 * s * s), 1 + j)
        return np.concatenate([first[None], more])

    def _contours(self, n: int, rng: np.random.Generator) -> np.ndarray:
        s, k = self.max_resolution, self.per_class
        out = [render_contours(sample_contour_params(rng), k, s, rng) for _ in range(n)]
        return np.concatenate(out) if out else np.zeros((0, s, s), np.float32)

    def _borrowed(self, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """Shape or glyph classes of the older source task, as grey masks (luminance rescaled
        to [0, 1] per image)."""
        from tinytune.data.glyphs import GlyphTask
        from tinytune.data.procedural import ProceduralTask

        s, k = self.max_resolution, self.per_class
        if n == 0:
            return np.zeros((0, s, s), np.float32)
        task = (ProceduralTask if kind == "shape" else GlyphTask)(max(n, 2), self.seed)
        labels = np.repeat(np.arange(n), k)
        x, _ = task.render(labels, s, rng)  # (n·K, 3, S, S) in [-1, 1]
        grey = x.mean(1)
        lo, hi = grey.min((1, 2), keepdims=True), grey.max((1, 2), keepdims=True)
        grey = (grey - lo) / np.maximum(hi - lo, 1e-6)
        if kind == "shape":  # the shape brighter than its background, as the other kinds
            centre = grey[:, s // 4 : 3 * s // 4, s // 4 : 3 * s // 4].mean((1, 2))
            dark = centre < grey.mean((1, 2))
            grey[dark] = 1.0 - grey[dark]
        return grey.astype(np.float32)

    def labels(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` labels, balanced: consecutive classes of a fixed shuffle from a random start,
        so each class appears ⌊n/C⌋ or ⌈n/C⌉ times."""
        start = int(rng.integers(self.num_classes))
        return self._order[(start + np.arange(int(n))) % self.num_classes].astype(np.int64)

    def batch(
        self, n: int, resolution: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` augmented samples of balanced classes.

        Args:
            n: Number of samples (>= 0).
            resolution: Side of the square images, at most ``max_resolution``.
            rng: Generator of the labels and of every per-sample choice; it is advanced.

        Returns:
            Images ``(n, 3, R, R)`` float32 in [-1, 1] and labels ``(n,)`` int64.

        Raises:
            DataError: If ``n``, ``resolution`` or ``rng`` is invalid.
        """
        import torch  # deferred: tinytune.data stays light to import

        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise DataError(f"n must be an int >= 0, got {n!r}")
        if not isinstance(rng, np.random.Generator):
            raise DataError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        resolution = check_resolution(resolution)
        if resolution > self.max_resolution:
            raise DataError(
                f"resolution {resolution} exceeds the base images' {self.max_resolution}"
            )
        y = self.labels(int(n), rng)
        if n == 0:
            return np.zeros((0, 3, resolution, resolution), np.float32), y
        gen = torch.Generator().manual_seed(int(rng.integers(2**63)))
        with torch.no_grad():
            x = self._augment(y, resolution, gen)
        return x.numpy(), y

    def _augment(self, y: np.ndarray, r: int, gen: torch.Generator) -> torch.Tensor:
        import torch  # deferred: tinytune.data stays light to import
        import torch.nn.functional as F

        n = len(y)
        inst = torch.randint(self.per_class, (n,), generator=gen).numpy()
        src = torch.from_numpy(self.base[y, inst]).float().div_(255.0)[:, None]  # (n, 1, S, S)

        # Random-resized crop (area 35–100 %, aspect 3/4–4/3), flips and transposition, as one
        # affine sampling grid (normalised coordinates, [-1, 1] across the base image).
        area = torch.empty(n).uniform_(0.35, 1.0, generator=gen)
        aspect = torch.exp(
            torch.empty(n).uniform_(math.log(3 / 4), math.log(4 / 3), generator=gen)
        )
        sx = (area * aspect).sqrt().clamp(max=1.0)
        sy = (area / aspect).sqrt().clamp(max=1.0)
        tx = (torch.rand(n, generator=gen) * 2 - 1) * (1 - sx)
        ty = (torch.rand(n, generator=gen) * 2 - 1) * (1 - sy)
        fx = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
        fy = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
        theta = torch.zeros(n, 2, 3)
        theta[:, 0, 0], theta[:, 0, 2] = sx * fx, tx
        theta[:, 1, 1], theta[:, 1, 2] = sy * fy, ty
        swap = torch.rand(n, generator=gen) < 0.5  # transpose: exchange the output axes
        theta[swap] = theta[swap][:, [1, 0]]
        grid = F.affine_grid(theta, [n, 1, r, r], align_corners=False)
        mask = F.grid_sample(src, grid, mode="bilinear", align_corners=False)  # (n, 1, R, R)

        # Sometimes coarse: down to 6–16 px and back, as an up-scaled small image looks.
        coarse = torch.rand(n, generator=gen) < 0.3
        if coarse.any():
            side = int(torch.randint(6, 17, (1,), generator=gen))
            small = F.interpolate(mask[coarse], size=(side, side), mode="area")
            mask[coarse] = F.interpolate(small, size=(r, r), mode="bilinear", align_corners=False)
        # Thicker or thinner strokes now and then: a 3×3 max or min filter.
        morph = torch.rand(n, generator=gen)
        grow, shrink = morph < 0.15, morph > 0.9
        if grow.any():
            mask[grow] = F.max_pool2d(mask[grow], 3, 1, 1)
        if shrink.any():
            mask[shrink] = -F.max_pool2d(-mask[shrink], 3, 1, 1)

        # Colour: a random foreground on a flat, plasma or dead-leaves background; a third of
        # the samples grey, light on dark.
        hue = torch.rand(n, 1, generator=gen)
        k = (torch.tensor([5.0, 3.0, 1.0]) + 6.0 * hue) % 6.0  # HSV → RGB
        sat = torch.empty(n, 1).uniform_(0.3, 1.0, generator=gen)
        val = torch.empty(n, 1).uniform_(0.6, 1.0, generator=gen)
        fg = val - val * sat * torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0)  # (n, 3)
        kind = torch.rand(n, generator=gen)
        flat = torch.rand(n, 3, 1, 1, generator=gen) * 0.4
        bg = flat.expand(n, 3, r, r).clone()
        plasma, leaves = (kind >= 0.5) & (kind < 0.75), kind >= 0.75
        if plasma.any():
            bg[plasma] = _plasma(int(plasma.sum()), r, gen) * 0.6
        if leaves.any():
            bg[leaves] = _dead_leaves(int(leaves.sum()), r, gen) * 0.5
        grey = torch.rand(n, generator=gen) < 0.33
        fg[grey] = val[grey].expand(-1, 3)
        bg[grey] = bg[grey].mean(1, keepdim=True) * 0.5
        img = bg + mask * (fg[:, :, None, None] - bg)
        sigma = torch.rand(n, 1, 1, 1, generator=gen) * 0.05
        img = img + sigma * torch.randn(img.shape, generator=gen)
        return img.clamp_(0.0, 1.0).mul_(2.0).sub_(1.0)
