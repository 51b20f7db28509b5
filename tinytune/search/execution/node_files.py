"""The files an evaluation names, carried to Ray workers through the object store.

A task names its supernet checkpoint by path, may name the user's image folder
(``imagefolder:PATH``), and, for a network of the model zoo's format, its candidate names the
network's JSON config by path (``supernet``); a worker on another node of a cluster has none of
these paths. On a cluster the
driver therefore reads each path once per run and puts its bytes (a folder as an uncompressed
tar of its files, in sorted order) into Ray's object store once per content, keyed by its
SHA-256, and every task carries the references. A worker writes them, once per node and
content, under its own cache folder (``$TINYTUNE_CACHE/shipped/<sha256>/``, atomically: a
temporary name, then a rename) and runs the task on those local paths. The image folder's
split depends only on the sorted file names, the labels and the seed, so a worker's copy gives
the driver's split. Local workers share the driver's file system and get the task as it is.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinytune.errors import ConfigError
from tinytune.evaluators import EvaluationResult, FinetuneTask

__all__ = ["Shipper", "run_shipped"]

IMAGEFOLDER = "imagefolder:"


def _tar_folder(root: Path) -> bytes:
    """The folder's regular files as an uncompressed tar, in sorted order, with fixed metadata
    (the same bytes for the same files)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size = path.stat().st_size
            info.mode = 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    return buffer.getvalue()


class Shipper:
    """Driver side: rewrites tasks so that their files travel as object references.

    Args:
        put: stores bytes and returns a reference (``ray.put``).
    """

    def __init__(self, put: Callable[[bytes], Any]) -> None:
        self._put = put
        self._refs: dict[str, Any] = {}  # sha256 → reference
        self._known: dict[str, str] = {}  # path → sha256: each path is read once per run

    def _ship(self, path: Path, folder: bool) -> dict[str, Any]:
        sha = self._known.get(str(path))
        if sha is None:
            data = _tar_folder(path) if folder else path.read_bytes()
            sha = self._known[str(path)] = hashlib.sha256(data).hexdigest()
            if sha not in self._refs:  # another path with the same content shares it
                self._refs[sha] = self._put(data)
        return {"sha256": sha, "name": path.name, "folder": folder, "ref": self._refs[sha]}

    def pack(self, task: FinetuneTask) -> dict[str, Any]:
        """The shipped references of ``task``'s checkpoint, image folder and network config
        (empty where it names none), which travel beside it.

        Raises:
            ConfigError: a named file or folder does not exist.
        """
        shipped: dict[str, Any] = {}
        checkpoint = task.checkpoint
        if checkpoint:
            path = Path(checkpoint)
            if not path.is_file():
                raise ConfigError(f"the checkpoint {checkpoint!r} is not a file")
            shipped["checkpoint"] = self._ship(path, folder=False)
        fields = json.loads(task.candidate)
        network = fields.get("supernet") if isinstance(fields, dict) else None
        if isinstance(network, str) and network.endswith(".json"):  # a zoo network's config
            path = Path(network)
            if not path.is_file():
                raise ConfigError(f"the network config {network!r} is not a file")
            shipped["config"] = self._ship(path, folder=False)
        dataset = task.dataset
        if dataset.startswith(IMAGEFOLDER):
            root = Path(dataset[len(IMAGEFOLDER) :]).expanduser().resolve()
            if not root.is_dir():
                raise ConfigError(f"the image folder {str(root)!r} is not a directory")
            shipped["dataset"] = self._ship(root, folder=True)
        return shipped


def _materialise(item: dict[str, Any], get: Callable[[Any], bytes], cache: Path) -> Path:
    """The local path of a shipped file or folder, written on first use."""
    home = cache / "shipped" / item["sha256"]
    target = home / item["name"]
    if target.exists():
        return target
    home.mkdir(parents=True, exist_ok=True)
    data = get(item["ref"])
    if hashlib.sha256(data).hexdigest() != item["sha256"]:
        raise ConfigError(f"a shipped copy of {item['name']!r} does not match its SHA-256")
    if item["folder"]:
        tmp = Path(tempfile.mkdtemp(dir=home, prefix=".part-"))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(tmp, filter="data")
    else:
        fd, name = tempfile.mkstemp(dir=home, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp = Path(name)
    try:
        os.replace(tmp, target)
    except OSError:  # another worker of this node wrote the same content first
        if not target.exists():
            raise
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    return target


def run_shipped(
    fn: Callable[[FinetuneTask], EvaluationResult],
    task: FinetuneTask,
    shipped: dict[str, Any],
    get: Callable[[Any], bytes] | None = None,
) -> EvaluationResult:
    """Worker side: write the task's ``shipped`` files under this node's cache, point the task
    at them, and run ``fn``; ``get`` reads a reference (default ``ray.get``)."""
    if not shipped:
        return fn(task)
    if get is None:
        import ray

        get = ray.get
    from tinytune.paths import cache_dir

    cache = cache_dir()
    local = task
    if "checkpoint" in shipped:
        local = local.replace(checkpoint=str(_materialise(shipped["checkpoint"], get, cache)))
    if "dataset" in shipped:
        folder = _materialise(shipped["dataset"], get, cache)
        local = local.replace(dataset=IMAGEFOLDER + str(folder))
    if "config" in shipped:
        fields = {
            **json.loads(task.candidate),
            "supernet": str(_materialise(shipped["config"], get, cache)),
        }
        local = local.replace(candidate=json.dumps(fields, sort_keys=True, separators=(",", ":")))
    return fn(local)
