"""The exported C bundle's training step on the host vs PyTorch eager fp32, for one candidate.

The candidate (default: the MCUNetV3-style preset on the smallest ProxylessNAS sub-network at
32 px, the one ``tests/bundle`` checks) is exported as a bundle; a timing driver is compiled
with its sources (``gcc -O3``, the Makefile's level for Linux) and runs ``tt_train_step`` on the
embedded samples (batch 1). The same network, float32 with the same update scheme (what the search
fine-tunes), runs PyTorch training steps with one thread in a process of its own
(``tinytune.hwmodels.profiler.measure_step``: forward, cross-entropy, backward, SGD, batch 1).

Both are timed side by side in one run, interleaved: in every round each side runs
``--per-round`` consecutive steps, the two sides in a seeded shuffled order, while the other side
waits, until each has ``--repeats`` timed steps (after untimed warm-up steps: five in C, ten in
PyTorch). Both report the **median** of all their timed steps, so a burst of other work on a
shared machine falls on both sides alike.

Memory, as measured:

* C: the static buffers the model declares (arena + scratch + exponents) and the whole
  process's peak resident set (``VmHWM`` of the timing driver at its end, which includes the C
  library, the program's code and its constants).
* PyTorch: the memory planner's fp32 prediction of the step's peak (activations, what
  autograd keeps, gradients, trained weights), the growth of the peak resident set over the
  timed steps (``VmHWM`` after them minus ``VmRSS`` before them, the peak reset through
  ``/proc/self/clear_refs`` after ten untimed steps), and the process's peak resident set
  (torch loaded, the network built).

    python3 -m bench.bundle_step [--weights FILE] [--preset mcunetv3] [--resolution 32]
        [--supernet ofa-proxyless-w0.35] [--repeats 51] [--per-round 3] [--json OUT]
        [--kernels DIR]

``--kernels DIR`` builds the same bundle a second time with DIR's kernel sources in its
``kernels/`` (e.g. an earlier version's, ``git archive REV tinytune/lowering/csrc``) and times it
in the same rounds, a third side, so that the two kernels' steps are compared median against
median in one run.

Without ``--weights`` the cached pre-trained supernet is used when there is one, else randomly
initialised weights (the step's cost does not depend on the weights' values).
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.harness import DEFAULT_DATASET, add_arguments, cpu_model, write_json

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tt_data.h"
#include "tt_model.h"

/* the peak resident set of this process (Linux), in bytes */
static long peak_rss(void) {
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb * 1024;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* reads a step count per line from stdin, runs that many timed steps and prints their
   seconds, one per line, then "done"; at the end of its input prints its peak resident set */
int main(void) {
    int n, r, k = 0, warmup = 5;
    float loss;
    tt_model_init();
    for (r = 0; r < warmup; r++, k++) {
        tt_train_step(tt_train_images[k % TT_TRAIN_SAMPLES],
                      (int)tt_train_labels[k % TT_TRAIN_SAMPLES], &loss);
    }
    while (scanf("%d", &n) == 1) {
        for (r = 0; r < n; r++, k++) {
            double start = now();
            tt_train_step(tt_train_images[k % TT_TRAIN_SAMPLES],
                          (int)tt_train_labels[k % TT_TRAIN_SAMPLES], &loss);
            printf("%.9f\n", now() - start);
        }
        printf("done\n");
        fflush(stdout);
    }
    printf("peak-rss %ld\n", peak_rss());
    return 0;
}
"""


