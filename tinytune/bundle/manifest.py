"""The bundle's ``manifest.json``: what a bundle is, where it came from, and its checksums.

A folder is a bundle when it holds a ``manifest.json`` whose ``format`` is
:data:`BUNDLE_FORMAT`; only such a folder may be overwritten by a new export.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinytune.bundle.errors import BundleError
from tinytune.hwmodels.stack import build_target

__all__ = [
    "BUNDLE_FORMAT",
    "MANIFEST_NAME",
    "checksums",
    "emulated_target",
    "is_bundle",
    "manifest_bytes",
    "read_manifest",
    "verify_checksums",
]

BUNDLE_FORMAT = "tinytune-bundle/1"
MANIFEST_NAME = "manifest.json"


def emulated_target(core: str) -> str | None:
    """The bundle Makefile's target of the device's core (``make run-<target>`` runs the
    example on it under QEMU, ``run-profile-<target>`` counts its instructions): a Cortex-M or
    RV32IMC core's, ``aarch64`` for an Arm Cortex-A board's, None for the host."""
    return build_target(core)


def checksums(files: Mapping[str, bytes]) -> dict[str, str]:
    """SHA-256 (hex) of every file, by its path inside the bundle, sorted by path."""
    return {name: hashlib.sha256(files[name]).hexdigest() for name in sorted(files)}


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as written: indented JSON, keys in a stable order, no NaN."""
    return (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the bundle in ``folder``.

    Raises:
        BundleError: ``folder`` holds no manifest of this format.
    """
    path = Path(folder) / MANIFEST_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise BundleError(f"{str(folder)!r} is not a tinytune bundle: no {MANIFEST_NAME}") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"cannot read {str(path)!r} as a bundle manifest: {e}") from e
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise BundleError(
            f"{str(path)!r} has format {found!r}; a tinytune bundle has {BUNDLE_FORMAT!r}"
        )
    return data


def is_bundle(folder: Path) -> bool:
    """Whether ``folder`` is a directory holding a bundle manifest."""
    if not Path(folder).is_dir():
        return False
    try:
        read_manifest(folder)
    except BundleError:
        return False
    return True


def verify_checksums(folder: Path) -> list[str]:
    """The files of the bundle in ``folder`` that are missing or differ from the manifest."""
    manifest = read_manifest(folder)
    bad = []
    for name, digest in manifest.get("files", {}).items():
        path = Path(folder) / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            bad.append(name)
    return bad
