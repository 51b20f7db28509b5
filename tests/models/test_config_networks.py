"""Networks read from a ``ProxylessNASNets`` JSON config and a weights file, as the MCUNet
model zoo publishes them (blocks named ``mobile_inverted_conv`` of class
``MBInvertedConvLayer``, the state dict under ``state_dict``): a config written here in that
format with random weights, searched and exported; bad files refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tinytune.errors import ConfigError, ModelError
from tinytune.models import build_candidate, load_supernet
from tinytune.models.ofa_adapter import build_proxyless
from tinytune.models.pretrained import same_padded
from tinytune.spaces import default_subnet, get_supernet, make_preset

# (kernel, stride, expand, out) of the blocks after the stem; a new stage where a block has
# no shortcut. Kernels and expand ratios vary inside a stage, as in MCUNet's searched networks.
BLOCKS = [
    (3, 1, 1, 8),
    (3, 2, 4, 16), (5, 1, 3, 16),
    (7, 2, 4, 24), (3, 1, 6, 24), (5, 1, 3, 24),
    (5, 2, 6, 40), (3, 1, 4, 40),
    (3, 1, 6, 48),
]  # fmt: skip


def _layer(name: str, **fields: object) -> dict[str, object]:
    return {"name": name, **fields}


def zoo_config(resolution: int = 96, classes: int = 1000) -> dict[str, object]:
    """A config in the MCUNet model zoo's format."""
    blocks, c_in = [], 16
    for k, s, e, out in BLOCKS:
        conv = _layer(
            "MBInvertedConvLayer", in_channels=c_in, out_channels=out, kernel_size=k, stride=s,
            expand_ratio=e, mid_channels=None, act_func="relu6", use_se=False,
        )  # fmt: skip
        shortcut = None
        if s == 1 and c_in == out:
            shortcut = _layer(
                "IdentityLayer", in_channels=c_in, out_channels=out, use_bn=False, act_func=None,
                dropout_rate=0, ops_order="weight_bn_act",
            )  # fmt: skip
        blocks.append({"name": "MobileInvertedResidualBlock", "mobile_inverted_conv": conv,
                       "shortcut": shortcut})  # fmt: skip
        c_in = out
    return {
        "name": "ProxylessNASNets",
        "bn": {"momentum": 0.1, "eps": 1e-5},
        "first_conv": _layer(
            "ConvLayer", in_channels=3, out_channels=16, kernel_size=3, stride=2, dilation=1,
            groups=1, bias=False, has_shuffle=False, use_bn=True, act_func="relu6",
            dropout_rate=0, ops_order="weight_bn_act",
        ),
        "blocks": blocks,
        "feature_mix_layer": None,
        "classifier": _layer(
            "LinearLayer", in_features=c_in, out_features=classes, bias=True, use_bn=False,
            act_func=None, dropout_rate=0, ops_order="weight_bn_act",
        ),
        "resolution": resolution,
    }  # fmt: skip


def write_zoo_network(folder: Path, name: str = "mcunet-test") -> tuple[Path, Path]:
    """The config and random weights (seeded, BatchNorm statistics made non-trivial) of a zoo
    network, as ``{'state_dict': ...}`` with the zoo's key names."""
    folder.mkdir(parents=True, exist_ok=True)
    config = zoo_config()
    net = build_proxyless(json.loads(json.dumps(config)), seed=3)
    generator = torch.Generator().manual_seed(4)
    state = {}
    for key, value in net.state_dict().items():
        if key.endswith("running_var"):
            value = torch.rand(value.shape, generator=generator) + 0.5
        elif key.endswith("running_mean"):
            value = torch.randn(value.shape, generator=generator) * 0.1
        state[key.replace(".conv.", ".mobile_inverted_conv.", 1) if ".conv.depth" in key
              or ".conv.inverted" in key or ".conv.point" in key else key] = value  # fmt: skip
    (folder / f"{name}.json").write_text(json.dumps(config))
    torch.save({"state_dict": state}, folder / f"{name}.pth")
    return folder / f"{name}.json", folder / f"{name}.pth"


def test_a_zoo_config_is_read_into_stages(tmp_path: Path) -> None:
    config, _ = write_zoo_network(tmp_path)
    spec = get_supernet(str(config))
    assert spec.name == str(config.resolve()) and spec.fixed and spec.config_file
    assert spec.first_block == (3, 1, 1, 8) and spec.stem_channels == 16
    assert spec.stage_max_depth == (2, 3, 2, 1) and spec.head_channels == 0
    assert spec.stage_counts == (2, 3, 4) and 96 in spec.resolutions
    assert spec.block_kernels(1, 0) == (7,) and spec.block_expands(1, 1) == (6,)
    subnet = default_subnet(spec)
    assert subnet.resolution == 96 and subnet.depths == (2, 3, 2, 1)
    assert subnet.stages[1].ks == (7, 3, 5)
    # stem, the first block's dw and pw2, three convolutions per further block, no head
    assert make_preset("full", spec, subnet).n_convs == 3 + 3 * 8


