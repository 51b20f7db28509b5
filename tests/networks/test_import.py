"""A user's own network read from a torch.export archive or an ONNX model, built as the network
tinytune trains: the same outputs as the user's module, the search space read off its graph,
and every refusal in one line."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.networks.zoo import MobileNetV2, SmallV3, export, randomise_bn
from tinytune.cli.main import main
from tinytune.errors import ModelError
from tinytune.models import GraphNet, ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.spaces import PRESET_NAMES, get_supernet, make_preset

SIZE = 32


@pytest.fixture(scope="module")
def mbv2() -> nn.Module:
    torch.manual_seed(0)
    return randomise_bn(MobileNetV2(0.35, stages=4))


@pytest.fixture(scope="module")
def v3() -> nn.Module:
    torch.manual_seed(1)
    return randomise_bn(SmallV3(), seed=1)


def _with_head(net: GraphNet, module: nn.Module, head: nn.Linear) -> None:
    """Give ``net`` the classifier ``head`` of the user's module, to compare outputs."""
    net.classifier.weight.data = head.weight.detach().clone()
    net.classifier.bias.data = head.bias.detach().clone()


def _graph_net(path: Path, classes: int, seed: int = 0) -> GraphNet:
    net = GraphNet(read_network(str(path)), classes, SIZE, torch.Generator().manual_seed(seed))
    return net.eval()


@pytest.mark.parametrize("level", ["export", "core-aten"])
def test_an_exported_mobilenetv2_computes_what_the_module_computes(
    mbv2: nn.Module, tmp_path: Path, level: str
) -> None:
    path = tmp_path / "mbv2.pt2"
    program = torch.export.export(mbv2, (torch.zeros(1, 3, SIZE, SIZE),))
    if level == "core-aten":
        program = program.run_decompositions()
    torch.export.save(program, str(path))
    net = _graph_net(path, 1000)
    _with_head(net, mbv2, mbv2.classifier[1])
    x = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(net(x), mbv2(x), atol=1e-4, rtol=1e-4)
    convs = [m for m in mbv2.modules() if isinstance(m, nn.Conv2d)]
    assert len(net.convs()) == len(convs)
    assert [c.index for c in net.convs()] == list(range(len(convs)))
    assert len(net.stages()) > 5  # cut at the single-tensor points between its blocks
    with torch.no_grad():
        for n in range(len(net.stages()) + 1):
            assert torch.equal(net.forward_from(net.prefix(x, n), n), net(x))


def test_an_onnx_model_computes_what_the_module_computes(v3: nn.Module, tmp_path: Path) -> None:
    path = tmp_path / "v3.onnx"
    torch.onnx.export(v3, (torch.zeros(1, 3, SIZE, SIZE),), str(path), dynamo=False)
    net = _graph_net(path, 1000)
    _with_head(net, v3, v3.fc)
    x = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.allclose(net(x), v3(x), atol=1e-4, rtol=1e-4)
    kinds = {c.act for c in net.convs()}
    assert {"hswish", "hsigmoid", "relu"} <= kinds  # fused after their convolutions


def test_the_same_network_through_pt2_and_onnx_is_one_network(
    v3: nn.Module, tmp_path: Path
) -> None:
    export(v3, tmp_path / "v3.pt2", SIZE)
    torch.onnx.export(
        v3, (torch.zeros(1, 3, SIZE, SIZE),), str(tmp_path / "v3.onnx"), dynamo=False
    )
    a, b = _graph_net(tmp_path / "v3.pt2", 10), _graph_net(tmp_path / "v3.onnx", 10)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.allclose(a(x), b(x), atol=1e-4, rtol=1e-4)
    assert [c.kind for c in a.convs()] == [c.kind for c in b.convs()]


def test_the_search_space_is_read_off_the_graph(mbv2: nn.Module, tmp_path: Path) -> None:
    export(mbv2, tmp_path / "mbv2.pt2", SIZE)
    spec = get_supernet(str(tmp_path / "mbv2.pt2"))
    assert spec.name == str((tmp_path / "mbv2.pt2").resolve())
    assert spec.family == "graph" and spec.fixed and spec.imported
    assert spec.resolutions == (16, 24, 32) and spec.default_resolution == SIZE
    convs = [m for m in mbv2.modules() if isinstance(m, nn.Conv2d)]
    assert len(spec.conv_roles) == len(convs)
    assert spec.conv_roles[:3] == ("stem", "dw", "pw2")  # the first block has no expansion
    assert spec.conv_roles[3:6] == ("pw1", "dw", "pw2")
    supernet = ImportedNetwork(read_network(spec.network_file))
    for preset in PRESET_NAMES:
        candidate = make_preset(preset, spec)
        net = build_candidate(candidate, supernet, 10, calibration=[], seed=0)
        trained = {n for n, p in net.named_parameters() if p.requires_grad}
        assert {"classifier.weight", "classifier.bias"} <= trained
        if preset == "last":
            assert len(trained) == 2 and net.frozen_prefix() == len(net.stages())
        if preset == "bias-only":
            assert sum(n.endswith(".bias") for n in trained) == len(convs) + 1
        if preset == "tinytl":  # every bias, and branches on every block but the first
            assert (
                sum(n.endswith(".bias") and ".lite." not in n for n in trained) == len(convs) + 1
            )
            # blocks: the stages between the stem's and the 1x1 head's
            assert candidate.lite_residual.blocks == tuple(range(1, spec.n_stages - 2))
        if preset == "full":
            assert sum(n.endswith("weight_train") for n in trained) == len(convs)


