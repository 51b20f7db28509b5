"""A decoded-image cache of the test session's own, so that image folders decoded here do not
land in the user's cache (a test that names another cache, e.g. the tiny checkpoint's, keeps
it)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _cache_of_the_session(_session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(_session_cache))
