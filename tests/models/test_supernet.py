"""Supernet checkpoints: the cache path, atomic saves, safe loading and clear errors; named
pre-training recipes and their schedule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tinytune.data import SourceTask
from tinytune.errors import CLI, ModelError
from tinytune.models import (
    PretrainRecipe,
    cache_dir,
    checkpoint_path,
    load_supernet,
    pretrain_supernet,
    save_supernet,
)
from tinytune.models.supernet import (
    DEFAULT_RECIPE,
    RECIPES,
    StepDraws,
    get_recipe,
    require_weights,
    step_rng,
)
from tinytune.models.supernet.pretraining import _lr_at, _mix
from tinytune.spaces import get_supernet

SPEC = get_supernet("ofa-proxyless-w0.35")


def test_cache_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TINYTUNE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "tinytune"
    recipe = PretrainRecipe(steps=7)
    assert checkpoint_path(SPEC, recipe) != checkpoint_path(SPEC, PretrainRecipe(steps=8))


def test_pretrain_save_load_round_trip(tmp_path: Path) -> None:
    recipe = PretrainRecipe(steps=1, batch_size=4, source_classes=8)
    net = pretrain_supernet(SPEC, recipe, SourceTask(8).batch)
    path = tmp_path / "s.pt"
    save_supernet(net, SPEC, recipe, path)
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]  # no temporary file left
    back = load_supernet(SPEC, path)
    for (k, a), (k2, b) in zip(net.state_dict().items(), back.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)
    again = pretrain_supernet(SPEC, recipe, SourceTask(8).batch)
    assert all(
        torch.equal(a, b)
        for a, b in zip(net.state_dict().values(), again.state_dict().values(), strict=True)
    )  # seeded: the same recipe gives the same weights


def test_bad_checkpoints_give_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"^supernet checkpoint '.+missing.pt' does not exist$"):
        load_supernet(SPEC, tmp_path / "missing.pt")
    require_weights(SPEC, None)  # tinytune's own supernets are pre-trained when none are given
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="cannot read") as info:
        load_supernet(SPEC, junk)
    assert "\n" not in str(info.value)
    other = tmp_path / "other.pt"
    torch.save({"format": "something else"}, other)
    with pytest.raises(ModelError, match="not a tinytune supernet checkpoint"):
        load_supernet(SPEC, other)


def test_published_supernet_needs_its_file(tmp_path: Path) -> None:
    spec = get_supernet("ofa_mbv3_d234_e346_k357_w1.0")
    with pytest.raises(ModelError, match=r"pass the file with weights FILE$") as info:
        load_supernet(spec, tmp_path / "none")
    assert info.value.worded(CLI).endswith("pass the file with --weights FILE")
    assert "ofa_nets/ofa_mbv3_d234_e346_k357_w1.0" in str(info.value)
    assert str(info.value).startswith(f"supernet checkpoint {str(tmp_path / 'none')!r} does not")
    with pytest.raises(
        ModelError, match=r"^supernet ofa_mbv3\S+ needs its published .+ weights FILE$"
    ) as info:
        require_weights(spec, None)
    assert info.value.worded(CLI).endswith(" --weights FILE")
    wrong = tmp_path / "wrong.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}}, wrong)
    with pytest.raises(ModelError, match="does not match"):
        load_supernet(spec, wrong)
    with pytest.raises(ModelError, match="published supernet"):
        pretrain_supernet(spec, PretrainRecipe(steps=1), SourceTask(8).batch)


def test_recipes_by_name() -> None:
    assert get_recipe("quick") == PretrainRecipe()
    assert DEFAULT_RECIPE in RECIPES and get_recipe("formula-cpu").source == "formula"
    with pytest.raises(ModelError, match="allowed: quick, formula-cpu"):
        get_recipe("imagenet")
    with pytest.raises(ModelError, match="mix_prob"):
        PretrainRecipe(mix_prob=1.5)


def test_the_quick_recipe_keeps_its_digest() -> None:
    # fields added later count only where they differ from their defaults, so checkpoints
    # cached under the first version's names are still found
    assert PretrainRecipe().digest == "686bddb202"
    assert PretrainRecipe(mix_prob=0.5).digest != PretrainRecipe().digest


def test_warmup_then_cosine_to_zero() -> None:
    recipe = PretrainRecipe(steps=110, lr=0.2, warmup_steps=10)
    assert _lr_at(recipe, 0) == pytest.approx(0.02)
    assert _lr_at(recipe, 9) == pytest.approx(0.2)
    assert _lr_at(recipe, 10) == pytest.approx(0.2)
    assert _lr_at(recipe, 60) == pytest.approx(0.1)
    assert _lr_at(recipe, 110) == pytest.approx(0.0, abs=1e-12)
    assert _lr_at(PretrainRecipe(steps=4, lr=1.0), 2) == pytest.approx(0.5)  # no warm-up


def test_mixup_and_cutmix_weights_match_the_pixels() -> None:
    import numpy as np

    x = torch.stack([torch.zeros(3, 8, 8), torch.ones(3, 8, 8)])  # (2, 3, 8, 8)
    rng = np.random.default_rng(0)
    for _ in range(20):
        mixed, perm, lam = _mix(x, rng)
        assert 0.0 <= lam <= 1.0
        if perm[0] == 1:  # mixed with the other image: its own share is λ (mixup: per
            # pixel; CutMix: by area)
            own = 1.0 - (mixed[0] - x[0]).abs().mean()
            assert float(own) == pytest.approx(lam, abs=1e-6)


def test_formula_pretraining_runs_and_half_storage_loads(tmp_path: Path) -> None:
    from tinytune.data import get_source_task

    recipe = PretrainRecipe(
        source="formula", source_classes=12, steps=2, batch_size=4, mix_prob=1.0, warmup_steps=1
    )
    calls: list[int] = []
    net = pretrain_supernet(
        SPEC,
        recipe,
        get_source_task("formula", 12, 0, max(SPEC.resolutions)),
        checkpoint=lambda net, step, optimizer: calls.append(step),
        checkpoint_every=1,
    )
    assert calls == [1, 2]
    path = tmp_path / "half.pt"
    save_supernet(net, SPEC, recipe, path, half=True)
    back = load_supernet(SPEC, path)
    for (k, a), b in zip(net.state_dict().items(), back.state_dict().values(), strict=True):
        assert a.dtype == b.dtype, k
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)
        else:
            assert torch.equal(a, b)


def test_pretrain_into_saves_float16_and_leaves_no_partial_file(tmp_path: Path) -> None:
    from tinytune.checkpoints import pretrain_into

    recipe = PretrainRecipe(steps=2, batch_size=4, source_classes=8)
    path = tmp_path / "net.pt"
    pretrain_into(SPEC, recipe, path, checkpoint_every=1, half=True)
    assert [p.name for p in tmp_path.iterdir()] == ["net.pt"]
    state = torch.load(path, weights_only=True)["state_dict"]
    assert {str(v.dtype) for v in state.values() if v.is_floating_point()} == {"torch.float16"}
    assert load_supernet(SPEC, path).classifier.linear.out_features == 8


def test_per_step_draws_give_the_same_weights_with_any_number_of_workers() -> None:
    recipe = PretrainRecipe(
        steps=3, batch_size=4, source_classes=8, mix_prob=0.5, stream="per-step"
    )
    runs = [pretrain_supernet(SPEC, recipe, SourceTask(8).batch, workers=w) for w in (0, 2)]
    assert all(
        torch.equal(a, b)
        for a, b in zip(runs[0].state_dict().values(), runs[1].state_dict().values(), strict=True)
    )
    # a step's batch depends on the step alone, not on what was drawn before it
    draws = StepDraws(SPEC, recipe, SourceTask(8).batch)
    last = draws[2]
    assert draws[2][0] == last[0] and torch.equal(draws[2][1], last[1])
    assert last[0] == step_rng(recipe, 2).choice(SPEC.resolutions) == last[1].shape[-1]


def test_a_stopped_run_goes_on_to_the_weights_of_the_uninterrupted_one(tmp_path: Path) -> None:
    """A ``per-step`` run stopped after its partial save at step 2 goes on from it when
    started again (weights, momentum, steps done) and ends with the very weights of the run
    that was never stopped; a partial run of another recipe is refused, ``fresh`` starts over."""
    from tinytune.checkpoints import pretrain_into

    recipe = PretrainRecipe(
        steps=4, batch_size=4, source_classes=8, warmup_steps=1, mix_prob=0.5, stream="per-step"
    )
    whole = pretrain_into(SPEC, recipe, tmp_path / "whole" / "net.pt")

    class Stop(Exception):
        pass

    def stop_at_3(step: int, steps: int, loss: float) -> None:
        if step == 3:
            raise Stop

    path = tmp_path / "stopped" / "net.pt"
    with pytest.raises(Stop):
        pretrain_into(SPEC, recipe, path, progress=stop_at_3, checkpoint_every=2)
    partial = path.with_suffix(".partial.pt")
    assert partial.exists() and not path.exists()
    seen: list[int] = []
    steps: list[int] = []
    again = pretrain_into(
        SPEC,
        recipe,
        path,
        progress=lambda step, n, loss: steps.append(step),
        checkpoint_every=2,
        on_resume=seen.append,
    )
    assert seen == [2] and steps == [3, 4] and not partial.exists()
    assert all(
        torch.equal(a, b)
        for a, b in zip(whole.state_dict().values(), again.state_dict().values(), strict=True)
    )

    with pytest.raises(Stop):
        pretrain_into(SPEC, recipe, path, progress=stop_at_3, checkpoint_every=2)
    other = dataclasses.replace(recipe, steps=6)
    with pytest.raises(
        ModelError,
        match=r"partial run of another recipe .*start over with 'tinytune pretrain --force'",
    ):
        pretrain_into(SPEC, other, path, checkpoint_every=2)
    steps.clear()
    pretrain_into(SPEC, other, path, progress=lambda s, n, loss: steps.append(s), fresh=True)
    assert steps == [1, 2, 3, 4, 5, 6]


def test_workers_need_per_step_draws() -> None:
    with pytest.raises(ModelError, match="per-step"):
        pretrain_supernet(
            SPEC,
            PretrainRecipe(steps=1, batch_size=4, source_classes=8),
            SourceTask(8).batch,
            workers=1,
        )
    with pytest.raises(ModelError, match="unknown draw stream 'parallel'; allowed: sequential"):
        PretrainRecipe(stream="parallel")
    assert get_recipe("glyphs-gpu").stream == "per-step"


def test_a_file_that_is_no_checkpoint_is_named_as_such(tmp_path: Path) -> None:
    """A folder, bytes that are no PyTorch file, and a pickle of objects besides tensors: one
    line each, none of which proposes loading with ``weights_only=False``."""
    import collections

    spec = get_supernet("ofa-proxyless-w0.35")
    with pytest.raises(ModelError, match=r"'.*' is a folder; name the file in it$"):
        load_supernet(spec, tmp_path)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(bytes(range(256)))
    with pytest.raises(ModelError, match="not a PyTorch checkpoint; expected a file written by"):
        load_supernet(spec, garbage)
    pickled = tmp_path / "objects.pt"
    torch.save({"state_dict": collections.OrderedDict(), "x": ModelError("an object")}, pickled)
    with pytest.raises(ModelError, match="holds objects besides tensors") as raised:
        load_supernet(spec, pickled)
    assert "weights_only" not in str(raised.value) and "\n" not in str(raised.value)


def test_a_partial_run_that_cannot_go_on_is_kept_unless_forced(tmp_path: Path) -> None:
    """A partial run is never overwritten unasked: not by a ``sequential`` recipe, not when it
    was saved without the optimiser's state or cannot be read; each refusal names --force."""
    from tinytune.checkpoints import pretrain_into

    per_step = PretrainRecipe(steps=2, batch_size=4, source_classes=8, stream="per-step")
    sequential = PretrainRecipe(steps=2, batch_size=4, source_classes=8)
    path = tmp_path / "net.pt"
    partial = path.with_suffix(".partial.pt")
    net = pretrain_supernet(SPEC, per_step, SourceTask(8).batch)
    save_supernet(net, SPEC, per_step, partial, partial=(1, {"state": {}, "param_groups": []}))
    kept = partial.read_bytes()
    with pytest.raises(
        ModelError,
        match=r"draws its batches in one sequence.*start over with 'tinytune pretrain --force'",
    ):
        pretrain_into(SPEC, sequential, path)
    assert partial.read_bytes() == kept
    save_supernet(net, SPEC, per_step, partial)  # as an earlier version saved it
    kept = partial.read_bytes()
    with pytest.raises(
        ModelError,
        match=r"without its optimiser's state .*start over with 'tinytune pretrain --force'",
    ):
        pretrain_into(SPEC, per_step, path)
    assert partial.read_bytes() == kept
    partial.write_bytes(b"half a file")
    with pytest.raises(
        ModelError,
        match=r"cannot read the partial run .*start over with 'tinytune pretrain --force'",
    ):
        pretrain_into(SPEC, per_step, path)
    assert partial.read_bytes() == b"half a file" and not path.exists()
    pretrain_into(SPEC, per_step, path, fresh=True)
    assert path.exists() and not partial.exists()
