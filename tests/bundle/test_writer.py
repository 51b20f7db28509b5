"""Writing a bundle folder: atomic, never over something that is not a bundle."""

from __future__ import annotations

import os
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


def test_an_existing_bundle_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "b"
    write_bundle(out, {**FILES, "old.c": b""}, _manifest())
    (out / "build").mkdir()
    new = {"a.c": b"int new;\n"}
    write_bundle(out, new, _manifest(new))
    assert sorted(p.name for p in out.iterdir()) == ["a.c", "manifest.json"]
    assert verify_checksums(out) == [] and _siblings(out) == ["b"]


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
    from tinytune.bundle.writer import check_destination

    out = write_bundle(tmp_path / "b", FILES, _manifest())
    real_access = os.access

    def parent_read_only(path: object, mode: int) -> bool:
        return Path(str(path)) != tmp_path and real_access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(tinytune.paths.os, "access", parent_read_only)
    with pytest.raises(BundleError, match=r"cannot write under .* \(not writable\)"):
        check_destination(out)
