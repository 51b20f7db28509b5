"""tinytune: search how to fine-tune a network on a tiny device, and export what was found."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
