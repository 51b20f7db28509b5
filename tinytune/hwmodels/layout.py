"""Lay out the buffers of a training step in one static arena.

A :class:`Buffer` is a block of bytes with a lifetime on the step's timeline; the memory planner
(:func:`tinytune.hwmodels.plan_memory`) lists them and :func:`plan_layout` places them.

Greedy by size (TFLM's and TinyEngine's planners work the same way): buffers are taken largest
first, longest-lived first among equals, and each is placed at the lowest aligned offset where
its bytes overlap no placed buffer whose lifetime overlaps its own. The arena is the highest end
of any buffer; it is at least the peak of live bytes. Where the greedy order leaves a gap above
the peak (a chain of activations whose sizes pair up badly: on a 40 px network the
classifier-only step came out 10 % above its peak), :func:`plan_layout` tries a few more
orders — sizes scaled by fixed pseudo-random factors in [0.5, 1.5), the same every run — and
keeps the smallest arena, stopping as soon as one comes within 0.2 % of the peak. Finding the
smallest arena is NP-hard (dynamic storage allocation); the tries are a cheap, deterministic
search.

A layout depends only on the buffers' sizes and lifetimes, the alignment and the tries, and a
search prices the same candidate again and again (when it is checked, proposed, stored, and
under each patch count of its schedule twins), so the last :data:`KEPT_LAYOUTS` layouts are
kept, keyed by a digest of those numbers: in a search of the glyph supernet more than half the
layouts asked for had been planned before.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tinytune.recent import Recent

__all__ = ["KEPT_LAYOUTS", "ArenaLayout", "Buffer", "plan_layout"]

KEPT_LAYOUTS = 512
"""Layouts kept for the next call with the same sizes and lifetimes (the oldest goes first)."""
_kept: Recent[bytes, ArenaLayout] = Recent(KEPT_LAYOUTS)


@dataclass(frozen=True)
class Buffer:
    """A block of memory alive from step ``start`` to step ``end`` inclusive."""

    name: str
    category: str  # activation | saved | gradient | param_gradient | weights | optimizer
    nbytes: int
    start: int
    end: int


@dataclass(frozen=True)
class ArenaLayout:
    """Offsets of every buffer (same order as the input) and the arena size in bytes."""

    offsets: tuple[int, ...]
    arena_bytes: int
    alignment: int


def _first_fit(buffers: Sequence[Buffer], order: Sequence[int], alignment: int) -> ArenaLayout:
    """Place the buffers in ``order``, each at the lowest aligned offset free for its life.

    For each buffer, the placed ones whose lives overlap its own are sorted by their lowest
    byte; the buffer goes below the first of them with room beneath it above all those before
    it, else above them all. Vectorised with numpy (a search prices hundreds of buffers per
    candidate, in the driver, beside the workers)."""
    n = len(buffers)
    size = np.fromiter((b.nbytes for b in buffers), np.int64, n)
    start = np.fromiter((b.start for b in buffers), np.int64, n)
    end = np.fromiter((b.end for b in buffers), np.int64, n)
    offsets = np.zeros(n, np.int64)
    placed = np.zeros(n, bool)
    arena = 0
    for i in order:
        nbytes = int(size[i])
        if nbytes == 0:
            continue
        near = np.flatnonzero(placed & (start <= end[i]) & (start[i] <= end))
        offset = 0
        if near.size:
            lo = offsets[near]
            by_lo = np.argsort(lo, kind="stable")
            lo = lo[by_lo]
            hi = lo + size[near][by_lo]
            # the lowest free offset above the first k of them: the highest of their ends, aligned
            above = (np.maximum.accumulate(hi) + alignment - 1) // alignment * alignment
            below = np.concatenate(([0], above[:-1]))
            fits = np.flatnonzero(below + nbytes <= lo)
            offset = int(below[fits[0]] if fits.size else above[-1])
        offsets[i] = offset
        placed[i] = True
        arena = max(arena, offset + nbytes)
    return ArenaLayout(tuple(int(o) for o in offsets), arena, alignment)


def _live_peak(buffers: Sequence[Buffer]) -> int:
    """The most bytes alive at one step: no layout can be smaller."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + b.nbytes
        events[b.end + 1] = events.get(b.end + 1, 0) - b.nbytes
    live = peak = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak


def plan_layout(buffers: Sequence[Buffer], alignment: int = 4, tries: int = 32) -> ArenaLayout:
    """Place ``buffers`` (lifetimes inclusive) in one arena; see the module docstring.

    Args:
        buffers: the step's buffers.
        alignment: every offset is a multiple of it.
        tries: orders tried after the greedy one when its arena is above the peak.
    """
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    for b in buffers:
        if (
            isinstance(b.nbytes, bool)
            or not isinstance(b.nbytes, int | np.integer)
            or b.nbytes < 0
        ):
            raise ValueError(f"buffer {b.name!r} has {b.nbytes!r} bytes; a size is an int >= 0")
    if sum(b.nbytes for b in buffers) + len(buffers) * alignment >= 2**62:
        raise ValueError("the buffers' bytes do not fit the layout's 64-bit offsets")
    numbers = np.fromiter(
        (v for b in buffers for v in (b.nbytes, b.start, b.end)), np.int64, 3 * len(buffers)
    )
    key = hashlib.blake2b(numbers.tobytes(), digest_size=16, key=b"%d:%d" % (alignment, tries))
    digest = key.digest()
    return _kept.get(digest, lambda: _plan(buffers, alignment, tries))


def _plan(buffers: Sequence[Buffer], alignment: int, tries: int) -> ArenaLayout:
    """:func:`plan_layout`'s search, on buffers it has checked."""
    n = range(len(buffers))
    best = _first_fit(
        buffers,
        sorted(n, key=lambda i: (-buffers[i].nbytes, -(buffers[i].end - buffers[i].start), i)),
        alignment,
    )
    peak = _live_peak(buffers)
    rng = random.Random(0)  # fixed: the planner and the bundle get the same layout
    for _ in range(tries):
        if best.arena_bytes <= peak + peak // 500:
            break
        weight = [buffers[i].nbytes * rng.uniform(0.5, 1.5) for i in n]
        layout = _first_fit(buffers, sorted(n, key=lambda i: (-weight[i], i)), alignment)
        if layout.arena_bytes < best.arena_bytes:
            best = layout
    return best
