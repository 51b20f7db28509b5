"""The C renderer: templates for every kernel, exact constants, one arena of the planner's size,
and small networks' rendered steps against the simulator, bit for bit."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from string import Template

import numpy as np
import pytest

from tests.bundle.support import make, needs, parse_dump, replay, write_test_bundle
from tests.quant.nets import LITE_RESOLUTION, RESOLUTION, SCHEMES, images, lite_net, tiny_net
from tinytune.bundle.render import c_array, c_float
from tinytune.bundle.templates import KERNEL_TEMPLATES
from tinytune.lowering.program import KERNELS
from tinytune.quant import QuantizedNet, quantize

LR = 0.01


def test_every_kernel_has_a_template_that_uses_each_operand_once() -> None:
    assert set(KERNEL_TEMPLATES) == set(KERNELS)
    for kernel, operands in KERNELS.items():
        template = KERNEL_TEMPLATES[kernel]
        named = set()
        for text in (template.call, template.decls):
            for m in Template.pattern.finditer(text):
                named.add(m["named"] or m["braced"])
        named.discard(None)
        assert named - {"id"} == set(operands), kernel


@pytest.mark.parametrize(
    "value", [0.0, -0.0, 1.0, 0.01, -3.5, 1e-30, 2.0**-149, 3.4028234663852886e38, 1 / 3]
)
def test_floats_are_written_exactly(value: float) -> None:
    text = c_float(value)
    assert text.endswith("f")
    assert float.fromhex(text[:-1]) == float(np.float32(value))


def test_constant_arrays_keep_their_values() -> None:
    values = np.array([-128, 0, 127, 5], np.int8)
    text = c_array("k_x", values)
    assert text.startswith("static const int8_t k_x[4] = {")
    assert [int(v) for v in re.findall(r"-?\d+", text.split("=")[1])] == values.tolist()


def _quantized(case: str) -> QuantizedNet:
    if case == "lite":
        return quantize(lite_net(SCHEMES["bias+pw 1/4"]), [images(16, resolution=LITE_RESOLUTION)])
    return quantize(tiny_net(SCHEMES[case]), [images(16)])


def _resolution(case: str) -> int:
    return LITE_RESOLUTION if case == "lite" else RESOLUTION


def test_the_arena_is_one_static_array_of_the_planners_size(tmp_path: Path) -> None:
    q = _quantized("sparse")
    program, *_ = write_test_bundle(tmp_path / "b", q, images(2, seed=3), images(2, seed=4))
    header = (tmp_path / "b" / "tt_model.h").read_text()
    source = (tmp_path / "b" / "tt_model.c").read_text()
    assert f"#define TT_ARENA_BYTES {program.report.arena_bytes}\n" in header
    assert f"#define TT_SCRATCH_BYTES {program.scratch_bytes}\n" in header
    assert f"#define TT_EXPONENT_BYTES {4 * program.n_exponents}\n" in header
    assert len(re.findall(r"^static int8_t tt_arena\[TT_ARENA_BYTES\]", source, re.M)) == 1
    assert "malloc" not in source and "calloc" not in source
    # every arena pointer lies inside the arena
    offsets = [int(v) for v in re.findall(r"TT_ARENA\((\d+)\)", source)]
    assert offsets and max(offsets) < program.arena_bytes


@needs("host")
@pytest.mark.parametrize("case", [*SCHEMES, "lite"])
def test_rendered_steps_match_the_simulator(case: str, tmp_path: Path) -> None:
    """Every scheme of the tiny network, and lite residual branches (every kernel kind):
    two epochs of four steps; logits, losses, accuracies, trained parameters, bit for bit."""
    q = _quantized(case)
    r = _resolution(case)
    folder = tmp_path / "bundle"
    program, train, evaluation = write_test_bundle(
        folder, q, images(4, seed=21, resolution=r), images(3, seed=22, resolution=r), lr=LR
    )
    dump = parse_dump(make(folder, "run-host", defs="-DTT_DUMP"))
    assert set(dump.params) == set(program.params)
    assert replay(q, LR, train, evaluation, dump) == 8


@needs("host")
def test_sanitized_build_runs_clean_with_intact_guards(tmp_path: Path) -> None:
    q = _quantized("lite")
    folder = tmp_path / "bundle"
    r = LITE_RESOLUTION
    _, train, evaluation = write_test_bundle(
        folder, q, images(3, seed=5, resolution=r), images(2, seed=6, resolution=r), lr=LR
    )
    out = make(folder, "run-host-asan", defs="-DTT_DUMP")
    assert out.endswith("guard bytes intact\n")
    replay(q, LR, train, evaluation, parse_dump(out))


GUARD_DRIVER = r"""
#include <stdio.h>
#include "tt_model.h"
/* One byte past the arena, reached from a parameter at a known arena offset. */
int main(void) {
    const tt_param_view *p = tt_param(0);
    int8_t *end = (int8_t *)p->data - OFFSET + TT_ARENA_BYTES;
    tt_model_init();
    printf("%d", tt_guard_intact());
    *end = 0;
    printf(" %d\n", tt_guard_intact());
    return 0;
}
"""


@needs("host")
def test_guard_bytes_catch_a_write_past_the_arena(tmp_path: Path) -> None:
    q = _quantized("sparse")
    folder = tmp_path / "bundle"
    program, *_ = write_test_bundle(folder, q, images(1, seed=1), images(1, seed=2))
    first = next(iter(program.params.values()))[0].offset
    (folder / "guard.c").write_text(GUARD_DRIVER.replace("OFFSET", str(first)))
    binary = tmp_path / "guard"
    kernels = sorted(str(p) for p in (folder / "kernels").glob("*.c"))
    subprocess.run(
        ["gcc", "-std=c99", "-O1", "-DTT_GUARD", f"-I{folder}", f"-I{folder / 'kernels'}",
         str(folder / "guard.c"), str(folder / "tt_model.c"), *kernels, "-o", str(binary),
         "-lm"],
        check=True,
    )  # fmt: skip
    done = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    assert done.stdout == "1 0\n"


@needs("host")
def test_strings_reach_c_as_their_utf_8_bytes(tmp_path: Path) -> None:
    """Quotes, backslashes, trigraphs, control characters, any Unicode and the bytes a file
    name that is not UTF-8 decodes to (surrogate escapes): a C compiler reads each literal back
    as exactly those bytes."""
    from tinytune.bundle.render import c_string

    names = ['say "hi"', "back\\slash", "??= ??/ ??'", "tab\tnew\nline\x7f", "café ☕ 😀",
             "raw \udcff\udc80", "0123", ""]  # fmt: skip
    literals = ",\n".join(f"    {c_string(name)}" for name in names)
    program = tmp_path / "strings.c"
    program.write_text(
        "#include <stdio.h>\n"
        f"static const char *const names[] = {{\n{literals}\n}};\n"
        "int main(void) {\n    unsigned i;\n    const char *p;\n"
        "    for (i = 0; i < sizeof names / sizeof names[0]; i++) {\n"
        '        printf("[");\n'
        '        for (p = names[i]; *p; p++) printf("%02x", (unsigned)(unsigned char)*p);\n'
        '        printf("]\\n");\n    }\n    return 0;\n}\n'
    )
    binary = tmp_path / "strings"
    cc = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wtrigraphs"]
    subprocess.run([*cc, str(program), "-o", str(binary)], check=True)
    printed = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    got = [bytes.fromhex(line.strip("[]")) for line in printed.splitlines()]
    assert got == [name.encode("utf-8", "surrogateescape") for name in names]
