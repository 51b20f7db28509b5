"""Writing a bundle folder: atomic, never over something that is not a bundle."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tinytune.bundle import (
    BUNDLE_FORMAT,
    BundleError,
    is_bundle,
    read_manifest,
    verify_checksums,
    write_bundle,
)
from tinytune.bundle.manifest import checksums
from tinytune.bundle.writer import FolderChanges, check_destination, folder_changes
from tinytune.errors import CLI

FILES = {"a.c": b"int a;\n", "kernels/b.h": b"/* b */\n"}


def _manifest(files: dict[str, bytes] = FILES) -> dict:
    return {"format": BUNDLE_FORMAT, "files": checksums(files)}


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_a_bundle_is_written_with_its_manifest_and_checksums(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b", FILES, _manifest())
    assert out == (tmp_path / "b").absolute()
    assert (out / "kernels" / "b.h").read_bytes() == FILES["kernels/b.h"]
    assert is_bundle(out) and read_manifest(out)["format"] == BUNDLE_FORMAT
    assert verify_checksums(out) == []
    (out / "a.c").write_bytes(b"changed")
    assert verify_checksums(out) == ["a.c"]
    assert _siblings(out) == ["b"]  # no temporary folder left beside it


def test_an_existing_bundle_is_replaced_and_the_users_files_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "b"
    write_bundle(out, {**FILES, "old.c": b""}, _manifest({**FILES, "old.c": b""}))
    (out / "build" / "host").mkdir(parents=True)
    (out / "build" / "host" / "train").write_bytes(b"\x7fELF")
    os.chmod(out / "build" / "host" / "train", 0o755)
    os.utime(out / "build" / "host" / "train", (1_000_000, 1_000_000))
    (out / "build" / "profile-host.json").write_text('{"device": "host"}')
    (out / "kernels" / "mine.c").write_text("int mine;")
    (out / "empty").mkdir()
    (out / "link").symlink_to("a.c")
    new = {"a.c": b"int new;\n", "kernels/b.h": b"/* b */\n"}
    write_bundle(out, new, _manifest(new))
    assert verify_checksums(out) == [] and _siblings(out) == ["b"]
    assert (out / "a.c").read_bytes() == b"int new;\n" and not (out / "old.c").exists()
    assert (out / "build" / "profile-host.json").read_text() == '{"device": "host"}'
    assert (out / "kernels" / "mine.c").read_text() == "int mine;"
    train = (out / "build" / "host" / "train").stat()
    assert train.st_mtime == 1_000_000 and train.st_mode & 0o777 == 0o755  # make sees it stale
    assert (out / "empty").is_dir() and os.readlink(out / "link") == "a.c"
    assert folder_changes(out) == FolderChanges(
        changed=(),
        own=("build/host/train", "build/profile-host.json", "kernels/mine.c", "link"),
        own_folders=("empty",),
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("edit", "a.c (changed)"),  # a file of the bundle, edited
        ("edit-removed", "kernels/b.h (changed)"),  # edited, and the new bundle has none
        ("own-at-file", "new.c (yours)"),  # the user's file where the new bundle writes one
        ("own-at-folder", "src (yours)"),  # ... where the new bundle has a folder
        ("own-under-file", "x.c/notes (yours)"),  # under a path the new bundle writes a file
    ],
)
def test_work_a_new_bundle_would_lose_is_refused_unless_forced(
    tmp_path: Path, change: str, named: str
) -> None:
    out = write_bundle(tmp_path / "b", FILES, _manifest())
    if change == "edit":
        (out / "a.c").write_bytes(b"int a = 1; /* mine */\n")
    elif change == "edit-removed":
        (out / "kernels" / "b.h").write_bytes(b"/* mine */\n")
    elif change == "own-at-file":
        (out / "new.c").write_text("mine")
    elif change == "own-at-folder":
        (out / "src").write_text("mine")
    else:
        (out / "x.c").mkdir()
        (out / "x.c" / "notes").write_text("mine")
    new = {"a.c": b"int new;\n", "new.c": b"", "src/s.c": b"", "x.c": b""}
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(BundleError, match=re.escape(named)) as refused:
        write_bundle(out, new, _manifest(new))
    said = refused.value
    assert str(said).endswith("replace it with force=True") and "\n" not in str(said)
    assert said.worded(CLI).endswith("replace it with --force")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _siblings(out) == ["b"]
    if change.startswith("edit"):  # found before any work too
        with pytest.raises(BundleError, match=re.escape(named)):
            check_destination(out)
    else:
        check_destination(out)
    write_bundle(out, new, _manifest(new), force=True)
    assert verify_checksums(out) == [] and folder_changes(out).changed == ()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "a.c",
        "manifest.json",
        "new.c",
        "src/s.c",
        "x.c",
    ]


def test_the_users_folders_keep_their_modes_and_a_pipe_is_not_copied(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b", FILES, _manifest())
    (out / "build" / "private").mkdir(parents=True)
    (out / "build" / "private" / "key.txt").write_text("k")
    os.chmod(out / "build" / "private", 0o700)
    os.mkfifo(out / "build" / "pipe")
    write_bundle(out, FILES, _manifest())
    assert (out / "build" / "private").stat().st_mode & 0o777 == 0o700
    assert (out / "build" / "private" / "key.txt").read_text() == "k"
    assert not (out / "build" / "pipe").exists()  # a pipe holds no data


def test_a_folder_that_cannot_be_read_is_refused_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = write_bundle(tmp_path / "b", FILES, _manifest())
    (out / "build" / "locked").mkdir(parents=True)
    (out / "build" / "locked" / "data.json").write_text("{}")
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(BundleError, match=r"cannot read '.*/build/locked' in the bundle folder"):
        write_bundle(out, FILES, _manifest())
    monkeypatch.undo()
    assert (out / "build" / "locked" / "data.json").read_text() == "{}"
    assert _siblings(out) == ["b"]


def test_a_file_written_into_the_folder_meanwhile_stops_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profiler run writing its measurement file while the new bundle is copied: the copy
    would miss it, so the export stops and the folder keeps it."""
    out = write_bundle(tmp_path / "b", FILES, _manifest())
    (out / "build").mkdir()
    (out / "build" / "train").write_bytes(b"elf")
    real = shutil.copy2

    def copy_while_profiling(src: object, dst: object, **kwargs: object) -> object:
        (out / "build" / "profile-host.json").write_text('{"device": "host"}')
        return real(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shutil, "copy2", copy_while_profiling)
    new = {"a.c": b"int new;\n"}
    with pytest.raises(
        BundleError, match=r"changed while the bundle was written \(build/profile-host.json\)"
    ):
        write_bundle(out, new, _manifest(new))
    assert (out / "build" / "profile-host.json").read_text() == '{"device": "host"}'
    assert (out / "a.c").read_bytes() == FILES["a.c"] and _siblings(out) == ["b"]


