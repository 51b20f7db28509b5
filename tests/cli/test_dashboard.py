"""``tinytune dashboard`` serves optuna-dashboard on 127.0.0.1 for the database it is given."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_lists_the_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    study = optuna.create_study(
        study_name="front", storage=url, directions=["maximize", "minimize"]
    )
    study.optimize(lambda t: (t.suggest_float("a", 0, 1), t.suggest_float("m", 0, 1)), 4)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinytune.cli.main", "dashboard", "--storage", url, "--port",
         str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        body = None
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/studies", timeout=2
                ) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.3)
        assert body is not None, proc.stderr.read().decode() if proc.poll() is not None else ""
        names = [s["study_name"] for s in body["study_summaries"]]
        assert names == ["front"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