def _vm(field: str) -> int:
    """A ``/proc/self/status`` memory field in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _torch_worker(candidate_json: str, checkpoint: str, conn) -> None:
    """In a fresh process: PyTorch fp32 training steps of the candidate, batch 1, on request.

    Sends the planner's fp32 peak once ready; then, for every step count received, the seconds
    of that many steps; for ``None``, its memory figures, and ends.
    """
    import torch

    from tinytune.data import get_dataset
    from tinytune.hwmodels import plan_memory
    from tinytune.hwmodels.profiler import measure_step
    from tinytune.ir import trace
    from tinytune.models import build_candidate, load_supernet
    from tinytune.spaces import Candidate, get_supernet

    torch.set_num_threads(1)
    candidate = Candidate.from_json(candidate_json)
    spec = get_supernet(candidate.supernet)
    splits = get_dataset(DEFAULT_DATASET).load(candidate.subnet.resolution)
    calib = torch.tensor(splits.train.x[:256]).split(64)
    net = build_candidate(candidate, load_supernet(spec, Path(checkpoint)), 10, calib)
    example = torch.tensor(splits.train.x[:1])
    planned = plan_memory(trace(net, example), precision="fp32").peak_bytes
    measure_step(net, example, warmup=5, repeats=5)  # first-call set-up out of the figure
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set
    before = _vm("VmRSS")
    conn.send(planned)
    while (n := conn.recv()) is not None:
        conn.send(list(measure_step(net, example, warmup=0, repeats=n).samples))
    conn.send({"rss_growth_bytes": _vm("VmHWM") - before, "peak_rss_bytes": _vm("VmHWM")})


def _interleave(
    c_drivers: dict[str, subprocess.Popen],
    torch_conn,
    repeats: int,
    per_round: int,
    seed: int = 0,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Time every side (each C driver, and PyTorch as ``torch``) in rounds, in a shuffled
    order each round; see the module docstring.

    Returns:
        each side's step seconds, and each C driver's peak resident set in bytes.
    """

    def c_steps(driver: subprocess.Popen, n: int) -> list[float]:
        driver.stdin.write(f"{n}\n")
        driver.stdin.flush()
        times = []
        while (line := driver.stdout.readline().strip()) != "done":
            times.append(float(line))
        return times

    def torch_steps(n: int) -> list[float]:
        torch_conn.send(n)
        return torch_conn.recv()

    times: dict[str, list[float]] = {side: [] for side in [*c_drivers, "torch"]}
    order = list(times)
    rng = random.Random(seed)
    while len(times["torch"]) < repeats:
        n = min(per_round, repeats - len(times["torch"]))
        rng.shuffle(order)
        for side in order:
            times[side] += torch_steps(n) if side == "torch" else c_steps(c_drivers[side], n)
    rss = {}
    for side, driver in c_drivers.items():
        driver.stdin.close()
        tail = driver.stdout.read().split()
        driver.wait()
        rss[side] = int(tail[tail.index("peak-rss") + 1])
    return times, rss


def _checkpoint(weights: str | None, spec, tmp: Path) -> tuple[Path, str]:
    from tinytune.models import (
        PretrainRecipe,
        checkpoint_path,
        save_supernet,
    )
    from tinytune.models.ofa_adapter import build_ofa_supernet

    if weights:
        return Path(weights), weights
    cached = checkpoint_path(spec, PretrainRecipe())
    if cached.is_file():
        return cached, f"cached pre-training {cached.name}"
    path = tmp / "random.pt"
    save_supernet(build_ofa_supernet(spec, 1000, seed=0), spec, PretrainRecipe(steps=1), path)
    return path, "randomly initialised weights"


@dataclass(frozen=True)
class _Timed:
    """What one run measured: the bundle, its weights, both sides' step times and memory."""

    bundle: Any
    weights_label: str
    planned: int
    c_times: list[float]
    torch_times: list[float]
    c_rss: int
    torch_memory: dict[str, int]
    other_times: list[float] | None = None  # the bundle with --kernels DIR's sources


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="supernet checkpoint (default: cached, else random)")
    parser.add_argument("--preset", default="mcunetv3")
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=51, help="timed steps of each side")
    parser.add_argument(
        "--per-round", type=int, default=3, help="consecutive steps of one side per round"
    )
    parser.add_argument(
        "--kernels", type=Path, help="another kernels/ folder, timed as a third side"
    )
    add_arguments(
        parser,
        supernet=True,
        device=True,
        json=True,
        help={"json": "also write the figures to this file"},
    )
    return parser


def _compile_driver(folder: Path) -> None:
    """Compiles the timing driver with the bundle's sources in ``folder`` (``bench_step``)."""
    (folder / "bench_step.c").write_text(DRIVER)
    sources = ["bench_step.c", "tt_model.c", "tt_data.c"]
    sources += sorted(f"kernels/{p.name}" for p in (folder / "kernels").glob("*.c"))
    cflags = ["-std=c99", "-ffp-contract=off", "-O3", "-D_POSIX_C_SOURCE=199309L"]
    cmd = ["gcc", *cflags, "-I.", "-Ikernels", *sources, "-o", "bench_step", "-lm"]
    subprocess.run(cmd, cwd=folder, check=True)


