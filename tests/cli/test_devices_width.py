"""``tinytune devices`` at 80 columns: every name that ``--device`` takes, whole, and no cell
cut."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tinytune.hwmodels.registry import device_names


def test_every_device_name_is_whole_at_80_columns(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80"}
    url = f"sqlite:///{tmp_path / 'none.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "tinytune.cli.main", "devices", "--storage", url],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    lines = done.stdout.splitlines()
    body = lines[: next(i for i, line in enumerate(lines) if line.startswith("error:"))]
    assert all(len(line) <= 80 for line in body)
    assert "…" not in "\n".join(body)
    first_words = {line.split()[0] for line in body if line.strip() and "MHz" in line}
    assert first_words == set(device_names())
