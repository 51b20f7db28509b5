"""The portable C sources of the int8 training kernels, shipped inside the package.

``csrc/tt_int8.h`` declares the kernels (their contract: caller-provided memory only, sizes
passed in, NCHW int8 activations, batch 1); ``tt_arith.h`` holds the scalar primitives of
:mod:`tinytune.quant.arith`; the ``.c`` files implement the forward ops, the backward ops with
the QAS-scaled SGD update, the float32 classifier, and the ops of TinyTL lite residuals. A
bundle compiles them as they are. ``tt_logmel.c`` is the log-mel front-end of keyword audio
(:mod:`tinytune.data.logmel` in C: integer arithmetic only, its tables passed in), which an audio
bundle's ``tt_input_from_pcm16`` calls.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["C_HEADERS", "C_LIBS", "C_SOURCES", "csrc_dir"]

C_SOURCES = (
    "tt_forward.c",
    "tt_backward.c",
    "tt_classifier.c",
    "tt_lite.c",
    "tt_image.c",
    "tt_logmel.c",
)
C_HEADERS = ("tt_int8.h", "tt_arith.h", "tt_logmel.h")
C_LIBS = ("-lm",)  # sqrtf of GroupNorm (correctly rounded, as IEEE 754 requires)


def csrc_dir() -> Path:
    """The folder that holds :data:`C_SOURCES` and :data:`C_HEADERS`."""
    return Path(str(resources.files("tinytune.lowering") / "csrc"))
