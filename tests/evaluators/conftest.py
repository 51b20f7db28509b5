"""The tests here decode image folders too: into the test session's own cache, as tests/data's."""

from tests.data.conftest import _cache_of_the_session  # noqa: F401  (an autouse fixture)
