"""The planner's int8 engine costs against the lowered training step of the exporter."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tinytune.hwmodels.memory import CODE_BYTES_BASE, CODE_BYTES_MBV3, CODE_BYTES_PER_CALL
from tinytune.lowering.program import lower_step
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.quant import quantize
from tinytune.spaces import get_supernet, make_preset

FAMILIES = ("ofa-proxyless-w0.35", "ofa-mbv3-w0.35")


@pytest.fixture(scope="module", params=FAMILIES)
def supernet(request: pytest.FixtureRequest) -> tuple[str, torch.nn.Module]:
    return request.param, build_ofa_supernet(get_supernet(request.param), 10, seed=0)


@pytest.mark.parametrize("preset", ["last", "bias-only", "mcunetv3", "tinytl", "full"])
def test_workspace_flash_and_calls_match_the_lowered_step(preset: str, supernet) -> None:
    family, net = supernet
    c = make_preset(preset, get_supernet(family))
    c = replace(c, subnet=replace(c.subnet, resolution=32))
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    program = lower_step(quantize(build_candidate(c, net, 10, calibration=[x]), [x]), 0.01)
    report = program.report
    assert report.workspace_bytes == program.scratch_bytes + 4 * max(1, program.n_exponents)
    assert report.arena_bytes == program.arena_bytes
    # every constant array, and the trained parameters' initial values, byte for byte
    constants = sum(a.nbytes for _, a in program.flash.values())
    assert report.flash_bytes == constants + sum(len(data) for _, data in program.arena_init)
    # the code estimate counts one call per op phase; the exporter fuses or splits a few
    base = CODE_BYTES_BASE + (CODE_BYTES_MBV3 if "mbv3" in family else 0)
    calls = (report.code_bytes - base) / CODE_BYTES_PER_CALL
    assert 0.8 * len(program.calls) <= calls <= 1.05 * len(program.calls)
