"""The headline results of TinyTL and MCUNetV3, measured on tinytune's own pipeline.

One row per claim: the paper's figure, tinytune's figure on its default supernet
(``ofa-proxyless-w0.35``, the shipped checkpoint, its default sub-network) and data (``digits``),
the network and resolution it was measured on, and why the two differ where they do.

* Memory is the planner's peak of one training step at batch 1 (``tinytune.hwmodels``): fp32
  where the paper counted a framework's float memory, the int8 arena where it measured its own
  engine; the int8 arena of every exportable scheme is checked against the bundle's ``tt_arena``
  (the exporter lays out the same buffers). At the default resolution and at ``--large`` px.
* Accuracy is the search's fp32 fine-tune (batch 32, 8 epochs, each family's rate grid), the
  rate chosen on validation, the test accuracy reported. At the default resolution only: the
  shipped checkpoint was pre-trained at 32 to 48 px.
* QAS: the device's integer training of the ``last``, ``bias-only`` and ``mcunetv3`` presets
  (int8, batch 1, :func:`tinytune.evaluators.device.int8_finetune`, the bundle's step, its rate
  halved after every epoch as the bundle halves it) with and without the gradient scaling, and
  with it at a constant rate (``--constant-lrs``), the rate chosen on validation.
* The C step against PyTorch eager: ``python3 -m bench.bundle_step`` run once, its JSON read
  back.

    python3 -m bench.seeds [--large 128] [--qas-lrs 0.0125 0.1] [--qas-epochs 4]
        [--qas-schedule halving] [--constant-lrs 0.003125 0.0125]
        [--workers 2] [--json OUT] [--write [PAGE ...]]
        [--folder PATH] [--from-json EARLIER.json [--c-step]]

``--folder`` measures the device table on an image folder too (``python3 -m bench.letters``
makes one); with ``--from-json`` the rest is read from an earlier run instead of measured again
(``--c-step`` times the C step again, e.g. after a change of the kernels).

``--write`` replaces the blocks between ``<!-- seeds:begin -->`` and ``<!-- seeds:end -->``
(the claims, in ``docs/bench/claims.md``), between ``<!-- device-accuracy:begin -->`` and
``<!-- device-accuracy:end -->`` (fp32 against int8 with and without QAS, per preset) and, with
``--folder``, ``<!-- device-accuracy-folder:begin -->`` … ``end`` (both in
``docs/bench/device-accuracy.md``): each in whichever of the pages given holds its markers, the
two pages above when none is given. About 15 minutes on two cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_DATASET,
    DEFAULT_SUPERNET,
    ROOT,
    add_arguments,
    module_command,
    read_json,
    with_root,
    write_json,
)
from bench.harness import table as markdown_table
from bench.markers import write_blocks

# the pages that hold this script's blocks (``--write`` with no page given)
PAGES = (ROOT / "docs" / "bench" / "claims.md", ROOT / "docs" / "bench" / "device-accuracy.md")

SUPERNET = DEFAULT_SUPERNET
DATASET = DEFAULT_DATASET
LAST_K = (1, 2, 4, 6, 8, 12, 16, 24)  # the last k convolutions, weights and biases
DEVICE_PRESETS = ("last", "bias-only", "mcunetv3")  # trained as the device trains them
# when parameter gradients are applied (tinytune.hwmodels.UPDATES) → the figures' tag suffix:
# a framework's (all at the end), the Tiny Training Engine's (each right after its backward
# step), the bundles' (fused into the kernel that computes it: no gradient buffer)
UPDATE_TAGS = {"deferred": "_no_reorder", "reordered": "", "fused": "_fused"}
Claim = tuple[str, str, str, str, str]  # claim, paper, tinytune, measured on, why they differ


def _finetune(job: tuple[str, str, str, float]) -> dict[str, Any]:
    """One fp32 fine-tune (a worker process): data set, candidate JSON, checkpoint, rate."""
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation

    dataset, candidate, checkpoint, lr = job
    r = run_evaluation(
        FinetuneTask(
            candidate=candidate,
            checkpoint=checkpoint,
            dataset=dataset,
            data_seed=0,
            finetune=FinetuneConfig(lr=lr),
            threads=1,
        )
    )
    if r.status != "ok":
        raise RuntimeError(r.error)
    return {"lr": lr, "val": r.val_accuracy, "test": r.accuracy}


def _int8(job: tuple[str, str, str, float, bool, int, str]) -> dict[str, Any]:
    """One integer training at batch 1 (a worker process): the search's ``int8`` fidelity at
    one rate under a schedule, with or without QAS."""
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, Int8Settings, run_evaluation

    dataset, candidate, checkpoint, lr, qas, epochs, schedule = job
    r = run_evaluation(
        FinetuneTask(
            candidate=candidate,
            checkpoint=checkpoint,
            dataset=dataset,
            data_seed=0,
            finetune=FinetuneConfig(),
            threads=1,
            int8=Int8Settings(epochs=epochs, lrs=(lr,), qas=qas, schedule=schedule),
        )
    )
    if r.status != "ok":
        raise RuntimeError(r.error)
    return {
        "lr": lr,
        "qas": qas,
        "schedule": schedule,
        "val": r.val_accuracy,
        "test": r.accuracy,
    }


def _best(tried: list[dict[str, Any]]) -> dict[str, Any]:
    return max(tried, key=lambda t: t["val"])  # the first of equals: the smaller rate


def inference_peak(graph: Any, element_bytes: int) -> int:
    """Peak bytes of the activations alive at one forward step, nothing kept for backward."""
    n = len(graph.ops)
    producer, consumers = graph.producer(), graph.consumers()
    alive = [0] * n
    for t, info in graph.tensors.items():
        start = producer.get(t, 0)
        end = n - 1 if t == graph.output else max(consumers[t], default=start)
        for step in range(start, end + 1):
            alive[step] += info.numel * element_bytes
    return max(alive)


def memory_figures(spec: Any, resolution: int, candidates: dict[str, Any]) -> dict[str, Any]:
    """The planner's figures for each named candidate, traced at ``resolution`` (the networks
    are fully convolutional, so a resolution outside the search space can be planned)."""
    import torch

    from tinytune.hwmodels import plan_memory
    from tinytune.ir import trace
    from tinytune.models import build_candidate
    from tinytune.models.ofa_adapter import build_ofa_supernet

    supernet = build_ofa_supernet(spec, 10)
    out: dict[str, Any] = {}
    for name, candidate in candidates.items():
        net = build_candidate(candidate, supernet, 10, calibration=[])
        graph = trace(net, torch.zeros(1, 3, resolution, resolution))
        row: dict[str, Any] = {}
        for precision in ("fp32", "int8"):
            for update, suffix in UPDATE_TAGS.items():
                plan = plan_memory(graph, precision=precision, update=update)
                tag = f"{precision}{suffix}"
                row[tag] = plan.arena_bytes
                row[f"{tag}_saved"] = plan.saved_bytes
                row["extra"] = plan.mcunetv3_extra_bytes
            row[f"inference_{precision}"] = inference_peak(graph, 4 if precision == "fp32" else 1)
        out[name] = row
    return out


def bundle_arenas(spec: Any, checkpoint: Path, candidates: dict[str, Any]) -> dict[str, int]:
    """The exported bundle's arena of each candidate (built, not compiled; for the ``host``
    device, whose memory takes full fine-tuning too — the arena does not depend on it)."""
    from tinytune.bundle import BundleRequest, build_bundle
    from tinytune.hwmodels.registry import get_device

    device = get_device("host")
    return {
        name: build_bundle(
            BundleRequest(c, checkpoint, device, samples=8, epochs=1)
        ).model.arena_bytes
        for name, c in candidates.items()
    }


def c_step_figures() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tt-seeds-") as tmp:
        out = Path(tmp) / "step.json"
        command = module_command("bundle_step", "--json", str(out))
        subprocess.run(command, env=with_root(), check=True)
        return read_json(out)


def accuracies(
    spec: Any, checkpoint: Path, dataset: str, candidates: dict[str, Any], args: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fp32 fine-tune of every candidate (the family's grid, chosen on validation), and
    the device's int8 training of :data:`DEVICE_PRESETS` with and without QAS."""
    from tinytune.search.run.lr_grid import FAMILIES, family_of

    jobs = [
        (name, (dataset, c.to_json(), str(checkpoint), lr))
        for name, c in candidates.items()
        for lr in FAMILIES[family_of(c, spec)].grid
    ]
    settings = [(True, args.qas_schedule, lr) for lr in args.qas_lrs]
    settings += [(False, args.qas_schedule, lr) for lr in args.qas_lrs]
    if args.qas_schedule != "constant":
        settings += [(True, "constant", lr) for lr in args.constant_lrs]
    int8_jobs = [
        (name, (dataset, candidates[name].to_json(), str(checkpoint), lr, qas, args.qas_epochs, s))
        for name in DEVICE_PRESETS
        for qas, s, lr in settings
    ]
    with ProcessPoolExecutor(args.workers) as pool:
        int8_futures = [(name, pool.submit(_int8, job)) for name, job in int8_jobs]
        fp32 = list(zip(jobs, pool.map(_finetune, [job for _, job in jobs]), strict=True))
        int8 = [(name, f.result()) for name, f in int8_futures]
    schemes = {}
    for name, c in candidates.items():
        tried = [r for (n, _), r in fp32 if n == name]
        schemes[name] = {
            "key": c.key,
            "family": family_of(c, spec),
            "fp32": _best(tried),
            "tried": tried,
        }

    def chosen(name: str, qas: bool, schedule: str) -> dict[str, Any] | None:
        tried = [r for n, r in int8 if n == name and r["qas"] == qas and r["schedule"] == schedule]
        return _best(tried) if tried else None

    device = {
        name: {
            "int8_qas": chosen(name, True, args.qas_schedule),
            "int8_no_qas": chosen(name, False, args.qas_schedule),
            "int8_qas_constant": chosen(name, True, "constant"),
            "tried": [r for n, r in int8 if n == name],
        }
        for name in DEVICE_PRESETS
    }
    return schemes, device


