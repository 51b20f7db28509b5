"""``tinytune dashboard`` serves optuna-dashboard on 127.0.0.1 for the database it is given; the
study page of a real search renders its Pareto front in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path

import optuna
import pytest

from tinytune.cli.main import main

CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)
WINDOW = (1400, 1000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@contextmanager
def serving_dashboard(storage: str, timeout: float = 60) -> Iterator[str]:
    """``tinytune dashboard`` in a subprocess on a free port; yields its base URL once its API
    answers, and stops it afterwards."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinytune.cli.main", "dashboard", "--storage", storage, "--port",
         str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                _get_json(f"{base}/api/studies")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    _, err = proc.communicate()
                    pytest.fail(f"the dashboard did not answer on {base}: {err.decode()[-2000:]}")
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_lists_the_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    study = optuna.create_study(
        study_name="front", storage=url, directions=["maximize", "minimize"]
    )
    study.optimize(lambda t: (t.suggest_float("a", 0, 1), t.suggest_float("m", 0, 1)), 4)
    with serving_dashboard(url) as base:
        body = _get_json(f"{base}/api/studies")
    assert [s["study_name"] for s in body["study_summaries"]] == ["front"]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)]
)
def test_a_database_without_a_study_is_one_line_and_exit_2(
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'empty.db'}"
        (tmp_path / "empty.db").touch()
    else:
        url = request.getfixturevalue("postgres_url")
    code = main(["dashboard", "--storage", url, "--port", str(_free_port())])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: no study in ")
    assert "Traceback" not in err


@pytest.mark.parametrize("url", ["mysql://u@h/db", "foo://x"])
def test_a_url_without_a_driver_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dashboard", "--storage", url, "--port", str(_free_port())])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"tinytune: error: cannot use database URL '{url}'")


def test_another_programs_sqlite_file_is_read_as_it_is(
    another_programs_sqlite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    path = another_programs_sqlite
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    code = main(["dashboard", "--storage", f"sqlite:///{path}", "--port", str(_free_port())])
    assert code == 2 and "no study in" in capsys.readouterr().err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]  # no -wal beside it


def test_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    optuna.create_study(study_name="front", storage=url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["dashboard", "--storage", url, "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"cannot serve on 127.0.0.1:{port}" in err


class _ParetoPlot(HTMLParser):
    """Collects the page's text and the plotted points inside optuna-dashboard's Pareto front
    plot (the element ``#graph-pareto-front``, drawn by plotly.js as SVG ``path.point``)."""

    PLOT_ID = "graph-pareto-front"

    def __init__(self) -> None:
        super().__init__()
        self.found = False
        self.points = 0
        self.text: list[str] = []
        self._depth = 0  # open elements inside the plot; 0 when outside

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self._depth:
            self._depth += 1
            if tag == "path" and "point" in (a.get("class") or "").split():
                self.points += 1
        elif a.get("id") == self.PLOT_ID:
            self.found = True
            self._depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _chromium(args: list[str], profile: Path) -> str:
    """Headless Chromium on one page; returns its stdout (the DOM with ``--dump-dom``)."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", f"--user-data-dir={profile}",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=20000", *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TINYTUNE_ARTEFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
)
def test_the_study_page_renders_the_pareto_front_in_headless_chromium(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    url = f"sqlite:///{tmp_path / 'search.db'}"
    argv = ["search", "--inline", "--storage", url, "--study", "dash-front", "--trials", "2"]
    assert main([*argv, "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2"]) == 0
    capsys.readouterr()
    study = optuna.load_study(study_name="dash-front", storage=url)
    measured = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(measured) == 3  # the reference beside the budget of 2

    with serving_dashboard(url) as base:
        summaries = _get_json(f"{base}/api/studies")["study_summaries"]
        (study_id,) = [s["study_id"] for s in summaries if s["study_name"] == "dash-front"]
        page = f"{base}/dashboard/studies/{study_id}"
        dom = _chromium(["--dump-dom", page], tmp_path / "profile")
        screenshot = _artefacts(tmp_path) / f"dashboard-study-{study_id}.png"
        screenshot.unlink(missing_ok=True)
        _chromium([f"--screenshot={screenshot}", page], tmp_path / "profile")

    parsed = _ParetoPlot()
    parsed.feed(dom)
    text = " ".join(parsed.text)
    assert f"dash-front (id={study_id})" in text  # rendered by the app, not in the HTML shell
    assert "Pareto Front" in text
    assert parsed.found, "no #graph-pareto-front element in the rendered page"
    assert parsed.points == len(measured)  # one marker per measured trial
    with Image.open(screenshot) as image:
        assert image.format == "PNG" and image.size == WINDOW
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50  # not a blank page
