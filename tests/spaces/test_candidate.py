"""The joint space: validation, canonical JSON round trip, keys, presets and sampling."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytune.errors import ConfigError
from tinytune.spaces import (
    PATCHES,
    PRESET_NAMES,
    PUBLISHED_SUPERNETS,
    SCHEMES,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    Schedule,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    conv_kinds,
    default_subnet,
    family_supernets,
    get_supernet,
    make_preset,
    subnet_params,
    suggest_candidate,
)

PROXYLESS, MBV3 = get_supernet("ofa-proxyless-w0.35"), get_supernet("ofa-mbv3-w0.5")
# every supernet: each family at two widths, and the published ones
SPECS = (
    *family_supernets(0.35),
    *family_supernets(0.5),
    *(get_supernet(name) for name in PUBLISHED_SUPERNETS),
)


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    spec = draw(st.sampled_from(SPECS))
    stages = []
    for i in range(spec.n_stages):
        depth = draw(st.sampled_from(spec.stage_depths(i)))
        ks = tuple(draw(st.sampled_from(spec.ks_choices)) for _ in range(depth))
        es = tuple(draw(st.sampled_from(spec.expand_choices)) for _ in range(depth))
        stages.append(StageConfig(ks, es))
    subnet = SubnetConfig(draw(st.sampled_from(spec.resolutions)), tuple(stages))
    n_convs = len(conv_kinds(spec, subnet))
    k = draw(st.integers(0, n_convs))
    layers = (
        draw(st.sets(st.integers(n_convs - k, n_convs - 1), max_size=min(k, 5))) if k else set()
    )
    weights = tuple((i, draw(st.sampled_from([0.125, 0.25, 0.5, 1.0]))) for i in layers)
    blocks = draw(st.sets(st.integers(1, subnet.n_blocks - 1), max_size=4))
    branch = LiteResidualBranch(
        draw(st.sampled_from([3, 5, 7])),
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([0.5, 1.0, 2.0])),
    )
    lite = LiteResidualConfig(tuple((b, branch) for b in blocks))
    update = UpdateScheme(k, weights, draw(st.booleans()))
    patches = draw(st.sampled_from(PATCHES))
    blocks = draw(st.integers(0, subnet.n_blocks)) if patches > 1 else 0
    return Candidate(spec.name, subnet, lite, update, Schedule(patches, blocks))


@given(candidates())
@settings(max_examples=150, deadline=None)
def test_json_round_trip_is_exact(c: Candidate) -> None:
    text = c.to_json()
    back = Candidate.from_json(text)
    assert back == c
    assert back.to_json() == text
    assert back.key == c.key
    assert json.loads(text) == c.to_dict()


def test_key_is_stable_and_distinguishes() -> None:
    spec = PROXYLESS
    a, b = make_preset("last", spec), make_preset("bias-only", spec)
    assert a.key == make_preset("last", spec).key
    assert a.key != b.key
    assert len(a.key) == 16


def test_a_schedule_changes_the_key_but_not_what_is_trained() -> None:
    """Whole images keep the JSON form and key a candidate always had; a patched prefix adds
    its schedule (another key), and ``training`` is the candidate that is measured."""
    whole = make_preset("mcunetv3", PROXYLESS)
    assert "schedule" not in whole.to_dict()
    patched = Candidate(
        whole.supernet, whole.subnet, whole.lite_residual, whole.update, Schedule(3, 2)
    )
    assert patched.to_dict()["schedule"] == {"patches": 3, "blocks": 2}
    assert patched.key != whole.key and patched.training == whole
    assert Candidate.from_json(patched.to_json()) == patched


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patches": 9}, "9 patches per side are not allowed; allowed: 1, 2, 3"),
        ({"patches": 1, "blocks": 2}, "one patch (the whole image) patches no blocks"),
        ({"patches": 2, "blocks": -1}, "patch blocks must be >= 0"),
        ({"patches": "4"}, "patches must be an integer"),
    ],
)
def test_bad_schedules_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Schedule(**kwargs)


def test_a_schedule_past_the_last_block_is_refused() -> None:
    whole = make_preset("last", PROXYLESS)
    with pytest.raises(ConfigError, match="needs a sub-network of as many"):
        Candidate(whole.supernet, whole.subnet, whole.lite_residual, whole.update, Schedule(2, 99))
    data = json.loads(whole.to_json())
    data["schedule"] = {"patches": 1, "blocks": 0}
    with pytest.raises(ConfigError, match="has no schedule in its JSON form"):
        Candidate.from_dict(data)


def test_conv_count_of_proxyless_min_subnet_by_hand() -> None:
    # stem + first block (dw, pw2) + 11 MB blocks × (pw1, dw, pw2) + feature mix = 37
    spec = PROXYLESS
    sub = default_subnet(spec)
    assert sub.depths == (2, 2, 2, 2, 2, 1)
    assert len(conv_kinds(spec, sub)) == 1 + 2 + 11 * 3 + 1


def test_mbv3_counts_se_convs() -> None:
    spec = MBV3
    sub = default_subnet(spec)
    kinds = conv_kinds(spec, sub)
    # 5 stages of 2 blocks; SE in stages 2, 4, 5 → 6 blocks × 2 SE convs; two head convs
    assert len(kinds) == 1 + 2 + 10 * 3 + 6 * 2 + 2
    assert kinds.count("se1") == 6


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (UpdateScheme(38), "exceeds"),
        (UpdateScheme(2, ((10, 1.0),)), "outside the bias-updated tail"),
        (UpdateScheme(37, ((40, 1.0),)), "does not exist"),
    ],
)
def test_schemes_that_break_the_conventions(update: UpdateScheme, message: str) -> None:
    spec = PROXYLESS
    with pytest.raises(ConfigError, match=message):
        Candidate(spec.name, default_subnet(spec), LiteResidualConfig(), update)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bias_last_k": -1},
        {"bias_last_k": 2, "weights": ((1, 0.3),)},
        {"bias_last_k": 2, "weights": ((1, 0.5), (1, 0.25))},
    ],
)
def test_update_scheme_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        UpdateScheme(**kwargs)


def test_unknown_keys_and_names_are_rejected() -> None:
    spec = PROXYLESS
    data = make_preset("last", spec).to_dict()
    data["extra"] = 1
    with pytest.raises(ConfigError, match="unknown keys"):
        Candidate.from_dict(data)
    with pytest.raises(ConfigError, match="unknown supernet"):
        get_supernet("resnet9000")
    with pytest.raises(ConfigError, match="unknown preset"):
        make_preset("nope", spec)
    with pytest.raises(ConfigError, match="not valid JSON"):
        Candidate.from_json("{")


def test_lite_residual_never_on_first_block() -> None:
    spec = PROXYLESS
    lite = LiteResidualConfig(((0, LiteResidualBranch()),))
    with pytest.raises(ConfigError, match="block 0"):
        Candidate(spec.name, default_subnet(spec), lite, UpdateScheme())


def test_presets_follow_their_definitions() -> None:
    spec = PROXYLESS
    n = make_preset("full", spec).n_convs
    assert make_preset("last", spec).update == UpdateScheme(0)
    assert make_preset("bias-only", spec).update == UpdateScheme(n)
    assert make_preset("bn+last", spec).update.norm
    full = make_preset("full", spec).update
    assert full.bias_last_k == n and [i for i, _ in full.weights] == list(range(n))
    tinytl = make_preset("tinytl", spec)
    assert tinytl.lite_residual.blocks == tuple(range(1, tinytl.subnet.n_blocks))
    mcu = make_preset("mcunetv3", spec)
    kinds = mcu.conv_kinds
    assert mcu.update.bias_last_k == (n + 1) // 2
    assert all(kinds[i] == "pw1" for i, _ in mcu.update.weights)
    assert [r for _, r in mcu.update.weights][-2:] == [0.125, 0.25]


def test_sampling_covers_schemes_and_is_seeded() -> None:
    spec = PROXYLESS

    def sample(seed: int) -> list[str]:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        return [suggest_candidate(study.ask(), spec).key for _ in range(30)]

    assert sample(1) == sample(1)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = {suggest_candidate(t := study.ask(), spec) and t.params["scheme"] for _ in range(60)}
    assert seen == set(SCHEMES)


def test_enqueued_preset_reproduces_the_preset() -> None:
    spec = PROXYLESS
    study = optuna.create_study()
    for name in PRESET_NAMES:
        study.enqueue_trial({"scheme": name, **subnet_params(default_subnet(spec), spec)})
        assert suggest_candidate(study.ask(), spec) == make_preset(name, spec)


def test_preset_restricts_the_scheme() -> None:
    spec = PROXYLESS
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(10):
        trial = study.ask()
        c = suggest_candidate(trial, spec, preset="bias-only")
        assert c.update == UpdateScheme(c.n_convs)
        assert "scheme" not in trial.params