def measure_folder(args: argparse.Namespace) -> dict[str, Any]:
    """The device accuracy table on an image folder (``--folder``)."""
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.data import get_dataset
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(SUPERNET)
    dataset = f"imagefolder:{args.folder}"
    candidates = {name: make_preset(name, spec) for name in DEVICE_PRESETS}
    splits = get_dataset(dataset).load(candidates["last"].subnet.resolution)
    started = time.perf_counter()
    schemes, device = accuracies(spec, ensure_checkpoint(spec), dataset, candidates, args)
    return {
        "dataset": str(args.folder),
        "sizes": [len(splits.train), len(splits.val), len(splits.test)],
        "schemes": schemes,
        "device": device,
        "qas_schedule": args.qas_schedule,
        "seconds": round(time.perf_counter() - started),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.spaces import UpdateScheme, get_supernet, make_preset
    from tinytune.spaces.candidate import conv_kinds

    spec = get_supernet(SUPERNET)
    checkpoint = ensure_checkpoint(spec)
    base = make_preset("full", spec)
    n_convs = len(conv_kinds(spec, base.subnet))
    candidates = {
        name: make_preset(name, spec)
        for name in ("full", "last", "bias-only", "tinytl", "mcunetv3")
    }
    for k in (k for k in LAST_K if k < n_convs):
        weights = tuple((i, 1.0) for i in range(n_convs - k, n_convs))
        candidates[f"last-{k}"] = replace(base, update=UpdateScheme(k, weights))
    started = time.perf_counter()
    results: dict[str, Any] = {
        "supernet": SUPERNET,
        "dataset": DATASET,
        "resolution": base.subnet.resolution,
        "large": args.large,
        "n_convs": n_convs,
        "schemes": {},
    }
    results["memory"] = {
        str(res): memory_figures(spec, res, candidates)
        for res in (base.subnet.resolution, args.large)
    }
    exportable = {n: candidates[n] for n in ("full", "bias-only", "tinytl", "mcunetv3")}
    results["bundle_arena"] = bundle_arenas(spec, checkpoint, exportable)
    print(f"memory: {time.perf_counter() - started:.0f} s", flush=True)

    results["schemes"], results["device"] = accuracies(spec, checkpoint, DATASET, candidates, args)
    results["qas_epochs"] = args.qas_epochs
    results["qas_schedule"] = args.qas_schedule
    print(f"accuracy: {time.perf_counter() - started:.0f} s", flush=True)
    results["c_step"] = c_step_figures()
    results["seconds"] = round(time.perf_counter() - started)
    return results


def _pct(r: dict[str, Any]) -> str:
    return f"{100 * r['val']:.1f} / {100 * r['test']:.1f}"


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 2**20:.2f} MB"


