"""The bundle's Makefile compiles each source alone, into a folder of objects per target: in
parallel under ``make -j``, and again only where a source or a header it reads changed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.bundle.support import RUN_ENV, needs, write_test_bundle
from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.quant import quantize


def _make(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["make", "-C", str(folder), *args], capture_output=True, text=True, env=RUN_ENV
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _compiled(dry_run: str) -> list[str]:
    """The sources a ``make -n`` would compile."""
    return sorted(re.findall(r" -c (\S+\.c) -o ", dry_run))


def _later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime + 10, stat.st_mtime + 10))


@pytest.mark.slow
@needs("host")
def test_each_source_is_compiled_alone_and_again_only_when_it_changes(tmp_path: Path) -> None:
    net = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    folder = tmp_path / "b"
    write_test_bundle(folder, net, images(3, seed=1).clamp(-1, 1), images(2, seed=2).clamp(-1, 1))
    makefile = (folder / "Makefile").read_text()
    sources_line = re.search(r"^SOURCES := (.*?)\n\S", makefile, re.M | re.S)
    assert sources_line is not None
    sources = sorted(sources_line[1].replace("\\", " ").split())
    assert _compiled(_make(folder, "-n", "host")) == sources

    assert "smoke test passed" in _make(folder, "-s", "-j2", "run-host")
    objects = folder / "build" / "host" / "obj"
    assert sorted(str(o.relative_to(objects)) for o in objects.rglob("*.o")) == sorted(
        s.replace(".c", ".o") for s in sources
    )
    assert "Nothing to be done" in _make(folder, "host")

    _later(folder / "main.c")
    rebuilt = _make(folder, "-n", "host")
    assert _compiled(rebuilt) == ["main.c"] and "-o build/host/train" in rebuilt
    _later(folder / "kernels" / "tt_int8.h")
    assert _compiled(_make(folder, "-n", "host")) == sources  # every source reads it
