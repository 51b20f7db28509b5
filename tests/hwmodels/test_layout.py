"""The arena layout: no two buffers alive at once share a byte; the arena meets the peak."""

from __future__ import annotations

import random

import pytest
import torch

from tinytune.hwmodels import Buffer, plan_layout, plan_memory
from tinytune.hwmodels.layout import _first_fit
from tinytune.ir import trace
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.recent import Recent
from tinytune.spaces import (
    PRESET_NAMES,
    SupernetSpec,
    family_supernets,
    get_supernet,
    make_preset,
)


def _check(buffers: list[Buffer] | tuple[Buffer, ...], alignment: int = 4) -> int:
    layout = plan_layout(buffers, alignment)
    for i, a in enumerate(buffers):
        if a.nbytes:
            assert layout.offsets[i] % alignment == 0
            assert layout.offsets[i] + a.nbytes <= layout.arena_bytes
        for j in range(i):
            b = buffers[j]
            if not (a.nbytes and b.nbytes and a.start <= b.end and b.start <= a.end):
                continue
            a0, b0 = layout.offsets[i], layout.offsets[j]
            assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, (a, b)
    return layout.arena_bytes


def _first_fit_by_hand(buffers: list[Buffer], order: list[int], alignment: int) -> list[int]:
    """First fit as written out in the module's docstring, one buffer and one gap at a time."""
    offsets = [0] * len(buffers)
    placed: list[int] = []
    for i in order:
        b = buffers[i]
        if b.nbytes == 0:
            continue
        busy = sorted(
            (offsets[j], offsets[j] + buffers[j].nbytes)
            for j in placed
            if buffers[j].start <= b.end and b.start <= buffers[j].end
        )
        offset = 0
        for lo, hi in busy:
            if offset + b.nbytes <= lo:
                break
            offset = max(offset, -(-hi // alignment) * alignment)
        offsets[i] = offset
        placed.append(i)
    return offsets


@pytest.mark.parametrize("seed", range(40))
def test_first_fit_places_as_the_loop_by_hand(seed: int) -> None:
    """The vectorised first fit against the plain loop, on random lifetimes and sizes with
    ties, empty buffers and odd sizes: the same offset for every buffer."""
    rng = random.Random(seed)
    n, steps = rng.randint(1, 120), rng.randint(1, 60)
    buffers = []
    for k in range(n):
        start = rng.randrange(steps)
        nbytes = rng.choice([0, 1, 3, 64, 100, 100, rng.randint(1, 5000)])
        buffers.append(Buffer(f"b{k}", "x", nbytes, start, rng.randint(start, steps)))
    order = list(range(n))
    rng.shuffle(order)
    alignment = rng.choice([1, 2, 4, 8, 16])
    got = _first_fit(buffers, order, alignment)
    assert list(got.offsets) == _first_fit_by_hand(buffers, order, alignment)
    assert got.arena_bytes == max(
        (o + b.nbytes for o, b in zip(got.offsets, buffers, strict=True) if b.nbytes), default=0
    )


@pytest.mark.parametrize(
    ("nbytes", "words"),
    [
        (-4, "has -4 bytes; a size is an int >= 0"),
        (2.5, "has 2.5 bytes; a size is an int >= 0"),
        (True, "has True bytes; a size is an int >= 0"),
        (2**62, "do not fit the layout's 64-bit offsets"),
    ],
)
def test_sizes_the_layout_cannot_place_are_refused(nbytes: object, words: str) -> None:
    bufs = [Buffer("a", "x", 100, 0, 1), Buffer("b", "x", nbytes, 0, 1)]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=words):
        plan_layout(bufs)


def test_numpy_sizes_are_placed_as_ints() -> None:
    import numpy as np

    bufs = [Buffer("a", "x", 100, 0, 1), Buffer("b", "x", np.int64(60), 1, 2)]  # type: ignore[arg-type]
    assert plan_layout(bufs).arena_bytes == 160


def test_hand_made_lifetimes() -> None:
    # a [0,1] 100 B, b [1,2] 60 B, c [2,3] 100 B: a and c can share; b must sit beside both
    bufs = [Buffer("a", "x", 100, 0, 1), Buffer("b", "x", 60, 1, 2), Buffer("c", "x", 100, 2, 3)]
    assert _check(bufs) == 160


def test_disjoint_lifetimes_reuse_the_same_bytes() -> None:
    bufs = [Buffer(f"t{i}", "x", 64, i, i) for i in range(10)]
    assert _check(bufs) == 64


def test_an_order_that_pairs_the_chain_reaches_the_peak() -> None:
    """The first blocks of a classifier-only step at 40 px: a static 17,960 B (the float32
    classifier) and a chain of activations, each alive from its writer to its reader. Live
    bytes peak at 30,760 (steps 1 and 3). Largest first puts t4 (9,600) beside the static
    block, t1 and t2 above it, and t3 (alive with both t2 and t4) finds no gap under them:
    33,960. Above the static block, t3 + t4 = 12,800 must fill the space exactly, with t2
    beside t3 and t1 beside t2: the tried orders find such a layout, at the peak."""
    bufs = [
        Buffer("classifier", "weights", 17_960, 0, 9),
        Buffer("t0", "activation", 4_800, 0, 0),
        Buffer("t1", "activation", 6_400, 0, 1),
        Buffer("t2", "activation", 6_400, 1, 2),
        Buffer("t3", "activation", 3_200, 2, 3),
        Buffer("t4", "activation", 9_600, 3, 4),
        Buffer("t5", "activation", 2_400, 4, 5),
    ]
    assert plan_layout(bufs, tries=0).arena_bytes == 33_960
    assert _check(bufs) == 30_760
    assert plan_layout(bufs) == plan_layout(bufs)  # the same every time: the bundle's too


def test_a_layout_planned_before_is_kept_and_one_of_other_sizes_or_lives_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tinytune.hwmodels.layout as layout_module

    searched: list[int] = []

    def counted(buffers: list[Buffer], alignment: int, tries: int) -> object:
        searched.append(len(buffers))
        return plan(buffers, alignment, tries)

    plan = layout_module._plan
    monkeypatch.setattr(layout_module, "_plan", counted)
    monkeypatch.setattr(layout_module, "_kept", Recent(layout_module.KEPT_LAYOUTS))
    bufs = [Buffer("a", "activation", 4_800, 0, 1), Buffer("b", "activation", 6_400, 1, 2)]
    first = plan_layout(bufs)
    # the same sizes and lives under other names: the same layout, not searched again
    renamed = [Buffer(f"x{i}", "saved", b.nbytes, b.start, b.end) for i, b in enumerate(bufs)]
    assert plan_layout(renamed) == first == plan(bufs, 4, 32) and len(searched) == 1
    # another size, another life, another alignment or other tries: searched anew
    plan_layout([bufs[0], Buffer("b", "activation", 6_404, 1, 2)])
    plan_layout([bufs[0], Buffer("b", "activation", 6_400, 2, 2)])
    plan_layout(bufs, alignment=8)
    plan_layout(bufs, tries=0)
    assert len(searched) == 5
    # bounded: the oldest goes first
    monkeypatch.setattr(layout_module, "_kept", Recent(2))
    plan_layout(bufs)
    plan_layout(bufs, tries=0)
    assert len(searched) == 7
    plan_layout([Buffer("c", "activation", 8, 0, 0)])  # drops the first of the two
    assert len(layout_module._kept) == 2 and len(searched) == 8
    plan_layout(bufs, tries=0)
    plan_layout(bufs)
    assert len(searched) == 9


def test_alignment_pads_offsets() -> None:
    bufs = [Buffer("a", "x", 3, 0, 5), Buffer("b", "x", 5, 0, 5)]
    greedy = plan_layout(bufs, alignment=4, tries=0)  # the larger first, the smaller above it
    assert greedy.offsets == (8, 0) and greedy.arena_bytes == 11
    layout = plan_layout(bufs, alignment=4)  # a tried order puts the 3 bytes first
    assert layout.offsets == (0, 4) and layout.arena_bytes == 9


@pytest.mark.parametrize("spec", family_supernets(0.35), ids=lambda spec: spec.name)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_real_networks_fit_in_an_arena_close_to_the_peak(spec: SupernetSpec, preset: str) -> None:
    candidate = make_preset(preset, spec)
    r = candidate.subnet.resolution
    net = build_candidate(candidate, build_ofa_supernet(spec, 40), 10, [torch.randn(4, 3, r, r)])
    report = plan_memory(trace(net, torch.zeros(1, 3, r, r)))
    arena = _check(report.buffers)
    assert arena == report.arena_bytes
    assert report.peak_bytes <= arena <= report.peak_bytes * 1.007  # as the README says


def test_gradient_accumulation_holds_parameter_gradients() -> None:
    from tinytune.errors import ConfigError

    spec = get_supernet("ofa-proxyless-w0.35")
    candidate = make_preset("mcunetv3", spec)
    r = candidate.subnet.resolution
    net = build_candidate(candidate, build_ofa_supernet(spec, 40), 10, [torch.randn(4, 3, r, r)])
    graph = trace(net, torch.zeros(1, 3, r, r))
    once = plan_memory(graph, update="reordered")
    held = plan_memory(graph, update="deferred")
    accumulated = plan_memory(graph, accumulate=4)
    grads = sum(b.nbytes for b in once.buffers if b.category == "param_gradient")
    assert once.peak_bytes <= held.peak_bytes <= accumulated.peak_bytes
    assert accumulated.breakdown["param_gradient"] == grads  # all of them, all the time
    with pytest.raises(ConfigError):
        plan_memory(graph, accumulate=0)
