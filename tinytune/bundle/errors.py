"""The error of this area: a bundle that cannot be made or written where it was asked."""

from __future__ import annotations

from tinytune.errors import TinyTuneError

__all__ = ["BundleError"]


class BundleError(TinyTuneError):
    """An export that cannot proceed: an output folder that is not a bundle, a candidate that
    does not fit the device, a program the C renderer cannot express. The message names the
    value and what is allowed."""
