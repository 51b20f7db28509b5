"""The error of this area: a network that int8 quantization or the C kernels do not cover."""

from __future__ import annotations

from tinytune.errors import TinyTuneError

__all__ = ["QuantizationError"]


class QuantizationError(TinyTuneError):
    """A network holds an op, an activation or a size that the int8 training step does not
    support; the message names it and lists what is supported."""