def test_the_zoo_weights_load_under_their_own_names(tmp_path: Path) -> None:
    config, weights = write_zoo_network(tmp_path)
    spec = get_supernet(str(config))
    net = load_supernet(spec, weights).eval()
    state = torch.load(weights, weights_only=True)["state_dict"]
    own = net.state_dict()
    assert torch.equal(own["blocks.3.conv.depth_conv.conv.weight"],
                       state["blocks.3.mobile_inverted_conv.depth_conv.conv.weight"])  # fmt: skip
    assert torch.equal(own["classifier.linear.weight"], state["classifier.linear.weight"])
    candidate = make_preset("mcunetv3", spec, default_subnet(spec))
    trained = build_candidate(candidate, net, 5, calibration=[torch.rand(8, 3, 96, 96) * 2 - 1])
    assert len(trained.convs()) == candidate.n_convs
    assert trained(torch.zeros(2, 3, 96, 96)).shape == (2, 5)
    # the zoo's weights were trained in PyTorch: every convolution keeps symmetric padding
    assert not same_padded(spec)
    assert all(conv.padding == conv.kernel_size // 2 for conv in trained.convs())


def _conv_of(block: int, **fields: object) -> object:
    return lambda c: c["blocks"][block]["mobile_inverted_conv"].update(**fields)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("blocks"), "is not a ProxylessNASNets config"),
        (_conv_of(2, use_se=True), "block 2 uses squeeze"),
        (_conv_of(1, act_func="h_swish"), "activation 'h_swish'"),
        (_conv_of(1, name="ZeroLayer"), "block 1 is 'ZeroLayer'"),
        (_conv_of(3, kernel_size="5"), "block 3 has no integer 'kernel_size'"),
    ],
)
def test_a_config_tinytune_cannot_build_is_refused_in_one_line(
    tmp_path: Path, change: object, message: str
) -> None:
    config = zoo_config()
    change(config)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message) as error:
        get_supernet(str(path))
    assert "\n" not in str(error.value)


def test_files_that_are_no_config_or_weights_are_refused(tmp_path: Path) -> None:
    config, _ = write_zoo_network(tmp_path)
    (tmp_path / "text.json").write_text("not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        get_supernet(str(tmp_path / "text.json"))
    with pytest.raises(ConfigError, match="cannot read the network config"):
        get_supernet(str(tmp_path / "missing.json"))
    spec = get_supernet(str(config))
    with pytest.raises(ModelError, match=r"needs its weights.* as weights FILE$"):
        from tinytune.models.supernet import require_weights

        require_weights(spec, None)
    other = tmp_path / "other.pth"
    torch.save({"state_dict": {"blocks.0.weird.weight": torch.zeros(1)}}, other)
    with pytest.raises(ModelError, match="does not match") as error:
        load_supernet(spec, other)
    assert "\n" not in str(error.value)
    (tmp_path / "junk.pth").write_bytes(b"junk")
    with pytest.raises(ModelError, match="cannot read"):
        load_supernet(spec, tmp_path / "junk.pth")


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from tinytune.cli.main import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_a_zoo_network_is_searched_and_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--supernet CONFIG.json --weights FILE``: a search on an image folder, then its front
    point exported as a bundle whose arena is the planner's."""
    from tests.data.test_data import write_image_folder

    config, weights = write_zoo_network(tmp_path / "zoo")
    folder = write_image_folder(tmp_path / "images", images_per_class=8)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    network = ["--supernet", str(config), "--weights", str(weights)]
    argv = ["search", "--storage", url, "--dataset", f"imagefolder:{folder}", "--inline"]
    argv += ["--trials", "2", "--epochs", "1", "--lr", "0.05", "--repeats", "1", *network]
    argv += ["--sram-budget", "none"]
    code, _, err = _cli(argv, capsys)
    assert code == 0, err
    import tinytune

    view = tinytune.load(storage=url)
    assert view.front
    point = view.front[0]
    bundle = tmp_path / "bundle"
    code, _out, err = _cli(
        ["export", point.candidate_key, "-o", str(bundle), "--storage", url,
         "--no-measure-int8", "--samples", "4", "--epochs", "1"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["candidate"]["supernet"] == str(config.resolve())
    assert (
        f"#define TT_ARENA_BYTES {manifest['memory']['arena_bytes']}"
        in (bundle / "tt_model.h").read_text()
    )


def test_bad_config_or_weights_on_the_command_line_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, weights = write_zoo_network(tmp_path / "zoo")
    (tmp_path / "bad.json").write_text("{}")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    for network, said in (
        (["--supernet", str(tmp_path / "bad.json"), "--weights", str(weights)], "no list of"),
        (["--supernet", str(config)], "as --weights FILE"),
        (["--supernet", str(config), "--weights", str(config)], "cannot read"),
    ):
        code, _, err = _cli(["search", "--storage", url, "--inline", *network], capsys)
        assert code == 2 and err.count("\n") == 1 and said in err, err
    import optuna

    assert not (tmp_path / "db.sqlite").exists() or optuna.get_all_study_names(url) == []