class _Pooled(nn.Module):
    def __init__(self, pool: nn.Module, head: nn.Module | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = pool
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(torch.relu(self.conv(x)))
        h = h.mean(dim=(2, 3))
        return h if self.head is None else self.head(h)


def _saved(module: nn.Module, path: Path, shape: tuple[int, ...] = (1, 3, SIZE, SIZE)) -> str:
    torch.export.save(torch.export.export(module.eval(), (torch.zeros(shape),)), str(path))
    return str(path)


def _one_line(e: pytest.ExceptionInfo[Exception]) -> str:
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_a_pickled_module_is_refused_unread(tmp_path: Path) -> None:
    module = _Pooled(nn.Identity(), nn.Linear(8, 4))
    torch.save(module, tmp_path / "model.pt")
    renamed = tmp_path / "model.pt2"
    renamed.write_bytes((tmp_path / "model.pt").read_bytes())
    raw = tmp_path / "raw.pt2"
    raw.write_bytes(pickle.dumps({"not": "a network"}))
    for path in (tmp_path / "model.pt", renamed, raw):
        with pytest.raises(ModelError) as e:
            get_supernet(str(path))
        assert "pickled" in _one_line(e) and "torch.export.save" in str(e.value), path


def test_an_unsupported_op_is_refused_with_its_node_and_the_supported_set(
    tmp_path: Path,
) -> None:
    path = _saved(_Pooled(nn.MaxPool2d(3, 2, ceil_mode=True), nn.Linear(8, 4)), tmp_path / "p.pt2")
    with pytest.raises(ModelError) as e:
        get_supernet(path)
    text = _one_line(e)
    assert "node 'max_pool2d' (aten.max_pool2d.default) is a max pooling in ceil mode" in text
    assert (
        "supported: 2-D convolution" in text and "linear layers: the last the classifier" in text
    )
    path = _saved(_Pooled(nn.MaxPool2d(3, 1, dilation=2), nn.Linear(8, 4)), tmp_path / "d.pt2")
    with pytest.raises(ModelError) as e:
        get_supernet(path)
    assert "is a dilated max pooling ([2, 2])" in _one_line(e)
    path = _saved(_Pooled(nn.Upsample(scale_factor=2), nn.Linear(8, 4)), tmp_path / "up.pt2")
    with pytest.raises(ModelError) as e:
        get_supernet(path)
    assert "which tinytune cannot read; it reads convolutions" in _one_line(e)


def test_a_network_without_a_classifier_is_refused(tmp_path: Path) -> None:
    path = _saved(_Pooled(nn.Identity()), tmp_path / "features.pt2")
    with pytest.raises(ModelError) as e:
        get_supernet(path)
    assert "has no linear classifier to train" in _one_line(e)


def test_a_dynamic_input_size_is_refused(tmp_path: Path) -> None:
    module = _Pooled(nn.Identity(), nn.Linear(8, 4)).eval()
    size = torch.export.Dim("size", min=8, max=64)
    program = torch.export.export(
        module, (torch.zeros(1, 3, SIZE, SIZE),), dynamic_shapes=({2: size, 3: size},)
    )
    torch.export.save(program, str(tmp_path / "dyn.pt2"))
    with pytest.raises(ModelError) as e:
        get_supernet(str(tmp_path / "dyn.pt2"))
    assert "dynamic shape" in _one_line(e) and "static input size" in str(e.value)


def test_a_corrupt_file_is_refused(tmp_path: Path, mbv2: nn.Module) -> None:
    export(mbv2, tmp_path / "whole.pt2", SIZE)
    torn = tmp_path / "torn.pt2"
    torn.write_bytes((tmp_path / "whole.pt2").read_bytes()[:5000])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07" + bytes(range(256)) * 4)
    text = tmp_path / "notes.pt2"
    text.write_text("a network, honestly")
    missing = tmp_path / "partial.pt2"
    with zipfile.ZipFile(tmp_path / "whole.pt2") as src, zipfile.ZipFile(missing, "w") as dst:
        for item in src.infolist():
            if "weights/weight_0" not in item.filename:
                dst.writestr(item, src.read(item))
    for path in (torn, junk, text, missing):
        with pytest.raises(ModelError) as e:
            get_supernet(str(path))
        assert str(path) in _one_line(e), path


def test_an_input_the_data_set_cannot_feed_is_refused_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Grey(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = nn.Conv2d(1, 8, 3), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.conv(x).mean(dim=(2, 3)))

    db = tmp_path / "grey.db"
    for shape, what in (((1, 1, SIZE, SIZE), f"1x{SIZE}x{SIZE}"), ((1, 1, 49, 10), "1x49x10")):
        path = _saved(Grey(), tmp_path / "grey.pt2", shape)
        # a spectrogram's network at its frames and fewer, as a keyword front-end makes them
        resolutions = get_supernet(path).resolutions
        assert resolutions == (16, 24, SIZE) if shape[2] == SIZE else resolutions == (24, 32, 49)
        argv = ["search", "--supernet", path, "--trials", "2", "--storage", f"sqlite:///{db}"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"takes a {what} input; data set 'digits' gives square 3-channel images" in err
        assert not db.exists()


def test_weights_are_read_from_raw_bytes_not_unpickled(tmp_path: Path, mbv2: nn.Module) -> None:
    export(mbv2, tmp_path / "m.pt2", SIZE)
    graph = read_network(str(tmp_path / "m.pt2"))
    first = next(n for n in graph.nodes if n.op == "conv")
    expected = mbv2.features[0][0].weight.detach().numpy()
    assert np.array_equal(first.params["weight"], expected)


def test_a_refused_network_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mbv2: nn.Module
) -> None:
    torch.save(mbv2, tmp_path / "mine.pt")
    export(mbv2, tmp_path / "mine.pt2", SIZE)
    db = tmp_path / "mine.db"
    for extra, words in (
        (["--supernet", str(tmp_path / "mine.pt")], ("pickled", "torch.export.save")),
        (
            ["--supernet", str(tmp_path / "mine.pt2"), "--weights", str(tmp_path / "mine.pt")],
            ("holds its own weights; leave out --weights",),
        ),
    ):
        assert main(["search", *extra, "--trials", "2", "--storage", f"sqlite:///{db}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and all(w in err for w in words), err
        assert not db.exists()


def test_optimize_takes_a_module_and_its_example_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mbv2: nn.Module
) -> None:
    import tinytune

    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'm.db'}"
    args = dict(trials=1, epochs=1, inline=True, storage=url, study="m", preset="last")
    x = torch.zeros(1, 3, SIZE, SIZE)
    mbv2.train()
    result = tinytune.optimize("digits", supernet=mbv2, example_input=x, **args)
    assert mbv2.training  # its mode as it was
    files = list((tmp_path / "cache" / "networks").glob("*.pt2"))
    assert len(files) == 1  # named by the graph's digest, nothing else left there
    assert files[0].stem == read_network(str(files[0])).digest
    assert {p.scheme for p in result.front} <= {"last", "full (reference)"}
    # the same module again is the same file and the same study, continued
    again = tinytune.optimize("digits", supernet=mbv2, example_input=x, resume=True, **args)
    assert list((tmp_path / "cache" / "networks").glob("*.pt2")) == files
    assert again.front


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"example_input": torch.zeros(1, 3, 8, 8)}, "example_input is the input of a network"),
        ({"supernet": nn.Linear(3, 4)}, "example_input must be given with a network"),
        (
            {"supernet": nn.Linear(3, 4), "example_input": "x"},
            "example_input must be a torch.Tensor",
        ),
        (
            {"supernet": nn.Linear(3, 4), "example_input": torch.zeros(1, 3)},
            "the module takes an input of shape [1, 3]",
        ),
    ],
)
def test_optimize_refuses_a_module_without_its_input_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict, message: str
) -> None:
    import tinytune

    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))
    from tinytune.errors import TinyTuneError

    url = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(TinyTuneError) as e:
        tinytune.optimize("digits", storage=url, trials=1, inline=True, **given)
    assert message in _one_line(e)
    assert not (tmp_path / "none.db").exists()
    assert not list((tmp_path / "cache").rglob("*.pt2"))


