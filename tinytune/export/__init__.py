"""Export of a fine-tuning candidate for a device: the portable C kernels of its int8
training step (and, later, the bundle renderer)."""

from __future__ import annotations

from tinytune.export.sources import C_HEADERS, C_LIBS, C_SOURCES, csrc_dir

__all__ = ["C_HEADERS", "C_LIBS", "C_SOURCES", "csrc_dir"]
