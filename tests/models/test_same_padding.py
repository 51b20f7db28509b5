"""TensorFlow's "SAME" padding in a :class:`ConvUnit`: hand-computed paddings and a
hand-computed 4×4 convolution with its gradients, torch autograd of ``F.pad`` + ``F.conv2d``
for every way a unit is trained, and the padding the traced graph holds."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tinytune.errors import ModelError
from tinytune.ir import trace
from tinytune.models import ConvUnit
from tinytune.models.layers import SAME, same_padding

F64 = torch.float64


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "expected"),
    [
        (8, 3, 2, (0, 1)),  # p = 3·2 + 3 − 8 = 1
        (8, 5, 2, (1, 2)),  # p = 3·2 + 5 − 8 = 3
        (7, 3, 2, (1, 1)),  # p = 3·2 + 3 − 7 = 2
        (7, 5, 2, (2, 2)),  # p = 3·2 + 5 − 7 = 4
        (5, 5, 2, (2, 2)),  # 80 px, block 11: p = 2·2 + 5 − 5 = 4
        (64, 3, 2, (0, 1)),
        (1, 3, 2, (1, 1)),  # p = 0·2 + 3 − 1 = 2
        (2, 1, 2, (0, 0)),  # p = max(0·2 + 1 − 2, 0) = 0
        (8, 3, 1, (1, 1)),  # stride 1: k − 1, split evenly
        (8, 5, 1, (2, 2)),
        (9, 3, 3, (0, 0)),  # p = 2·3 + 3 − 9 = 0
        (10, 3, 3, (1, 1)),  # p = 3·3 + 3 − 10 = 2
    ],
)
def test_same_padding_by_hand(size, kernel, stride, expected):
    assert same_padding(size, kernel, stride) == expected
    before, after = expected
    assert (size + before + after - kernel) // stride + 1 == math.ceil(size / stride)


def test_a_4x4_image_by_hand():
    """x = 0..15 in rows of four, a 3×3 kernel of ones at stride 2. TensorFlow's windows start
    at rows and columns 0 and 2 (the last one reaches the zero pixel after the image):

        y = [[0+1+2 + 4+5+6 + 8+9+10, 2+3 + 6+7 + 10+11], [8+9+10 + 12+13+14, 10+11 + 14+15]]
          = [[45, 39], [66, 50]]

    (symmetric padding would start at −1: y[0, 0] = 0+1+4+5 = 10). With ∂L/∂y = 1, rows and
    columns 0, 1, 3 lie in one window and row and column 2 in two: ∂L/∂x = c cᵀ, c = (1, 1, 2, 1);
    ∂L/∂W[i, j] = Σ over the four windows of x[2a + i, 2b + j], zero beyond the image."""
    x = torch.arange(16, dtype=F64).view(1, 1, 4, 4).requires_grad_(True)
    unit = ConvUnit(torch.ones(1, 1, 3, 3, dtype=F64), torch.zeros(1, dtype=F64), stride=2,
                    padding=SAME)  # fmt: skip
    unit.set_weight_update(1.0)
    y = unit(x)
    torch.testing.assert_close(y, torch.tensor([[[[45.0, 39.0], [66.0, 50.0]]]], dtype=F64))
    y.sum().backward()
    c = torch.tensor([1.0, 1.0, 2.0, 1.0], dtype=F64)
    torch.testing.assert_close(x.grad[0, 0], torch.outer(c, c), rtol=0, atol=0)
    grid = x.detach()[0, 0]
    padded = F.pad(grid, (0, 1, 0, 1))
    expected = torch.tensor(
        [[sum(padded[2 * a + i, 2 * b + j] for a in (0, 1) for b in (0, 1)) for j in range(3)]
         for i in range(3)], dtype=F64,
    )  # fmt: skip
    torch.testing.assert_close(unit.weight_train.grad[0, 0], expected, rtol=0, atol=0)
    assert expected[0, 0] == 0 + 2 + 8 + 10 and expected[2, 2] == 10 + 0 + 0 + 0


def _reference(unit: ConvUnit, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit's output through ``F.pad`` + ``F.conv2d`` with plain autograd and one whole
    trainable weight, and that weight."""
    k, s = unit.kernel_size, unit.stride
    top, bottom = same_padding(x.shape[2], k, s)
    left, right = same_padding(x.shape[3], k, s)
    weight = unit.full_weight().clone().requires_grad_(True)
    z = F.conv2d(F.pad(x, (left, right, top, bottom)), weight, None, s, 0, 1, unit.groups)
    if unit.scale is not None:
        z = z * unit.scale.detach().view(1, -1, 1, 1)
    return F.relu6(z + unit.bias.detach().view(1, -1, 1, 1)), weight