def test_a_cut_is_the_networks_first_stages_pooled_into_a_new_classifier(
    mbv2: nn.Module, tmp_path: Path
) -> None:
    export(mbv2, tmp_path / "m.pt2", SIZE)
    spec = get_supernet(str(tmp_path / "m.pt2"))
    n = spec.n_stages
    assert spec.stage_counts == tuple(range((n + 1) // 2, n + 1))
    assert sum(spec.stage_convs) == len(spec.conv_roles)
    graph = read_network(str(tmp_path / "m.pt2"))
    whole = GraphNet(graph, 10, SIZE, torch.Generator().manual_seed(0)).eval()
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(6))
    for kept in (spec.min_stages, n - 1):
        cut = GraphNet(graph, 10, SIZE, torch.Generator().manual_seed(0), stages=kept).eval()
        assert len(cut.convs()) == sum(spec.stage_convs[:kept])
        with torch.no_grad():
            features = whole.prefix(x, kept).mean(dim=(2, 3))
            expected = features @ cut.classifier.weight.T + cut.classifier.bias
            assert torch.allclose(cut(x), expected, atol=1e-5)
        subnet = make_preset("last", spec).subnet
        candidate = make_preset("bias-only", spec, type(subnet)(SIZE, subnet.stages[:kept]))
        assert candidate.n_convs == sum(spec.stage_convs[:kept])
        built = build_candidate(candidate, ImportedNetwork(graph), 10, calibration=[], seed=0)
        assert len(built.convs()) == candidate.n_convs
