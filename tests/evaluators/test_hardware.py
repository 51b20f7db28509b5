"""The hardware evaluator's patch schedules: chosen within the SRAM budget, fixed, or none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tinytune.errors import ConfigError
from tinytune.evaluators import FinetuneTask
from tinytune.evaluators.hardware import (
    SEARCHED_PATCHES,
    HardwareConfig,
    HardwareEvaluator,
    parse_patches,
)
from tinytune.hwmodels import get_device
from tinytune.spaces import Schedule, SubnetConfig, default_subnet, get_supernet, make_preset

KB = 1024
LITE0 = get_supernet("efficientnet-lite0")


def _lite0(scheme: str, resolution: int, stages: int = 3):
    """A preset on EfficientNet-Lite0 cut after block 7 (three stages)."""
    whole = default_subnet(LITE0, "max").stages
    return make_preset(scheme, LITE0, SubnetConfig(resolution, whole[:stages]))


def _evaluator(patches: str = "auto", budget: int | None = 256 * KB) -> HardwareEvaluator:
    config = HardwareConfig(patches=patches)
    return HardwareEvaluator(LITE0, 10, config, get_device("stm32f746"), budget)


@pytest.mark.parametrize(("scheme", "resolution"), [("mcunetv3", 128), ("last", 160)])
def test_auto_fits_a_big_image_into_256_kb(scheme: str, resolution: int) -> None:
    """The sparse update at 128 px and the classifier alone at 160 px need 2–3× the budget on
    whole images; patch by patch they fit, for more predicted time."""
    hw = _evaluator()
    whole = _lite0(scheme, resolution)
    scheduled = hw.schedule(whole)
    assert scheduled.schedule.patched and scheduled.training == whole
    before, after = hw(whole), hw(scheduled)
    assert before.sram_bytes > 256 * KB >= after.sram_bytes
    assert after.latency_s > before.latency_s


def test_auto_chooses_the_fastest_schedule_that_fits() -> None:
    hw = _evaluator()
    whole = _lite0("mcunetv3", 128)
    chosen = hw(hw.schedule(whole))
    for blocks in range(1, 5):
        for n in range(2, 7):
            try:
                cost = hw(replace(whole, schedule=Schedule(n, blocks)))
            except ConfigError:
                continue
            if cost.sram_bytes <= 256 * KB:  # arena, static data and stack
                assert cost.latency_s >= chosen.latency_s


def test_whole_images_where_they_fit_or_when_asked() -> None:
    small = _lite0("mcunetv3", 64)
    assert _evaluator().schedule(small) == small  # 160 KB on whole images
    big = _lite0("mcunetv3", 128)
    assert _evaluator("none").schedule(big) == big
    assert _evaluator(budget=None).schedule(big) == big
    fp32 = HardwareConfig(precision="fp32")
    hw = HardwareEvaluator(LITE0, 10, fp32, get_device("stm32f746"), 256 * KB)
    assert hw.schedule(big) == big  # PyTorch's engine runs whole images
    with pytest.raises(ConfigError, match="int8 only"):
        HardwareEvaluator(LITE0, 10, replace(fp32, patches="2:2"), None, None).schedule(big)


def test_a_search_may_ask_for_patches_only_where_auto_schedules_int8() -> None:
    assert _evaluator().patch_choices == SEARCHED_PATCHES == (1, 2, 3, 4)
    assert _evaluator(budget=None).patch_choices == SEARCHED_PATCHES
    assert _evaluator("none").patch_choices == () and _evaluator("2:2").patch_choices == ()
    fp32 = HardwareEvaluator(LITE0, 10, HardwareConfig(precision="fp32"), None, 256 * KB)
    assert fp32.patch_choices == ()


@pytest.mark.parametrize("scheme", ["last", "mcunetv3"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_candidate_asking_for_patches_gets_the_blocks_of_least_arena(
    scheme: str, n: int
) -> None:
    """Asked for N × N patches (a search's proposal), a candidate that fits on whole images is
    patched all the same, over the number of blocks that holds the least arena: every other
    number is tried here."""
    hw = _evaluator()
    whole = _lite0(scheme, 48)
    scheduled = hw.schedule(replace(whole, schedule=Schedule(n, 0)))
    assert scheduled.training == whole and scheduled.schedule.patches == n
    chosen = hw(scheduled)
    assert chosen.arena_bytes < hw(whole).arena_bytes  # 48 px fits whole; patches hold less
    for blocks in range(0, whole.subnet.n_blocks + 1):
        try:
            cost = hw(replace(whole, schedule=Schedule(n, blocks)))
        except ConfigError:
            continue
        assert (cost.arena_bytes, cost.latency_s) >= (chosen.arena_bytes, chosen.latency_s)
    # where patches are not the search's to choose, the request is scheduled as any other
    assert _evaluator("none").schedule(replace(whole, schedule=Schedule(n, 0))) == whole


def test_a_candidate_priced_again_is_not_planned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search prices a candidate when it is drawn, checked, proposed and stored: the schedule
    and the cost are planned once, and what is kept is what a new evaluator computes."""
    import tinytune.evaluators.hardware as module

    planned: list[int] = []
    plan = module.plan_memory
    monkeypatch.setattr(module, "plan_memory", lambda *a, **k: planned.append(1) or plan(*a, **k))
    hw = _evaluator()
    big = _lite0("mcunetv3", 128)  # scheduled in patches by auto
    asked = replace(_lite0("last", 48), schedule=Schedule(2, 0))  # asks for 2 x 2
    first = [hw(hw.schedule(c)) for c in (big, asked)]
    once = len(planned)
    assert once > 4
    assert [hw(hw.schedule(c)) for c in (big, asked)] == first
    assert len(planned) == once
    fresh = _evaluator()
    assert [fresh(fresh.schedule(c)) for c in (big, asked)] == first


@pytest.mark.parametrize(
    ("scheme", "resolution", "stages"),
    [("mcunetv3", 96, 3), ("mcunetv3", 160, 4), ("last", 128, 3), ("bias-only", 112, 4)],
)
@pytest.mark.parametrize("budget", [128, 256, 384])
def test_each_schedule_is_the_one_its_rule_picks_among_every_schedule_priced_in_full(
    scheme: str, resolution: int, stages: int, budget: int
) -> None:
    """Against every patch schedule priced in full (memory and latency): ``auto`` takes whole
    images where they fit, else the fastest schedule that fits, else the least arena; a
    request for N × N patches gets the blocks of least arena, then least latency. The evaluator
    prices fewer schedules (the latency only where it decides; over the same blocks no count
    above the first that fits, which is no faster) and must pick the same: the 4 × 4 patches
    over four blocks of MCUNetV3's update at 96 px hold 142,136 bytes, 5 × 5 as many, 6 × 6
    133,000."""
    whole = _lite0(scheme, resolution, stages)
    hw, full = _evaluator(budget=budget * KB), _evaluator(budget=None)
    costs = {}
    for blocks in range(whole.subnet.n_blocks + 1):
        for n in range(1, 9):
            try:
                costs[n, blocks] = full(replace(whole, schedule=Schedule(n, blocks)))
            except ConfigError:
                continue
    chosen = hw.schedule(whole)
    if costs[1, 0].sram_bytes <= budget * KB:
        assert chosen == whole
    else:
        fitting = [c for c in costs.values() if c.sram_bytes <= budget * KB]
        mine = costs[chosen.schedule.patches, chosen.schedule.blocks]
        if fitting:
            assert mine.sram_bytes <= budget * KB
            assert mine.latency_s == min(c.latency_s for c in fitting)
        else:  # the least arena of all (whole images where no schedule holds less)
            assert mine.arena_bytes == min(c.arena_bytes for c in costs.values())
    for blocks in range(whole.subnet.n_blocks + 1):  # what lets auto stop at the first fit
        times = [c.latency_s for (n, b), c in sorted(costs.items()) if b == blocks and n > 1]
        assert times == sorted(times)
    for n in (2, 3, 4):
        asked = hw.schedule(replace(whole, schedule=Schedule(n, 0)))
        same_n = [c for (m, _), c in costs.items() if m == n]
        if not same_n:  # a count this network cannot run: scheduled as any other
            assert asked == chosen
            continue
        mine = costs[n, asked.schedule.blocks]
        assert (mine.arena_bytes, mine.latency_s) == min(
            (c.arena_bytes, c.latency_s) for c in same_n
        )


def test_a_fixed_schedule_is_applied_or_refused_in_one_line() -> None:
    big = _lite0("mcunetv3", 128)
    assert _evaluator("3:3").schedule(big).schedule == Schedule(3, 3)
    with pytest.raises(
        ConfigError, match=r"first layer that trains anything; blocks_4_pw1 \(block 4, stage 5\)"
    ):
        _evaluator("2:7").schedule(big)
    with pytest.raises(ConfigError, match="8 patches per side need a stage output"):
        _evaluator("8:4").schedule(_lite0("mcunetv3", 48))
    assert parse_patches("auto") is None and parse_patches("4:2") == Schedule(4, 2)
    with pytest.raises(ConfigError, match="auto, none or N:B"):
        parse_patches("four")


def test_a_patch_schedule_changes_no_accuracy(tiny_checkpoint) -> None:
    """Patches are a matter of device memory and time: the fine-tune of a patched candidate
    is its whole-image twin's (the same task, the same measured accuracies)."""
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.search.config.search_config import SearchConfig
    from tinytune.search.execution.worker_tasks import finetune_task

    spec = get_supernet("ofa-proxyless-w0.35")
    whole = make_preset("mcunetv3", spec, default_subnet(spec))
    patched = replace(whole, schedule=Schedule(2, 2))
    config = SearchConfig(checkpoint=str(tiny_checkpoint))
    assert finetune_task(config, 1, patched, 0.1) == finetune_task(config, 1, whole, 0.1)
    task = FinetuneTask(
        candidate=whole.to_json(),
        checkpoint=str(tiny_checkpoint),
        dataset="digits",
        data_seed=0,
        finetune=FinetuneConfig(epochs=1, batch_size=64, lr=0.1),
    )
    a = run_evaluation(task.replace(candidate=patched.to_json()))
    b = run_evaluation(task)
    assert a.status == b.status == "ok"
    assert (a.val_accuracy, a.accuracy) == (b.val_accuracy, b.accuracy)


def test_two_by_two_patches_halve_the_classifier_only_arena_at_48_px_for_little_time() -> None:
    """What the search's patch counts buy (docs/search-space.md): at 48 px on Lite0 cut after
    three stages, asking for 2 × 2 patches takes the classifier-only update to at most 55 % of
    its whole-image arena for at most an eighth more predicted time per step."""
    hw = _evaluator()
    whole = _lite0("last", 48)
    patched = hw.schedule(replace(whole, schedule=Schedule(2, 0)))
    before, after = hw(whole), hw(patched)
    assert after.arena_bytes <= 0.55 * before.arena_bytes
    assert before.latency_s < after.latency_s <= 1.125 * before.latency_s


@pytest.mark.parametrize(("scheme", "resolution"), [("mcunetv3", 128), ("bias-only", 64)])
def test_the_latency_alone_is_the_costs_without_planning_memory(
    scheme: str, resolution: int
) -> None:
    hw = _evaluator()
    whole = _lite0(scheme, resolution)
    for candidate in (whole, hw.schedule(whole)):  # on whole images and patch by patch
        assert hw.latency(candidate) == hw(candidate).latency
    latency = hw.latency(whole)
    assert latency is not None and 0 < latency.inference_s < latency.train_step_s
    no_device = HardwareEvaluator(LITE0, 10, HardwareConfig(), None, 256 * KB)
    assert no_device.latency(whole) is None