def _memory_claims(
    both: Callable[[Any], str],
    ratio: Callable[[str, str, str], Any],
    acc: dict[str, Any],
    net: str,
) -> list[Claim]:
    """TinyTL's claims: training against inference, bias-only and lite residuals vs full."""
    rows = []
    rows.append(
        (
            "Training needs far more memory than inference (TinyTL §1, Fig. 1)",
            "10–20×",
            "full fine-tuning / inference, fp32: "
            + both(lambda m: m["full"]["fp32_no_reorder"] / m["full"]["inference_fp32"])
            + "; int8 arena / int8 inference: "
            + both(lambda m: m["full"]["int8_fused"] / m["full"]["inference_int8"]),
            net + ", batch 1",
            "TinyTL counts a framework at batch 8 and 224 px. Here batch 1: at low resolution "
            "the trained weights that full fine-tuning holds in SRAM (fp32 here) outweigh the "
            "activations, while inference reads every weight from flash; at 128 px the "
            "activations take over and the ratio falls.",
        )
    )
    rows.append(
        (
            "Bias-only update vs full: memory kept for backward (TinyTL Fig. 1)",
            "12× less",
            "kept for backward, fp32: "
            + both(
                lambda m: (
                    m["full"]["fp32_no_reorder_saved"]
                    / max(1, m["bias-only"]["fp32_no_reorder_saved"])
                )
            )
            + "; whole step: "
            + both(ratio("full", "bias-only", "fp32_no_reorder"))
            + f"; accuracy {_pct(acc['bias-only']['fp32'])} vs full {_pct(acc['full']['fp32'])}",
            net + ", batch 1, fp32",
            "Bias-only keeps only 1-bit ReLU masks; the whole step also holds the forward's "
            "working set, which both schemes share.",
        )
    )
    rows.append(
        (
            "TinyTL (lite residual + bias) vs full fine-tuning (TinyTL Table 2)",
            "up to 6.5× less memory, little or no accuracy loss",
            "fp32 step: "
            + both(ratio("full", "tinytl", "fp32_no_reorder"))
            + "; int8 arena: "
            + both(ratio("full", "tinytl", "int8_fused"))
            + f"; accuracy {_pct(acc['tinytl']['fp32'])} vs full {_pct(acc['full']['fp32'])}",
            net + ", lite residual on every block but the first",
            "TinyTL's lite residuals and GroupNorm are pre-trained on ImageNet; here the "
            "branches start from their initialisation.",
        )
    )
    return rows


