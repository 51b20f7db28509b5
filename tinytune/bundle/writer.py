"""Write a bundle folder atomically: all of it, or nothing.

The files go into a fresh temporary folder beside the destination, the manifest last; the
folder then takes the destination's name by a rename. An existing bundle there is moved aside
first and removed once the new one is in place (or put back if the rename fails); a folder or
file that is not a bundle is never touched.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinytune.bundle.errors import BundleError
from tinytune.bundle.manifest import MANIFEST_NAME, is_bundle, manifest_bytes

__all__ = ["check_destination", "write_bundle"]

log = logging.getLogger(__name__)


def check_destination(out: Path) -> None:
    """Refuse an output path that exists and is not a bundle folder (checked again by
    :func:`write_bundle`; call it early to fail before any work)."""
    from tinytune.paths import writable_folder

    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BundleError(f"output {str(out)!r} exists and is not a folder; choose another path")
    if out.is_dir() and not is_bundle(out):
        why = (
            f"its {MANIFEST_NAME} is not a tinytune bundle's"
            if (out / MANIFEST_NAME).exists()
            else f"no {MANIFEST_NAME}"
        )
        raise BundleError(
            f"output folder {str(out)!r} exists and is not a tinytune bundle ({why}); choose a "
            "new folder or a previous bundle to replace"
        )
    # the bundle is written beside ``out`` and renamed into place
    writable_folder(out.absolute().parent, "output", out, BundleError)


def _safe_relative(name: str) -> Path:
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or name == MANIFEST_NAME:
        raise BundleError(f"bundle file name {name!r} is not a plain relative path")
    return rel


def write_bundle(out: Path, files: Mapping[str, bytes], manifest: Mapping[str, Any]) -> Path:
    """Write ``files`` (path inside the bundle → bytes) and ``manifest`` as the folder ``out``.

    Raises:
        BundleError: ``out`` exists and is not a bundle, or a file name leaves the folder.
    """
    out = Path(out).absolute()
    check_destination(out)
    rels = {name: _safe_relative(name) for name in files}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for name, rel in rels.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[name])
        (tmp / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        check_destination(out)  # nothing appeared there meanwhile
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.rename(out, old / "bundle")
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old / "bundle", out)
                shutil.rmtree(old, ignore_errors=True)
                raise
            shutil.rmtree(old, ignore_errors=True)
            log.info("replaced the bundle in %s", out)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
