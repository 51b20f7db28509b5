"""Files carried to workers through an object store (a dict here; Ray's on the two-node test in
test_ray.py): the bytes arrive intact, each content is stored once, and an image folder's copy
gives the driver's split."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from tests.data.test_data import write_image_folder
from tinytune.data import get_dataset
from tinytune.errors import ConfigError
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search.execution.node_files import Shipper, _materialise, _tar_folder


class Store:
    """A stand-in object store: put returns a key, get gives the bytes back."""

    def __init__(self) -> None:
        self.objects: dict[int, bytes] = {}

    def put(self, data: bytes) -> int:
        self.objects[len(self.objects)] = data
        return len(self.objects) - 1

    def get(self, ref: int) -> bytes:
        return self.objects[ref]


def _task(checkpoint: Path | None, dataset: str, candidate: str | None = None) -> FinetuneTask:
    from tinytune.spaces import get_supernet, make_preset

    if candidate is None:
        candidate = make_preset("last", get_supernet("ofa-proxyless-w0.35")).to_json()
    checkpoint_path = None if checkpoint is None else str(checkpoint)
    return FinetuneTask(candidate, checkpoint_path, dataset, 0, FinetuneConfig())


def test_checkpoint_and_folder_arrive_intact_and_are_stored_once(tmp_path: Path) -> None:
    checkpoint = tmp_path / "driver" / "weights.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(bytes(range(256)) * 100)
    folder = write_image_folder(tmp_path / "driver" / "images")
    store = Store()
    shipper = Shipper(store.put)
    packed = [shipper.pack(_task(checkpoint, f"imagefolder:{folder}")) for _ in range(3)]
    assert len(store.objects) == 2  # one checkpoint, one folder, for all three tasks
    item = packed[0]["checkpoint"]
    assert item["sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()

    cache = tmp_path / "worker-cache"
    local = _materialise(item, store.get, cache)
    assert (
        local.parent.parent == cache / "shipped" and local.read_bytes() == checkpoint.read_bytes()
    )
    assert _materialise(item, lambda ref: pytest.fail("read again"), cache) == local  # once
    copy = _materialise(packed[0]["dataset"], store.get, cache)
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    assert sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file()) == files
    for name in files:
        assert (copy / name).read_bytes() == (folder / name).read_bytes()


def test_the_folder_copy_gives_the_same_split(tmp_path: Path) -> None:
    folder = write_image_folder(tmp_path / "images", images_per_class=8)
    (tmp_path / "w.pt").write_bytes(b"w")
    store = Store()
    item = Shipper(store.put).pack(_task(tmp_path / "w.pt", f"imagefolder:{folder}"))
    copy = _materialise(item["dataset"], store.get, tmp_path / "cache")
    here, there = (get_dataset(f"imagefolder:{p}", seed=3).load(16) for p in (folder, copy))
    for part in ("train", "val", "test"):
        a, b = getattr(here, part), getattr(there, part)
        assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)


def test_the_tar_of_a_folder_is_the_same_bytes_each_time(tmp_path: Path) -> None:
    folder = write_image_folder(tmp_path / "images")
    assert _tar_folder(folder) == _tar_folder(folder)


def test_a_corrupt_copy_is_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "w.pt"
    checkpoint.write_bytes(b"weights")
    store = Store()
    item = Shipper(store.put).pack(_task(checkpoint, "digits"))["checkpoint"]
    store.objects[item["ref"]] = b"weightz"
    with pytest.raises(ConfigError, match="does not match its SHA-256"):
        _materialise(item, store.get, tmp_path / "cache")


def test_missing_files_are_named(tmp_path: Path) -> None:
    shipper = Shipper(Store().put)
    with pytest.raises(ConfigError, match="is not a file"):
        shipper.pack(_task(tmp_path / "nowhere.pt", "digits"))
    (tmp_path / "w.pt").write_bytes(b"w")
    with pytest.raises(ConfigError, match="is not a directory"):
        shipper.pack(_task(tmp_path / "w.pt", f"imagefolder:{tmp_path / 'none'}"))
    assert shipper.pack(_task(None, "digits")) == {}  # nothing to ship


def test_a_zoo_networks_config_reaches_another_node_as_its_weights_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate of a model-zoo network names its JSON config by the driver's path: the
    config travels with the weights, and the worker's task names its own copy, which reads as
    the same network."""
    from tests.models.test_config_networks import write_zoo_network
    from tinytune.search.execution.node_files import run_shipped
    from tinytune.spaces import Candidate, get_supernet, make_preset

    config, weights = write_zoo_network(tmp_path / "driver")
    candidate = make_preset("mcunetv3", get_supernet(str(config)))
    task = _task(weights, "digits", candidate.to_json())
    store = Store()
    packed = Shipper(store.put).pack(task)
    assert set(packed) == {"checkpoint", "config"}
    seen: list[FinetuneTask] = []
    node = tmp_path / "other-node"
    monkeypatch.setenv("TINYTUNE_CACHE", str(node))

    def run(t: FinetuneTask) -> EvaluationResult:
        seen.append(t)
        return EvaluationResult("ok")

    run_shipped(run, task, packed, store.get)
    (local,) = seen
    there = Path(Candidate.from_json(local.candidate).supernet)
    assert there.parent.parent == node / "shipped" and there.read_bytes() == config.read_bytes()
    assert Path(str(local.checkpoint)).read_bytes() == weights.read_bytes()
    here_spec, there_spec = get_supernet(str(config)), get_supernet(str(there))
    assert (here_spec.blocks, here_spec.resolutions) == (there_spec.blocks, there_spec.resolutions)
    elsewhere = candidate.to_json().replace(str(config), str(tmp_path / "no.json"))
    missing = task.replace(candidate=elsewhere)
    with pytest.raises(ConfigError, match=r"the network config '.*no\.json' is not a file"):
        Shipper(store.put).pack(missing)