def _sparse_claim(
    mem: dict[str, Any], res: str, acc: dict[str, Any], sparse: dict[str, Any], net: str
) -> Claim:
    """MCUNetV3's sparse update against the cheapest last-k update as accurate."""
    matching = sorted(
        (mem[res][n]["extra"], n)
        for n in acc
        if n.startswith("last-") and acc[n]["fp32"]["val"] >= sparse["val"]
    )
    curve = ", ".join(
        f"k={n[5:]}: {_kb(mem[res][n]['extra'])} {100 * acc[n]['fp32']['val']:.1f}"
        for n in sorted((n for n in acc if n.startswith("last-")), key=lambda n: int(n[5:]))
    )
    if matching:
        extra, name = matching[0]
        verdict = (
            f"{extra / mem[res]['mcunetv3']['extra']:.1f}× less extra memory than `{name}`, the "
            "cheapest last-k update as accurate on validation"
        )
    else:
        verdict = "no last-k update tried is as accurate on validation"
    return (
        "Sparse update vs updating the last k layers (MCUNetV3 Fig. 9)",
        "4.5–7.5× less extra memory at equal or better accuracy",
        f"`mcunetv3` {_kb(mem[res]['mcunetv3']['extra'])}, {_pct(sparse)}: {verdict} "
        f"(last-k, extra memory and validation %: {curve})",
        net + f", {res} px; MCUNetV3's analytic extra memory",
        "The paper's sparse schemes come from contribution analysis under each budget; "
        "here one fixed scheme of the same shape.",
    )


