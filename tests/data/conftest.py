"""The tests here decode image folders: into the test session's own cache, not the user's (a
test that names another cache, e.g. the tiny checkpoint's, keeps it)."""

import pytest


@pytest.fixture(autouse=True)
def _cache_of_the_session(use_session_cache: object) -> None:
    return None
