"""The lowering of a candidate's int8 training step for a device: the portable C kernels
(``csrc/``), the passes that shape the step's graph (``passes.py``) and the step as an ordered
list of kernel calls over one static arena (``program.py``); :mod:`tinytune.bundle` renders it."""

from __future__ import annotations

from tinytune.lowering.sources import C_HEADERS, C_LIBS, C_SOURCES, csrc_dir

__all__ = ["C_HEADERS", "C_LIBS", "C_SOURCES", "csrc_dir"]
