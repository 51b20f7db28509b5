"""Lay out the buffers of a training step in one static arena.

A :class:`Buffer` is a block of bytes with a lifetime on the step's timeline; the memory planner
(:func:`tinytune.hwmodels.plan_memory`) lists them and :func:`plan_layout` places them.

Greedy by size (TFLM's and TinyEngine's planners work the same way): buffers are taken largest
first, longest-lived first among equals, and each is placed at the lowest aligned offset where
its bytes overlap no placed buffer whose lifetime overlaps its own. The arena is the highest end
of any buffer; it is at least the peak of live bytes and usually equal or close to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ArenaLayout", "Buffer", "plan_layout"]


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


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def plan_layout(buffers: Sequence[Buffer], alignment: int = 4) -> ArenaLayout:
    """Place ``buffers`` (lifetimes inclusive) in one arena; see the module docstring."""
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    order = sorted(
        range(len(buffers)),
        key=lambda i: (-buffers[i].nbytes, -(buffers[i].end - buffers[i].start), i),
    )
    offsets = [0] * len(buffers)
    placed: list[int] = []
    arena = 0
    for i in order:
        b = buffers[i]
        if b.nbytes == 0:
            continue
        busy = sorted(
            (offsets[j], offsets[j] + buffers[j].nbytes)
            for j in placed
            if buffers[j].start <= b.end and b.start <= buffers[j].end
        )
        offset = 0
        for lo, hi in busy:  # first gap from the bottom that the buffer fits in
            if offset + b.nbytes <= lo:
                break
            offset = max(offset, _align(hi, alignment))
        offsets[i] = offset
        placed.append(i)
        arena = max(arena, offset + b.nbytes)
    return ArenaLayout(tuple(offsets), arena, alignment)
