"""MCUNetV3's analytic extra memory, against values computed by hand from its definition."""

from __future__ import annotations

import torch
from torch import nn

from tinytune.hwmodels import mcunetv3_extra_bytes
from tinytune.ir import trace
from tinytune.models.layers import Classifier, ConvUnit, GlobalAvgPool


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.c0 = ConvUnit(torch.randn(8, 3, 3, 3), torch.zeros(8), padding=1, act="relu", index=0)
        self.c1 = ConvUnit(
            torch.randn(8, 1, 3, 3), torch.zeros(8), padding=1, groups=8, act="relu", index=1
        )
        self.c2 = ConvUnit(torch.randn(16, 8, 1, 1), torch.zeros(16), act="relu", index=2)
        self.pool = GlobalAvgPool()
        self.fc = Classifier(16, 10, g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.c2(self.c1(self.c0(x)))))


def test_hand_computed_extra_memory() -> None:
    net = _Net()
    net.c0.set_bias_update(False)
    net.c1.set_bias_update(True)
    net.c1.set_weight_update(0.5)  # depthwise: 4 of 8 channels
    net.c2.set_bias_update(True)
    net.c2.set_weight_update(0.25)  # 2 of 8 input channels
    graph = trace(net, torch.zeros(2, 3, 6, 6))  # batch 2: the number is per sample
    c1 = 8 * 36 + 8 * 32 + (36 * 4 * 8 + 4 * 9 * 8)  # mask, bias, 4 input channels, 4 kernels
    c2 = 16 * 36 + 16 * 32 + (36 * 2 * 8 + 16 * 2 * 8)  # mask, bias, 2 channels, 16×2 weights
    fc = 16 * 8
    assert mcunetv3_extra_bytes(graph) == (c1 + c2 + fc + 7) // 8


def test_classifier_only_counts_its_input() -> None:
    net = _Net()
    graph = trace(net, torch.zeros(1, 3, 6, 6))
    assert mcunetv3_extra_bytes(graph) == 16
