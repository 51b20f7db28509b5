"""The most stack a bundle's functions can take, from the compiler's own figures.

GCC's ``-fstack-usage -fcallgraph-info=su`` writes, for each compiled unit, the frame of every
function it defines (all of the bundle's are ``static``: no frame is sized at run time) and the
calls each makes (a ``.ci`` file). The C library's and the compiler's run-time routines
(``memcpy``, the soft-float ``__aeabi_dadd``, ...) come compiled, without such files: their
frames and calls are read off the linked image's disassembly (the ``push``, ``vpush`` and
``sub sp`` of an Arm function, the ``addi sp, sp, -N`` of a RISC-V one; the most the stack
pointer goes down along the function's instructions in order, a return ending a path).

The bound of a function is its frame plus the largest bound among the functions it calls: the
deepest chain of calls the code allows, whether or not a run takes it (a kernel's dispatch on
its geometry is not followed). The bundle has no recursion and no calls through pointers.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TOOLS", "CallGraph", "bundle_bound", "linked_routines", "read_call_graph"]

TOOLS = {  # a target's compiler and disassembler
    "cortex-m7": ("arm-none-eabi-gcc", "arm-none-eabi-objdump"),
    "cortex-m4": ("arm-none-eabi-gcc", "arm-none-eabi-objdump"),
    "cortex-m0plus": ("arm-none-eabi-gcc", "arm-none-eabi-objdump"),
    "rv32imc": ("riscv64-unknown-elf-gcc", "riscv64-unknown-elf-objdump"),
    "aarch64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump"),
}
KERNEL_UNITS = (
    "kernels/tt_forward.c", "kernels/tt_backward.c", "kernels/tt_classifier.c", "kernels/tt_lite.c"
)  # fmt: skip
"""The units of the training step's kernels (the image and front-end units are the input's)."""
STACK_FLAGS = "-fstack-usage -fcallgraph-info=su"


def bundle_bound(
    folder: Path, target: str, any_kernel: bool = False
) -> tuple[int, tuple[str, ...]]:
    """The most stack a function of the bundle in ``folder`` (one that ``tt_model.h``
    declares) can take on ``target``, and its chain of calls, built with the bundle's own
    Makefile; ``any_kernel``: as if its step called every kernel of the step.

    Raises:
        subprocess.CalledProcessError: the build failed."""
    build = "build-stack-bound"
    link_map = f"{build}/{target}.map"
    shutil.rmtree(folder / build / target, ignore_errors=True)  # built again with the flags
    (folder / build).mkdir(exist_ok=True)
    subprocess.run(
        ["make", "-s", target, f"BUILD={build}",
         f"EXTRA_CFLAGS={STACK_FLAGS} -Wl,-Map={link_map}"],
        cwd=folder, check=True, capture_output=True, text=True, timeout=900,
        env={**os.environ, "CCACHE_DISABLE": "1"},  # a cached object comes without its .ci
    )  # fmt: skip
    out = folder / build / target
    graph = read_call_graph(sorted(out.rglob("*.ci")))  # beside each object
    objdump = TOOLS[target][1]
    routines = linked_routines(out / ("train" if target == "aarch64" else "train.elf"), objdump)
    # the routines of functions the image leaves out, from the archives it linked
    for archive in sorted(set(re.findall(r"(/\S+\.a)\(", (folder / link_map).read_text()))):
        for name, routine in _archive_routines(archive, objdump).items():
            routines.setdefault(name, routine)
    graph.add_routines(routines)
    if any_kernel:
        graph.calling_any_kernel([f for unit in KERNEL_UNITS for f in graph.defined_in(unit)])
    return max(graph.bound(entry) for entry in graph.defined_in("tt_model.c"))


_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
_FRAME = re.compile(r"\\n(\d+) bytes \(([\w,]+)\)")
_FUNCTION = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")
_CALL = re.compile(r"^(?:bl|blx|jal|call|b\.w|b|j|tail)\s+(?:ra,)?\s*[0-9a-f]+ <([^>+]+)>$")


@dataclass
class CallGraph:
    """Frames (bytes) and calls of a program's functions, by name; a static function is
    named ``file:name`` as GCC names it."""

    frames: dict[str, int] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # the unit that defines each function

    def defined_in(self, unit: str) -> list[str]:
        """The functions of a unit (``tt_model.c``) that other units can call."""
        return sorted(f for f, u in self.units.items() if u == unit and ":" not in f)

    def calling_any_kernel(self, kernels: list[str]) -> None:
        """Let every function outside the kernels' units that calls a kernel call all of them:
        the deepest chain of any network's step, whichever kernels its own calls. A kernel's own
        calls (an in-place convolution calling the convolution) are the same in every bundle,
        so they stay as compiled."""
        kernel_units = {self.units.get(k) for k in kernels} - {None}
        for caller, callees in self.calls.items():
            if self.units.get(caller) not in kernel_units and callees & set(kernels):
                callees.update(kernels)

    def add_routines(self, routines: dict[str, tuple[int, set[str]]]) -> None:
        """Size the functions the graph calls but does not define, and what they call, from
        ``routines`` (:func:`linked_routines`)."""
        wanted = [c for cs in self.calls.values() for c in cs if c not in self.frames]
        while wanted:
            name = wanted.pop()
            if name in self.frames or name in self.calls:
                continue
            if name not in routines:  # not linked: its callers were not either
                continue
            self.frames[name], self.calls[name] = routines[name]
            wanted.extend(c for c in self.calls[name] if c not in self.frames)

    def bound(self, entry: str) -> tuple[int, tuple[str, ...]]:
        """The most stack ``entry`` can take, in bytes, and the chain of calls that takes it."""

        @functools.cache
        def deepest(name: str, depth: int) -> tuple[int, tuple[str, ...]]:
            if depth > 64:
                raise ValueError(f"calls from {entry} go deeper than 64: recursion?")
            if name not in self.frames:
                raise ValueError(f"the frame of {name} is not known: neither compiled nor linked")
            below = [deepest(c, depth + 1) for c in self.calls.get(name, ()) if c != name]
            most, chain = max(below, default=(0, ()))
            return self.frames[name] + most, (name, *chain)

        return deepest(entry, 0)


def read_call_graph(files: Iterable[Path]) -> CallGraph:
    """The call graph of the units whose ``.ci`` files are ``files``."""
    graph = CallGraph()
    for path in files:
        text = path.read_text()
        for title, label in _NODE.findall(text):
            frame = _FRAME.search(label)
            if frame is not None:  # "dynamic,bounded": the figure is the most it takes
                if frame[2] not in ("static", "dynamic,bounded"):
                    raise ValueError(f"{path}: {title} has a frame sized at run time ({frame[2]})")
                graph.frames[title] = int(frame[1])
                graph.units[title] = label.split("\\n")[1].split(":")[0]
        for source, target in _EDGE.findall(text):
            graph.calls.setdefault(source, set()).add(target)
    return graph


@functools.cache
def _archive_routines(archive: str, objdump: str) -> dict[str, tuple[int, set[str]]]:
    """:func:`linked_routines` of a library archive, read once per process (a C library's
    disassembly takes seconds)."""
    return linked_routines(Path(archive), objdump)


def linked_routines(elf: Path, objdump: str) -> dict[str, tuple[int, set[str]]]:
    """Every function of the linked image ``elf``, by each of its names: its frame and the
    functions it calls or jumps to, from the disassembly."""
    text = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(elf)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    found: dict[str, tuple[int, set[str]]] = {}
    name, depth, most, calls = "", 0, 0, set()
    for line in [*text.splitlines(), "0 <>:"]:
        head = _FUNCTION.match(line)
        if head is not None and head[1].startswith("."):  # an archive's local label
            continue
        if head is not None:
            if name:
                found[name] = (most, calls - {name})
            name, depth, most, calls = head[1], 0, 0, set()
            continue
        parts = line.split(":", 1)
        if len(parts) < 2 or not name:
            continue
        fields = parts[1].split(None, 1)
        if not fields:
            continue
        op, args = fields[0], (fields[1] if len(fields) > 1 else "").split(";")[0].strip()
        depth += _stack_change(op, args)
        most = max(most, depth)
        called = _CALL.match(f"{op} {args}".strip())
        if called is not None and called[1] != name and not called[1].startswith("."):
            calls.add(called[1])
        if _returns(op, parts[1]):
            depth = most  # a return ends one path; the code after it is in the frame
    return _with_aliases(found, elf, objdump)


def _with_aliases(
    found: dict[str, tuple[int, set[str]]], elf: Path, objdump: str
) -> dict[str, tuple[int, set[str]]]:
    """``found`` and the other names of its functions (``__aeabi_dadd`` is ``__adddf3``):
    the disassembly labels an address with one of its symbols only."""
    nm = objdump.replace("objdump", "nm")
    text = subprocess.run([nm, str(elf)], check=True, capture_output=True, text=True).stdout
    names: dict[tuple[str, str], list[str]] = {}  # by (archive member, address)
    member = ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 1 and line.endswith(":"):  # an archive's member: addresses restart
            member = line
        elif len(parts) == 3 and parts[1] in "TtWwi":  # i: an indirect function's resolver
            names.setdefault((member, parts[0]), []).append(parts[2])
    for same in names.values():
        known = [n for n in same if n in found]
        for n in same:
            if known and n not in found:
                found[n] = found[known[0]]
    return found


def _stack_change(op: str, text: str) -> int:
    """How far down (bytes) an instruction moves the stack pointer."""
    text = text.replace(" ", "")
    if op in ("push", "push.w", "stmdb") and ("{" in text) and (op != "stmdb" or "sp!" in text):
        return 4 * _registers(text)
    if op in ("vpush", "vpush.64", "vpush.32"):
        size = 8 if "d" in text.split("{", 1)[1] else 4
        return size * _registers(text)
    if op.startswith("pop") and "{" in text:
        return -4 * _registers(text)
    pre = re.search(r"\[sp,#-(\d+)\]!$", text)  # AArch64: stp x29, x30, [sp, #-N]!
    if pre is not None:
        return int(pre[1])
    post = re.search(r"\[sp\],#(\d+)$", text)  # ldp x29, x30, [sp], #N
    if post is not None:
        return -int(post[1])
    sub = re.fullmatch(r"(sub|subw|sub\.w|add|addw|add\.w)sp,(?:sp,)?#(\d+)", op + text)
    if sub is not None:
        return int(sub[2]) * (1 if op.startswith("sub") else -1)
    addi = re.fullmatch(r"(?:addi|add|c\.addi16sp)sp,sp,(-?\d+)", op + text)
    if addi is not None:
        return -int(addi[1])
    return 0


def _registers(text: str) -> int:
    inside = text.split("{", 1)[1].split("}", 1)[0]
    count = 0
    for part in inside.split(","):
        if "-" in part:
            a, b = part.split("-")
            count += int(re.sub(r"\D", "", b)) - int(re.sub(r"\D", "", a)) + 1
        else:
            count += 1
    return count


def _returns(op: str, text: str) -> bool:
    text = text.replace(" ", "")
    return (
        (op.startswith("pop") and "pc" in text)
        or op in ("bxlr", "ret")
        or text.endswith(("bxlr", "ret"))
    )
