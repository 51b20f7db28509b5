"""What was computed for the last few keys: a bounded memo, the oldest key dropped first.

A search prices the same candidate again and again (when it is drawn, checked, proposed and
stored, and under each patch count of its schedule twins); the hardware evaluator's graphs,
schedules and costs and the arena planner's layouts are kept in one of these each.
``functools.lru_cache`` is not used: kept on an instance it makes the instance unpicklable
(the hardware evaluator travels to Ray workers), and a module-level one cannot be sized by the
caller.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The values of the last ``size`` keys asked for, the oldest dropped first."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a memo keeps at least 1 value, not {size!r}")
        self.size = size
        self._kept: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()``'s (then kept; nothing kept if it raises)."""
        if key not in self._kept:
            value = make()
            while len(self._kept) >= self.size:
                self._kept.pop(next(iter(self._kept)))
            self._kept[key] = value
        return self._kept[key]

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept
