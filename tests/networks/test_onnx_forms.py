"""ONNX as converters from Keras and TensorFlow write it (built here with ``onnx.helper``):
"SAME" padding as ``auto_pad``, a ``Dense`` as ``MatMul`` then ``Add``, BatchNorm written out,
channels first. Read as the network it computes: the same logits as PyTorch's own layers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinytune.models import GraphNet
from tinytune.networks import read_network
from tinytune.spaces import get_supernet

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SIZE = 16


def _keras_like(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """conv 3×3/2 "SAME" (auto_pad SAME_UPPER) → BatchNorm → ReLU → global pool → flatten →
    MatMul + Add (a Dense of 5): its weights, by name."""
    w = {
        "w": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
        "b": rng.normal(0, 0.1, 8).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "beta": rng.normal(0, 0.1, 8).astype(np.float32),
        "mean": rng.normal(0, 0.1, 8).astype(np.float32),
        "var": rng.uniform(0.5, 2, 8).astype(np.float32),
        "dense": rng.normal(0, 0.3, (8, 5)).astype(np.float32),  # (in, out), as Keras keeps it
        "dense_b": rng.normal(0, 0.1, 5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", auto_pad="SAME_UPPER",
                         strides=[2, 2], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"],
                         name="bn", epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "dense"], ["m"], name="dense/MatMul"),
        helper.make_node("Add", ["m", "dense_b"], ["y"], name="dense/BiasAdd"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "keras",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return w


def test_a_converted_keras_network_reads_as_the_network_it_computes(tmp_path: Path) -> None:
    path = tmp_path / "keras.onnx"
    w = {k: torch.from_numpy(v) for k, v in _keras_like(path, np.random.default_rng(0)).items()}
    net = GraphNet(read_network(str(path)), 5, SIZE, torch.Generator()).eval()
    net.classifier.weight.data = w["dense"].T.clone()
    net.classifier.bias.data = w["dense_b"].clone()
    assert net.convs()[0].padding == "same"  # one more after than before at stride 2
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    h = F.conv2d(F.pad(x, (0, 1, 0, 1)), w["w"], w["b"], stride=2)
    h = F.batch_norm(h, w["mean"], w["var"], w["gamma"], w["beta"], eps=1e-3)
    expected = F.relu(h).mean(dim=(2, 3)) @ w["dense"] + w["dense_b"]
    with torch.no_grad():
        assert torch.allclose(net(x), expected, atol=1e-5)
    spec = get_supernet(str(path))
    assert spec.conv_roles == ("stem",) and spec.resolutions == (SIZE,)
