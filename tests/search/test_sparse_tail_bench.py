"""bench/sparse_tail.py's candidates: the built-in schemes sit on the last three blocks of
whichever reference sub-network, schemes given by name are parsed exactly, and a scheme that
does not fit the sub-network is refused with a message naming it."""

from __future__ import annotations

from types import ModuleType

import pytest

from tinytune.spaces.candidate import UpdateScheme

from .benches import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("sparse_tail")


def test_parse_scheme(bench: ModuleType) -> None:
    assert bench._parse_scheme("b34 48@0.5 45@0.25") == (34, ((45, 0.25), (48, 0.5)))
    assert bench._parse_scheme("b10") == (10, ())
    for bad in ("", "34", "bx", "b10 45", "b10 x@0.5"):
        with pytest.raises(ValueError, match="scheme"):
            bench._parse_scheme(bad)


def test_builtin_schemes_on_the_default_subnetwork(bench: ModuleType) -> None:
    candidates = bench.build_candidates()
    assert list(candidates) == [
        "full",
        "last",
        "bias-only",
        "mcunetv3",
        "b2",
        "b6",
        "b10",
        "b16",
        "b24",
        "b4 33@0.25",
        "b10 33@0.25",
        "b10 27@0.125",
        "b10 27@0.25",
        "b10 27@0.5",
        "b10 27@1",
        "b12 27@0.5 30@0.125",
        "b12 27@1 30@0.125 33@0.25",
    ]
    assert candidates["b12 27@1 30@0.125 33@0.25"].update == UpdateScheme(
        12, ((27, 1.0), (30, 0.125), (33, 0.25))
    )
    assert {c.subnet.resolution for c in candidates.values()} == {40}
    kinds = candidates["last"].conv_kinds
    assert [kinds[i] for i in (27, 30, 33)] == ["pw1"] * 3
    assert [i for i, kind in enumerate(kinds) if kind == "pw1"][-3:] == [27, 30, 33]


def test_builtin_schemes_follow_the_largest_subnetwork(bench: ModuleType) -> None:
    candidates = bench.build_candidates("max", 32)
    kinds = candidates["last"].conv_kinds
    last_three = [i for i, kind in enumerate(kinds) if kind == "pw1"][-3:]
    assert last_three == [57, 60, 63]
    assert candidates["b10 57@1"].update == UpdateScheme(10, ((57, 1.0),))
    assert candidates["b4 63@0.25"].update == UpdateScheme(4, ((63, 0.25),))
    assert {c.subnet.resolution for c in candidates.values()} == {32}
    given = bench.build_candidates("max", 40, ["b34 45@0.5 48@0.5 51@0.5"])
    assert list(given)[4:] == ["b34 45@0.5 48@0.5 51@0.5"]
    assert given["b34 45@0.5 48@0.5 51@0.5"].update == UpdateScheme(
        34, ((45, 0.5), (48, 0.5), (51, 0.5))
    )


def test_a_scheme_that_does_not_fit_is_refused(bench: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"scheme 'b10 20@0.5': weight-updated layer 20 lies"):
        bench.build_candidates("min", 40, ["b10 20@0.5"])
    with pytest.raises(ValueError, match=r"scheme 'b99': bias_last_k 99 exceeds the 37"):
        bench.build_candidates("min", 40, ["b99"])
    with pytest.raises(ValueError, match=r"scheme 'b10 33@0.3': weight ratio 0.3"):
        bench.build_candidates("min", 40, ["b10 33@0.3"])
    with pytest.raises(ValueError, match=r"resolution 64: allowed \[32, 40, 48\]"):
        bench.build_candidates("min", 64)
    with pytest.raises(SystemExit):
        bench.main(["--schemes", "b10 20@0.5"])


def test_each_schemes_rate_and_the_scheme_are_chosen_on_validation(bench: ModuleType) -> None:
    """The rate and length as the search's grid chooses a rate (the best validation accuracy;
    on a tie the fewer epochs, then the smaller rate), and among the schemes at least ``ratio``
    times smaller than full fine-tuning the best on validation (the smaller arena on a tie);
    test accuracy never chooses."""
    rates = [(0.8, 8, 0.95, 0.99), (1.6, 8, 0.97, 0.90), (3.2, 8, 0.97, 0.91)]
    assert bench.chosen_setting(rates) == (1.6, 8, 0.97, 0.90)
    lengths = [(3.2, 24, 0.97, 0.99), (1.6, 24, 0.96, 0.99), (3.2, 8, 0.97, 0.90)]
    assert bench.chosen_setting(lengths) == (3.2, 8, 0.97, 0.90)  # the tie: fewer epochs
    assert bench.chosen_setting([*lengths, (0.8, 24, 0.98, 0.80)]) == (0.8, 24, 0.98, 0.80)
    rows = [
        ("a", 100, 0.96, 0.99, 1.6, 8),  # 10x: the most accurate on test, not on validation
        ("b", 80, 0.97, 0.95, 3.2, 24),  # 12.5x
        ("c", 90, 0.97, 0.96, 0.8, 8),  # 11.1x: ties b on validation, larger arena
        ("d", 200, 0.99, 0.99, 1.6, 8),  # 5x: too large
    ]
    assert bench.choose_at(rows, 1000, 10) == ("b", 80, 0.97, 0.95, 3.2, 24)
    assert bench.choose_at(rows, 1000, 20) is None
