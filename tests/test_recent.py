from __future__ import annotations

import pickle

import pytest

from tinytune.recent import Recent


def test_a_value_is_made_once_and_the_oldest_key_goes_first() -> None:
    made: list[str] = []

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    memo = Recent[str, str](2)
    assert memo.get("a", lambda: make("a")) == "A"
    assert memo.get("b", lambda: make("b")) == "B"
    assert memo.get("a", lambda: make("a")) == "A" and made == ["a", "b"]
    # asking again does not renew a key: "a" was kept first, so it goes first
    assert memo.get("c", lambda: make("c")) == "C"
    assert len(memo) == 2 and "a" not in memo and "b" in memo and "c" in memo
    assert memo.get("a", lambda: make("a")) == "A" and made == ["a", "b", "c", "a"]
    assert "b" not in memo


def test_nothing_is_kept_where_making_the_value_raises() -> None:
    memo = Recent[int, int](4)

    def fail() -> int:
        raise RuntimeError("no value")

    with pytest.raises(RuntimeError, match="no value"):
        memo.get(1, fail)
    assert 1 not in memo and len(memo) == 0
    assert memo.get(1, lambda: 7) == 7


def test_a_memo_pickles_with_what_it_keeps() -> None:
    memo = Recent[str, list[int]](3)
    memo.get("x", lambda: [1, 2])
    again = pickle.loads(pickle.dumps(memo))
    assert again.get("x", lambda: [0]) == [1, 2] and again.size == 3


@pytest.mark.parametrize("size", [0, -1, True, 2.0, "2"])
def test_a_memo_keeps_at_least_one_value(size: object) -> None:
    with pytest.raises(ValueError, match="at least 1 value"):
        Recent(size)  # type: ignore[arg-type]
