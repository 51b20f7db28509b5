"""The README's Python example, run as a user would: in an empty folder, with ``import
tinytune`` only."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text()
    marker = text.index("<!-- readme-example")
    match = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.slow
def test_the_readme_example_runs(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinytune.models import PretrainRecipe, checkpoint_path
    from tinytune.spaces import get_supernet

    cache = tmp_path / "cache"
    monkeypatch.setenv("TINYTUNE_CACHE", str(cache))
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    # a checkpoint where the default one is looked for (the tiny one, so no pre-training runs
    # here; where the package ships the default checkpoint, that one is used instead)
    target = checkpoint_path(get_supernet("ofa-proxyless-w0.35"), PretrainRecipe())
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_checkpoint, target)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _example()],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3
    assert lines[-1] == "True"  # the stored study shows the same front
    assert "bytes of arena" in lines[-2]
    assert (work / "bundle" / "manifest.json").is_file()
    assert (work / "ex.db").is_file()