def test_the_refusal_names_a_few_and_counts_the_rest(tmp_path: Path) -> None:
    files = {f"f{i}.c": b"" for i in range(6)}
    out = write_bundle(tmp_path / "b", files, _manifest(files))
    for name in files:
        (out / name).write_text("mine")
    with pytest.raises(BundleError, match=r"f0.c \(changed\), .*f3.c \(changed\) and 2 more;"):
        check_destination(out)


def test_a_manifest_without_checksums_makes_every_file_the_users(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b", FILES, {"format": BUNDLE_FORMAT})
    assert folder_changes(out).own == ("a.c", "kernels/b.h")
    with pytest.raises(BundleError, match=re.escape("a.c (yours), kernels/b.h (yours)")):
        write_bundle(out, FILES, _manifest())
    write_bundle(out, {"c.c": b""}, _manifest({"c.c": b""}))
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "a.c",
        "c.c",
        "kernels/b.h",
        "manifest.json",
    ]


@pytest.mark.parametrize("kind", ["folder", "file", "other manifest"])
def test_what_is_not_a_bundle_is_refused_and_kept(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "b"
    if kind == "file":
        out.write_text("keep")
    else:
        out.mkdir()
        (out / "mine.txt").write_text("keep")
        if kind == "other manifest":
            (out / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(BundleError, match="is not a"):
        write_bundle(out, FILES, _manifest())
    assert (out.read_text() if kind == "file" else (out / "mine.txt").read_text()) == "keep"
    assert _siblings(out) == ["b"]


def test_a_failure_while_writing_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Path, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", broken)
    with pytest.raises(OSError, match="No space"):
        write_bundle(tmp_path / "b", FILES, _manifest())
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rename_keeps_the_previous_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    write_bundle(out, FILES, _manifest())
    real = os.rename
    calls = []

    def rename(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 2:  # the new folder into place
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="Input/output"):
        write_bundle(out, {"a.c": b"new"}, _manifest({"a.c": b"new"}))
    assert (out / "a.c").read_bytes() == FILES["a.c"] and verify_checksums(out) == []
    assert _siblings(out) == ["b"]


@pytest.mark.parametrize("name", ["../x.c", "/abs.c", "manifest.json"])
def test_file_names_stay_inside_the_bundle(tmp_path: Path, name: str) -> None:
    with pytest.raises(BundleError, match="not a plain relative path"):
        write_bundle(tmp_path / "b", {name: b""}, _manifest({}))
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_in_a_folder_that_cannot_be_written_is_refused_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle is written beside its folder and renamed into place: replacing a bundle needs
    its parent to be writable, and that is checked before any work."""
    import tinytune.paths

    out = write_bundle(tmp_path / "b", FILES, _manifest())
    real_access = os.access

    def parent_read_only(path: object, mode: int) -> bool:
        return Path(str(path)) != tmp_path and real_access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(tinytune.paths.os, "access", parent_read_only)
    with pytest.raises(BundleError, match=r"cannot write under .* \(not writable\)"):
        check_destination(out)