def _time_steps(args: argparse.Namespace, spec: Any, candidate: Any, device: Any) -> _Timed:
    """Exports and compiles the bundle, then times its steps against PyTorch's, interleaved."""
    from tinytune.bundle import BundleRequest, build_bundle, write_bundle

    with tempfile.TemporaryDirectory(prefix="tt-bench-") as tmp_name:
        tmp = Path(tmp_name)
        checkpoint, weights_label = _checkpoint(args.weights, spec, tmp)
        bundle = build_bundle(BundleRequest(candidate, checkpoint, device, samples=8, epochs=1))
        folder = write_bundle(tmp / "bundle", bundle.files, bundle.manifest)
        folders = {"c": folder}
        if args.kernels is not None:  # the same bundle with the other kernels' sources
            folders["other"] = shutil.copytree(folder, tmp / "other")
            for source in args.kernels.glob("*"):
                if source.suffix in (".c", ".h"):
                    shutil.copy(source, folders["other"] / "kernels" / source.name)
        for each in folders.values():
            _compile_driver(each)
        ctx = multiprocessing.get_context("spawn")
        torch_conn, worker_conn = ctx.Pipe()
        worker = ctx.Process(
            target=_torch_worker, args=(candidate.to_json(), str(checkpoint), worker_conn)
        )
        worker.start()
        planned = torch_conn.recv()  # the network is built and warmed up
        c_drivers = {
            side: subprocess.Popen(
                [str(each / "bench_step")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for side, each in folders.items()
        }
        times, rss = _interleave(c_drivers, torch_conn, args.repeats, args.per_round)
        torch_conn.send(None)
        torch_memory = torch_conn.recv()
        worker.join()
    return _Timed(
        bundle, weights_label, planned, times["c"], times["torch"], rss["c"], torch_memory,
        times.get("other"),
    )  # fmt: skip


def _report(args: argparse.Namespace, spec: Any, candidate: Any, device: Any, t: _Timed) -> None:
    """Prints the figures of both sides and the command; with ``--json``, writes them too."""
    bundle, planned, c_rss, torch_memory = t.bundle, t.planned, t.c_rss, t.torch_memory
    model = bundle.model
    static = model.arena_bytes + model.scratch_bytes + model.exponent_bytes
    c_step, torch_step = statistics.median(t.c_times), statistics.median(t.torch_times)
    rounds = -(-args.repeats // args.per_round)
    rows = [
        ("training step, median (batch 1, 1 thread)", f"{1000 * c_step:.2f} ms",
         f"{1000 * torch_step:.2f} ms"),
        ("training memory: C static buffers / planner fp32 peak",
         _kb(static), _kb(planned)),
        ("training memory: PyTorch peak RSS growth over the steps", "-",
         _kb(torch_memory["rss_growth_bytes"])),
        ("process peak RSS", _kb(c_rss), _kb(torch_memory["peak_rss_bytes"])),
    ]  # fmt: skip
    print(
        f"candidate {candidate.key[:12]}: {args.preset} on {spec.name} at {args.resolution} px, "
        f"{t.weights_label}; {cpu_model()}"
    )
    print(
        f"timing: median of {args.repeats} steps per side, interleaved in {rounds} rounds of "
        f"up to {args.per_round} steps per side (shuffled order, one run)"
    )
    print(
        f"C bundle: arena {model.arena_bytes} B + scratch {model.scratch_bytes} B + exponents "
        f"{model.exponent_bytes} B; constants {model.flash_bytes} B; {model.n_calls} calls per "
        f"step; predicted on {device.name}: "
        f"{1000 * bundle.manifest['predicted_latency']['train_step_s']:.1f} ms"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'C bundle (int8)':>16}  {'PyTorch eager fp32':>18}")
    for label, c_value, torch_value in rows:
        print(f"{label:{width}}  {c_value:>16}  {torch_value:>18}")
    print(f"PyTorch median / C median: {torch_step / c_step:.2f}")
    if t.other_times is not None:
        other = statistics.median(t.other_times)
        print(
            f"C bundle with the kernels of {args.kernels}: median {1000 * other:.2f} ms; "
            f"PyTorch median / its median: {torch_step / other:.2f}; "
            f"its median / this version's: {other / c_step:.2f}"
        )
    print("command: python3 -m bench.bundle_step " + " ".join(sys.argv[1:]))
    if args.json:
        figures = {
            "candidate": candidate.key,
            "preset": args.preset,
            "resolution": args.resolution,
            "c_step_median_s": c_step,
            "torch_step_median_s": torch_step,
            "c_static_bytes": static,
            "torch_planned_fp32_bytes": planned,
            "torch_rss_growth_bytes": torch_memory["rss_growth_bytes"],
            "c_peak_rss_bytes": c_rss,
            "torch_peak_rss_bytes": torch_memory["peak_rss_bytes"],
        }
        if t.other_times is not None:
            figures["other_kernels"] = str(args.kernels)
            figures["other_step_median_s"] = statistics.median(t.other_times)
        write_json(args.json, figures)


def main() -> None:
    args = _parser().parse_args()

    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    if shutil.which("gcc") is None:
        sys.exit("bench/bundle_step.py needs gcc")
    spec = get_supernet(args.supernet)
    candidate = make_preset(args.preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=args.resolution))
    device = get_device(args.device)
    _report(args, spec, candidate, device, _time_steps(args, spec, candidate, device))


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 10 * 1024 * 1024 else f"{n / 2**20:.1f} MB"


if __name__ == "__main__":
    main()
