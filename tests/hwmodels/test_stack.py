"""The SRAM beside the arena: the stack table by core, the static data, the total the front
ranks by, and the call-graph bound that writes the table (on hand-made compiler output)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.stack_bound import CallGraph, _stack_change, read_call_graph
from tinytune.evaluators import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels.registry import get_device
from tinytune.hwmodels.stack import (
    CORE_TARGETS,
    RATE_BYTES,
    build_target,
    stack_bytes,
    stack_table,
)
from tinytune.spaces import get_supernet, make_preset


def test_every_microcontroller_core_and_the_cortex_a_have_a_stack_and_the_host_none() -> None:
    targets = stack_table()["targets"]
    assert set(targets) == {*CORE_TARGETS.values(), "aarch64"}
    for core, target in CORE_TARGETS.items():
        assert build_target(core) == target
        assert stack_bytes(core) == targets[target]["stack_bytes"] > 0
    assert build_target("Cortex-A72") == "aarch64"
    assert stack_bytes("Cortex-A72") == targets["aarch64"]["stack_bytes"]
    assert build_target("AMD EPYC 7B13") is None and stack_bytes("AMD EPYC 7B13") == 0
    # the Armv7E-M paths keep their buffers on the stack; the cores without DSP do not
    assert stack_bytes("Cortex-M7") > 3 * stack_bytes("Cortex-M0+")
    for row in targets.values():  # the chain starts at a function a firmware calls
        assert row["chain"][0].startswith("tt_") and row["compiler"]


@pytest.mark.parametrize("device", ["stm32f746", "rp2040", "esp32c3"])
def test_a_candidate_needs_its_arena_its_static_data_and_its_stack(device: str) -> None:
    spec = get_supernet("ofa-proxyless-w0.35")
    profile = get_device(device)
    int8 = HardwareEvaluator(spec, 10, HardwareConfig(precision="int8"), profile)
    cost = int8(make_preset("mcunetv3", spec))
    # the static data: the float32 logits, one exponent per gradient tensor, the rate's words
    assert cost.static_bytes == cost.memory.workspace_bytes + RATE_BYTES
    assert cost.stack_bytes == stack_bytes(profile.core) > 0
    assert cost.sram_bytes == cost.arena_bytes + cost.static_bytes + cost.stack_bytes
    # no bundle runs fp32, and without a device there is no stack to count
    fp32 = HardwareEvaluator(spec, 10, HardwareConfig(precision="fp32"), profile)
    assert (
        fp32(make_preset("mcunetv3", spec)).sram_bytes
        == fp32(make_preset("mcunetv3", spec)).arena_bytes
    )
    bare = HardwareEvaluator(spec, 10, HardwareConfig(precision="int8"))
    assert bare(make_preset("mcunetv3", spec)).stack_bytes == 0


CI = """graph: { title: "tt_model.c"
node: { title: "tt_train_step" label: "tt_train_step\\ntt_model.c:10:5\\n24 bytes (static)" }
node: { title: "tt_model.c:tt_forward" label: "tt_forward\\ntt_model.c:3:13\\n16 bytes (static)" }
node: { title: "tt_conv" label: "tt_conv\\nkernels/tt_forward.c:1:6" shape : ellipse }
node: { title: "tt_pool" label: "tt_pool\\nkernels/tt_lite.c:1:6" shape : ellipse }
edge: { sourcename: "tt_train_step" targetname: "tt_model.c:tt_forward" label: "tt_model.c:11:5" }
edge: { sourcename: "tt_model.c:tt_forward" targetname: "tt_pool" label: "tt_model.c:4:5" }
}
graph: { title: "kernels/tt_forward.c"
node: { title: "tt_conv" label: "tt_conv\\nkernels/tt_forward.c:1:6\\n400 bytes (static)" }
node: { title: "memcpy" label: "memcpy\\n<built-in>" shape : ellipse }
edge: { sourcename: "tt_conv" targetname: "memcpy" }
node: { title: "tt_pool" label: "tt_pool\\nkernels/tt_lite.c:1:6\\n40 bytes (static)" }
}
"""


def test_the_bound_is_the_deepest_chain_of_frames(tmp_path: Path) -> None:
    """Frames 24 + 16 + 40 along the calls made; 24 + 16 + 400 + 12 (memcpy's, from its
    disassembly) if the step called every kernel."""
    path = tmp_path / "train.elf-tt_model.ci"
    path.write_text(CI)
    graph = read_call_graph([path])
    assert graph.frames["tt_conv"] == 400 and graph.units["tt_conv"] == "kernels/tt_forward.c"
    assert graph.defined_in("tt_model.c") == ["tt_train_step"]  # the static tt_forward is not
    assert graph.bound("tt_train_step") == (
        80,
        ("tt_train_step", "tt_model.c:tt_forward", "tt_pool"),
    )
    graph.calling_any_kernel(["tt_conv", "tt_pool"])
    with pytest.raises(ValueError, match="memcpy"):
        graph.bound("tt_train_step")  # a routine that is neither compiled nor linked
    graph.add_routines({"memcpy": (12, set())})
    assert graph.bound("tt_train_step")[0] == 24 + 16 + 400 + 12
    assert CallGraph(frames={"f": 8}, calls={"f": {"f"}}).bound("f") == (8, ("f",))


def test_a_kernels_own_calls_stay_as_compiled() -> None:
    """The step may call any kernel; a kernel calls only what it was compiled to call."""
    graph = CallGraph(
        frames={"step": 8, "a": 100, "b": 40, "c": 300},
        calls={"step": {"a"}, "a": {"b"}},
        units={"step": "tt_model.c", "a": "kernels/x.c", "b": "kernels/x.c", "c": "kernels/y.c"},
    )
    graph.calling_any_kernel(["a", "b", "c"])
    assert graph.calls["a"] == {"b"}
    assert graph.bound("step") == (308, ("step", "c"))  # not step -> a -> c (408)


@pytest.mark.parametrize(
    ("op", "args", "down"),
    [
        ("push", "{r4, r5, r6, r7, lr}", 20),
        ("push", "{r4-r11, lr}", 36),
        ("vpush", "{d8-d9}", 16),
        ("sub", "sp, #12", 12),
        ("sub.w", "sp, sp, #4576", 4576),
        ("add", "sp, #12", -12),
        ("pop", "{r4, r5, pc}", -12),
        ("add", "sp,sp,-48", 48),  # RISC-V's addi, as objdump prints it
        ("add", "sp,sp,48", -48),
        ("stp", "x29, x30, [sp, #-32]!", 32),
        ("ldp", "x29, x30, [sp], #32", -32),
        ("add", "r0, sp, #8", 0),
        ("str", "r0, [sp, #4]", 0),
    ],
)
def test_a_routines_frame_is_read_off_its_instructions(op: str, args: str, down: int) -> None:
    assert _stack_change(op, args) == down