def _engine_claims(
    r: dict[str, Any],
    both: Callable[[Any], str],
    ratio: Callable[[str, str, str], Any],
    res: str,
    net: str,
) -> list[Claim]:
    """MCUNetV3's pruning and reordering; the planner's fused arenas against the bundles'."""
    mem = r["memory"]
    prune = both(ratio("full", "mcunetv3", "int8_no_reorder"))
    reorder = both(lambda m: m["mcunetv3"]["int8_no_reorder"] / m["mcunetv3"]["int8"])
    fused = both(lambda m: m["mcunetv3"]["int8_no_reorder"] / m["mcunetv3"]["int8_fused"])
    total = both(lambda m: m["full"]["int8_no_reorder"] / m["mcunetv3"]["int8"])
    both_fused = both(ratio("full", "mcunetv3", "int8_fused"))
    checked = ", ".join(
        f"`{n}` {'=' if a == mem[res][n]['int8_fused'] else '≠'} {a:,} B"
        for n, a in r["bundle_arena"].items()
    )
    rows = []
    rows.append(
        (
            "Backward-graph pruning of the sparse update (MCUNetV3 Fig. 10a)",
            "7–9× (full → sparse)",
            f"int8, without reordering: {prune}",
            net + ", `full` vs `mcunetv3`, batch 1",
            "The paper measures MbV2, ProxylessNAS and MCUNet at 128 px on the STM32F746.",
        )
    )
    rows.append(
        (
            "Operator reordering / in-place update (MCUNetV3 Fig. 10a)",
            "2.4–3.2× (sparse → sparse + reorder)",
            f"int8 `mcunetv3`: {reorder}; with the updates fused into the gradient kernels "
            f"(the bundles' engine): {fused}",
            net + ", batch 1",
            "Reordering frees each weight gradient at once; it matters in proportion to the "
            "trained weights, which the 100 KB-shaped scheme keeps small. Fusing never "
            "materialises a gradient at all.",
        )
    )
    rows.append(
        (
            "Pruning and reordering together (MCUNetV3 Fig. 10a)",
            "20–21×",
            f"int8: {total}; both steps with fused updates (the bundles' engine): "
            f"{both_fused}; the planner's fused arena against the bundle's `tt_arena` at "
            f"{res} px: " + checked,
            net + ", batch 1",
            "As above; the bundle cannot be built without the passes, so only its fused "
            "schemes are checked against it. Fusing shrinks full fine-tuning's step (its "
            "gradients are large) far more than the sparse update's, so the ratio between "
            "the two engines' best falls.",
        )
    )
    return rows


def _device_claims(r: dict[str, Any], sparse: dict[str, Any], res: str, net: str) -> list[Claim]:
    """The device's training: QAS against fp32 and without it, and the C step against PyTorch's."""
    rows = []
    q = r["device"]["mcunetv3"]
    rows.append(
        (
            "QAS: int8 training with and without it against fp32 (MCUNetV3 Table 1)",
            "64.9 % without QAS, 73.5 % with, 73.3 % fp32 (8-dataset average)",
            f"`mcunetv3`: fp32 {_pct(sparse)}, int8 + QAS {_pct(q['int8_qas'])} (lr "
            f"{q['int8_qas']['lr']}), int8 without QAS {_pct(q['int8_no_qas'])}",
            net
            + f", {res} px, int8 at batch 1 for {r['qas_epochs']} epochs"
            + (", the rate halved after each" if r.get("qas_schedule") == "halving" else ""),
            "The paper uses SGD with momentum at batch 128 on a GPU; here the device's step, "
            "plain SGD at batch 1.",
        )
    )
    s = r["c_step"]
    rows.append(
        (
            "The device engine against a framework's training step (MCUNetV3 Fig. 10)",
            "about 20× less memory, 23–25× faster",
            f"buffers: PyTorch fp32 (planner) / C static "
            f"{s['torch_planned_fp32_bytes'] / s['c_static_bytes']:.1f}×; process peak RSS "
            f"{s['torch_peak_rss_bytes'] / s['c_peak_rss_bytes']:.0f}×; step median "
            f"{s['torch_step_median_s'] / s['c_step_median_s']:.2f}× faster "
            f"({1000 * s['c_step_median_s']:.1f} vs {1000 * s['torch_step_median_s']:.1f} ms)",
            f"`{s['preset']}` at {s['resolution']} px, batch 1, one thread, on this host",
            "The paper compares TF-Lite on the MCU (full update projected); here PyTorch eager "
            "on an x86 host, whose vectorised kernels narrow the gap to the bundle's portable "
            "C (loops gcc -O3 vectorises, no intrinsics), and the planner's fp32 step stands "
            "for PyTorch's buffers.",
        )
    )
    return rows


