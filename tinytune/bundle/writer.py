"""Write a bundle folder atomically: all of it, or nothing.

The files go into a fresh temporary folder beside the destination, the manifest last; the
folder then takes the destination's name by a rename. An existing bundle there is moved aside
first and removed once the new one is in place (or put back if the rename fails); a folder or
file that is not a bundle is never touched.

What a user keeps in a bundle folder survives a new export into it: files that are not the
bundle's (``build/`` with the profiler's measurement files, notes, a board's project files) are
copied into the new folder, times and modes kept, before it takes the old one's place. A file of
the bundle changed since it was written (an edited ``main.c``), or a file of the user's at a
path the new bundle writes, would be lost: such an export is refused, naming them, unless
``force`` says to replace them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytune.bundle.errors import BundleError
from tinytune.bundle.manifest import MANIFEST_NAME, is_bundle, manifest_bytes, read_manifest
from tinytune.errors import flag

__all__ = ["FolderChanges", "check_destination", "folder_changes", "write_bundle"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FolderChanges:
    """What an existing bundle folder holds besides the bundle as it was written.

    Attributes:
        changed: files of the bundle's manifest whose contents differ from it (edited since).
        own: files that are not the bundle's (paths inside the folder, sorted).
        own_folders: folders that hold none of the bundle's files and nothing else (empty).
    """

    changed: tuple[str, ...]
    own: tuple[str, ...]
    own_folders: tuple[str, ...]


def _walk(out: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``os.walk`` of ``out`` that does not follow links (a linked folder is listed among the
    files) and fails on a folder it cannot read, which it would otherwise skip unseen.

    Raises:
        BundleError: a folder under ``out`` cannot be listed.
    """

    def unreadable(error: OSError) -> None:
        raise BundleError(
            f"cannot read {str(error.filename)!r} in the bundle folder ({error.strerror}); "
            "make it readable or move it elsewhere"
        ) from error

    for root, dirs, names in os.walk(out, onerror=unreadable):
        links = [d for d in dirs if (Path(root) / d).is_symlink()]  # not walked into
        dirs[:] = [d for d in dirs if d not in links]
        yield Path(root), dirs, names + links