@pytest.mark.parametrize("size", [(8, 8), (7, 7), (6, 9)], ids=str)
@pytest.mark.parametrize(
    ("kernel", "stride", "groups", "ratio", "scale"),
    [
        (3, 2, 1, 1.0, False),
        (3, 2, 1, 0.5, True),
        (5, 2, 6, 0.5, False),  # depthwise, the first 3 channels
        (5, 2, 6, None, True),
        (3, 1, 1, 0.25, False),
        (1, 2, 1, 1.0, False),
    ],
)
def test_a_same_unit_is_f_pad_then_conv2d(size, kernel, stride, groups, ratio, scale):
    """Output, input gradient and the trained weight's gradient (its leading channels), to
    float64 tolerance, against torch autograd of the padded convolution."""
    g = torch.Generator().manual_seed(0)
    c_in, c_out = 6, 6 if groups > 1 else 4
    weight = torch.randn(c_out, c_in // groups, kernel, kernel, generator=g, dtype=F64)
    bias = torch.randn(c_out, generator=g, dtype=F64)
    unit = ConvUnit(weight, bias, stride=stride, padding=SAME, groups=groups, act="relu6")
    unit.set_weight_update(ratio)
    unit.set_scale_update(scale)
    x = torch.randn(2, c_in, *size, generator=g, dtype=F64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = unit(x)
    y_ref, w_ref = _reference(unit, x_ref)
    assert y.shape[2:] == (math.ceil(size[0] / stride), math.ceil(size[1] / stride))
    torch.testing.assert_close(y, y_ref)
    dy = torch.randn(y.shape, generator=g, dtype=F64)
    y.backward(dy)
    y_ref.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad)
    if unit.weight_train is not None:
        lead = tuple(slice(0, n) for n in unit.weight_train.shape)
        torch.testing.assert_close(unit.weight_train.grad, w_ref.grad[lead])


def test_the_graph_holds_the_padding_before_of_the_traced_input():
    """A 3×3 stride-2 unit: 0 before on 8 px (one after, from the shapes), 1 on 7 px; a
    symmetric unit keeps its own."""
    weight, bias = torch.randn(4, 3, 3, 3), torch.zeros(4)
    unit = ConvUnit(weight, bias, stride=2, padding=SAME)
    with pytest.raises(ModelError, match="depends on the input size"):
        unit.ir_describe()
    for size, before in ((8, 0), (7, 1)):
        graph = trace(unit, torch.randn(1, 3, size, size))
        (op,) = graph.ops
        assert op.attrs == {"kernel": 3, "stride": 2, "padding": before, "groups": 1}
        n_in, n_out = size, graph.tensors[op.output].shape[-1]
        after = (n_out - 1) * 2 + 3 - before - n_in  # the IR's contract
        assert (n_out, after) == (math.ceil(size / 2), 1)
    symmetric = ConvUnit(weight, bias, stride=2, padding=1)
    assert symmetric.ir_describe()["attrs"]["padding"] == 1


def test_a_non_square_input_pads_each_axis_as_same_does():
    unit = ConvUnit(torch.randn(4, 3, 3, 3), torch.zeros(4), stride=2, padding=SAME)
    unit(torch.randn(1, 3, 8, 7))
    attrs = unit.ir_describe()["attrs"]  # "SAME": (0, 1) on 8 rows, (1, 1) on 7 columns
    assert (attrs["padding"], attrs["pad_left"]) == (0, 1)
    assert same_padding(8, 3, 2) == (0, 1) and same_padding(7, 3, 2) == (1, 1)


@pytest.mark.parametrize("padding", [-1, "valid", 1.5])
def test_a_padding_that_is_neither_a_size_nor_same_is_refused(padding):
    with pytest.raises(ValueError, match="is neither a size >= 0 nor 'same'"):
        ConvUnit(torch.randn(4, 3, 3, 3), torch.zeros(4), padding=padding)