def table(r: dict[str, Any]) -> str:
    """The Markdown table of the claims, from :func:`measure`'s results."""
    res, large = str(r["resolution"]), str(r["large"])
    mem, acc = r["memory"], r["schemes"]

    def both(fn: Any) -> str:
        return f"{fn(mem[res]):.1f}× at {res} px, {fn(mem[large]):.1f}× at {large} px"

    def ratio(a: str, b: str, key: str) -> Any:
        return lambda m: m[a][key] / m[b][key]

    net = f"`{r['supernet']}` default sub-network ({r['n_convs']} convolutions)"
    rows = _memory_claims(both, ratio, acc, net)
    sparse = acc["mcunetv3"]["fp32"]
    rows.append(_sparse_claim(mem, res, acc, sparse, net))
    rows += _engine_claims(r, both, ratio, res, net)
    rows += _device_claims(r, sparse, res, net)
    heads = ["claim", "paper", "tinytune", "measured on", "why they differ"]
    return markdown_table(heads, rows)


def device_table(r: dict[str, Any]) -> str:
    """fp32 against the device's int8 training, with and without QAS, per preset; with QAS at
    a constant rate too when it was measured."""
    schedule = r.get("qas_schedule", "constant")
    constant = schedule != "constant" and any(
        d.get("int8_qas_constant") for d in r["device"].values()
    )
    columns = {
        "int8_qas": f"int8 + QAS (device, {schedule})",
        "int8_no_qas": "int8, no QAS",
        "int8_qas_constant": "int8 + QAS, constant rate",
    }
    if not constant:
        del columns["int8_qas_constant"]
    heads = ["preset", "fp32 (search)", *columns.values()]
    rows = []
    for name, d in r["device"].items():
        fp32 = r["schemes"][name]["fp32"]
        keys = list(columns)
        cells = [f"{_pct(fp32)} (lr {fp32['lr']})"]
        cells += [f"{_pct(d[k])} (lr {d[k]['lr']})" for k in keys]
        rows.append([f"`{name}`", *cells])
    return markdown_table(heads, rows)


def main(argv: list[str] | None = None) -> int:
    from tinytune.quant.schedule import LR_SCHEDULES
    from tinytune.search.run.verify_int8 import INT8_EPOCHS, INT8_LRS, INT8_SCHEDULE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=128, help="a second resolution (memory)")
    parser.add_argument("--qas-lrs", nargs="+", type=float, default=list(INT8_LRS))
    parser.add_argument("--qas-epochs", type=int, default=INT8_EPOCHS)
    parser.add_argument("--qas-schedule", choices=LR_SCHEDULES, default=INT8_SCHEDULE)
    parser.add_argument(
        "--constant-lrs",
        nargs="+",
        type=float,
        default=[0.003125, 0.0125],
        help="rates of the constant-rate QAS column (the device's recipe before halving)",
    )
    parser.add_argument("--workers", type=int, default=2)
    add_arguments(
        parser,
        json=True,
        from_json="one",
        write="many",
        help={
            "json": "write the measurements here",
            "from_json": "start from earlier measurements instead of measuring",
            "write": "replace this script's blocks in these pages (default: the pages that hold "
            "them)",
        },
    )
    parser.add_argument(
        "--folder", type=Path, help="also measure the device table on this image folder"
    )
    parser.add_argument(
        "--c-step", action="store_true", help="with --from-json: time the C step again"
    )
    args = parser.parse_args(argv)
    results = read_json(args.from_json) if args.from_json else measure(args)
    if args.folder:
        results["folder"] = measure_folder(args)
    if args.c_step:
        results["c_step"] = c_step_figures()
    if args.json:
        write_json(args.json, results)
    seconds = results["seconds"]
    text = table(results) + f"\n\nMeasured in {seconds // 60} min {seconds % 60} s."
    device = device_table(results)
    print(text + "\n\n" + device)
    if "folder" in results:
        folder = results["folder"]
        n_train, n_val, n_test = folder["sizes"]
        folder_text = device_table(folder) + (
            f"\n\n`{Path(folder['dataset']).name}`: {n_train} training, {n_val} validation and "
            f"{n_test} test images; measured in {folder['seconds']} s."
        )
        print("\n" + folder_text)
    if args.write is not None:
        blocks = {"seeds": text, "device-accuracy": device}
        if "folder" in results:
            blocks["device-accuracy-folder"] = folder_text
        for page in write_blocks(args.write or PAGES, blocks):
            print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