def folder_changes(out: Path) -> FolderChanges:
    """The changes a user made to the bundle folder ``out`` since it was written.

    A symbolic link counts as a file of the user's (it is kept as a link, not followed); a
    socket or a pipe holds no data and is not counted.

    Raises:
        BundleError: ``out`` is not a bundle, or a folder in it cannot be read.
    """
    out = Path(out)
    listed = read_manifest(out).get("files")
    digests = (
        {k: v for k, v in listed.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(listed, dict)
        else {}
    )
    changed, own, own_folders = [], [], []
    for root, dirs, names in _walk(out):
        here = root.relative_to(out)
        if here.parts and not dirs and not names:
            own_folders.append(here.as_posix())
        for name in names:
            rel = (here / name).as_posix()
            path = root / name
            if rel == MANIFEST_NAME or not (path.is_symlink() or path.is_file()):
                continue
            if rel not in digests or path.is_symlink():
                own.append(rel)
            elif hashlib.sha256(path.read_bytes()).hexdigest() != digests[rel]:
                changed.append(rel)
    return FolderChanges(tuple(sorted(changed)), tuple(sorted(own)), tuple(sorted(own_folders)))


def _stamps(out: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``out`` by path: its kind, size and modification time, to tell
    whether anything was written there meanwhile."""
    stamps = {}
    for root, dirs, names in _walk(out):
        for name in dirs + names:
            st = os.lstat(root / name)
            stamps[(root / name).relative_to(out).as_posix()] = (
                stat.S_IFMT(st.st_mode),
                st.st_size,
                st.st_mtime_ns,
            )
    return stamps


def _would_lose(changes: FolderChanges, files: Collection[str] | None) -> list[str]:
    """The user's work that writing ``files`` over the folder would lose, by path: its changed
    bundle files, its own files at a path the new bundle writes or uses as a folder, or under a
    path that the new bundle writes as a file, and its empty folders at a new file's path."""
    lost = list(changes.changed)
    if files is not None:
        folders = {p.as_posix() for name in files for p in Path(name).parents}

        def under_a_file(name: str) -> bool:
            return any(p.as_posix() in files for p in Path(name).parents)

        lost += [n for n in changes.own if n in files or n in folders or under_a_file(n)]
        lost += [n for n in changes.own_folders if n in files or under_a_file(n)]
    return lost


def _refuse_losses(out: Path, changes: FolderChanges, lost: list[str]) -> None:
    if lost:
        named = [f"{n} ({'changed' if n in changes.changed else 'yours'})" for n in lost]
        shown = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        raise BundleError(
            f"output folder {str(out)!r} holds work that a new bundle there would lose: {shown}; "
            "move it elsewhere, or replace it with " + flag("force", True)
        )


def check_destination(
    out: Path, *, force: bool = False, files: Collection[str] | None = None
) -> None:
    """Refuse an output path that exists and is not a bundle folder, or, unless ``force``, a
    bundle folder with files of the bundle changed since it was written or, where the paths
    of the new bundle's ``files`` are given, files of the user's at those paths (checked again
    by :func:`write_bundle`; call it early to fail before any work)."""
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
    if out.is_dir() and not force:
        changes = folder_changes(out)
        _refuse_losses(out, changes, _would_lose(changes, files))
    # the bundle is written beside ``out`` and renamed into place
    writable_folder(out.absolute().parent, "output", out, BundleError)


def _safe_relative(name: str) -> Path:
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or name == MANIFEST_NAME:
        raise BundleError(f"bundle file name {name!r} is not a plain relative path")
    return rel


def _first_difference(
    before: Mapping[str, tuple[int, int, int]], after: Mapping[str, tuple[int, int, int]]
) -> str | None:
    """The first path that is new, gone or different between two stamps, if any: a file
    before a folder (a folder's time moves with what is written in it)."""

    def is_folder(name: str) -> bool:
        return (before.get(name) or after[name])[0] == stat.S_IFDIR

    moved = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
    return min(moved, key=lambda k: (is_folder(k), k)) if moved else None


def write_bundle(
    out: Path, files: Mapping[str, bytes], manifest: Mapping[str, Any], *, force: bool = False
) -> Path:
    """Write ``files`` (path inside the bundle → bytes) and ``manifest`` as the folder ``out``.

    Over an existing bundle, the user's own files and empty folders are carried into the new
    one; with ``force``, those at a path the new bundle writes, and the bundle's files changed
    since it was written, are replaced instead of refused.

    Anything written into ``out`` while the new bundle is written (a profiler's measurement
    file) would be missed by the copy: the export then stops and leaves ``out`` as it is.

    Raises:
        BundleError: ``out`` exists and is not a bundle, a file name leaves the folder, a
            folder in it cannot be read, something was written there meanwhile, or (without
            ``force``) the new bundle would overwrite a user's work; nothing is written then.
    """
    out = Path(out).absolute()
    check_destination(out, force=True)  # a bundle or nothing; its changes are read once, below
    rels = {name: _safe_relative(name) for name in files}
    keep: list[str] = []
    keep_folders: list[str] = []
    before: dict[str, tuple[int, int, int]] = {}
    if out.is_dir():
        before = _stamps(out)
        changes = folder_changes(out)
        lost = _would_lose(changes, files)
        if not force:
            _refuse_losses(out, changes, lost)
        keep = [name for name in changes.own if name not in lost]
        keep_folders = [name for name in changes.own_folders if name not in lost]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for name, rel in rels.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[name])
        for name in keep:  # copies: the old folder stays whole until the new one is in place
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out / name, tmp / name, follow_symlinks=False)
        for name in keep_folders:
            (tmp / name).mkdir(parents=True, exist_ok=True)
        # the user's folders keep their modes and times (deepest first: copying into a folder
        # moves its time); the bundle's own folders are the bundle's
        bundle_folders = {p.as_posix() for rel in rels.values() for p in rel.parents}
        theirs = {p.as_posix() for name in keep for p in Path(name).parents} | set(keep_folders)
        for name in sorted(theirs - bundle_folders - {"."}, key=lambda n: -n.count("/")):
            shutil.copystat(out / name, tmp / name, follow_symlinks=False)
        (tmp / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        check_destination(out, force=True)  # nothing but a bundle appeared there meanwhile
        if out.exists() and (moved := _first_difference(before, _stamps(out))) is not None:
            raise BundleError(
                f"output folder {str(out)!r} changed while the bundle was written ({moved}); "
                "export again once nothing writes there"
            )
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
            log.info("replaced the bundle in %s (kept %d files of the user's)", out, len(keep))
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
