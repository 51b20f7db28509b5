"""Image folders of thousands of images: the first decode, a second run that reuses it, peak
memory, and fine-tunes per hour, on CPU workers and, where CUDA is, on GPU workers.

For each ``--images N`` the script generates (once, then reuses) a folder of N images in 10
classes of procedurally drawn shapes (:func:`write_folder`: PNG and JPEG, sizes from 48x40 to
220x180 px, modes RGB, RGBA, L, P and 16-bit grey, all deterministic), clears the folder's
decoded images from the cache (``<workdir>/cache``, the ``TINYTUNE_CACHE`` of every run), and
runs the same search twice, each in a fresh process and database: cold (the preflight decodes
the folder at every resolution of the search space) and warm (the preflight finds the decoded
files and reads no image). The search is the default network for image folders
(EfficientNet-Lite0 with its ImageNet weights) with a fixed learning rate, ``--epochs``
epochs, on ``--workers`` local Ray workers, until ``--trials`` measured fine-tunes or
``--time-budget``. Where ``torch.cuda.is_available()`` a third run fine-tunes on the GPU
(``--gpus-per-trial``); elsewhere the table says "no GPU here".

Each run records, from inside its process: listing and hashing the folder (one
``ImageFolderDataset``, as the preflight makes it); on a cold cache, the preflight's decode
(its first to last progress event, plus one image's share); on a warm one, the check that finds
every resolution decoded (timed on its own before the search); and the search's wall time and
measured fine-tunes (read from the study, the reference included). "Data ready" is listing and
hashing plus the decode or the check; "call to data ready" runs from the call of
``tinytune.optimize`` to the preflight's last decoding event (or its report of the cache
reused), the imports, checks and second listing on the way included. From outside, every
0.2 s, it reads the memory of the run's processes from ``/proc``: the peak resident set
(``VmHWM``) of the driver and of each Ray worker (``ray::`` processes other than Ray's
agents), and the most private memory (``RssAnon``, sampled) of each; a resident set counts the
pages of the decoded files that the process has read, which are shared page cache, not its own.

    python3 -m bench.scale [--images 2000 20000] [--trials 6] [--epochs 1] [--lr 0.05]
        [--workers 2] [--time-budget 20m] [--gpus-per-trial 0.5] [--workdir DIR]
        [--json OUT] [--from-json EARLIER.json ...] [--write docs/scale.md]

``--write`` replaces the text between ``<!-- scale:begin -->`` and ``<!-- scale:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import (
    add_arguments,
    head,
    machine,
    module_command,
    read_json,
    row,
    with_root,
    write_json,
)
from bench.markers import write_section

GENERATOR = 1  # the folder's recipe: raise it when write_folder changes
CLASSES = (
    "circle",
    "square",
    "triangle",
    "cross",
    "ring",
    "hstripes",
    "vstripes",
    "diagonal",
    "dots",
    "checker",
)
SIZES = ((48, 40), (64, 64), (96, 72), (128, 128), (160, 120), (220, 180))
# (mode, format) in turn: JPEG holds RGB and L only
STYLES = (
    ("RGB", "PNG"),
    ("RGB", "JPEG"),
    ("RGBA", "PNG"),
    ("L", "JPEG"),
    ("P", "PNG"),
    ("I;16", "PNG"),
    ("L", "PNG"),
)


def draw(label: int, index: int) -> tuple[Any, str]:
    """Image ``index`` of class ``label``: its shape at a random place, size and colour on a
    noisy background, in the mode and format of ``STYLES[index % 7]``. Returns the image and
    its extension."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([GENERATOR, label, index])
    w, h = SIZES[index % len(SIZES)]
    noise = rng.integers(0, 60, (h, w, 3), dtype=np.uint8) + rng.integers(0, 140, 3).astype(
        np.uint8
    )
    image = Image.fromarray(noise.astype(np.uint8), "RGB")
    pen = ImageDraw.Draw(image)
    colour = tuple(int(c) for c in rng.integers(150, 256, 3))
    s = int(rng.integers(min(w, h) // 3, min(w, h) * 3 // 4))
    x0, y0 = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
    box = (x0, y0, x0 + s, y0 + s)
    shape = CLASSES[label]
    if shape == "circle":
        pen.ellipse(box, fill=colour)
    elif shape == "square":
        pen.rectangle(box, fill=colour)
    elif shape == "triangle":
        pen.polygon([(x0, y0 + s), (x0 + s, y0 + s), (x0 + s // 2, y0)], fill=colour)
    elif shape == "cross":
        t = max(2, s // 5)
        pen.rectangle((x0, y0 + s // 2 - t, x0 + s, y0 + s // 2 + t), fill=colour)
        pen.rectangle((x0 + s // 2 - t, y0, x0 + s // 2 + t, y0 + s), fill=colour)
    elif shape == "ring":
        pen.ellipse(box, outline=colour, width=max(2, s // 8))
    elif shape in ("hstripes", "vstripes"):
        step = max(4, s // 5)
        for k in range(0, s, 2 * step):
            if shape == "hstripes":
                pen.rectangle((x0, y0 + k, x0 + s, y0 + k + step - 1), fill=colour)
            else:
                pen.rectangle((x0 + k, y0, x0 + k + step - 1, y0 + s), fill=colour)
    elif shape == "diagonal":
        pen.line((x0, y0, x0 + s, y0 + s), fill=colour, width=max(2, s // 6))
    elif shape == "dots":
        r = max(2, s // 10)
        for cx, cy in rng.integers(0, s, (6, 2)):
            pen.ellipse((x0 + cx - r, y0 + cy - r, x0 + cx + r, y0 + cy + r), fill=colour)
    else:  # checker
        step = max(4, s // 4)
        for i in range(0, s, step):
            for j in range(0, s, step):
                if (i // step + j // step) % 2 == 0:
                    pen.rectangle(
                        (x0 + i, y0 + j, x0 + i + step - 1, y0 + j + step - 1), fill=colour
                    )
    mode, fmt = STYLES[index % len(STYLES)]
    if mode == "I;16":
        grey = np.asarray(image.convert("L"), dtype=np.uint16) * 256  # the low byte: noise
        image = Image.fromarray(grey + rng.integers(0, 256, grey.shape, dtype=np.uint16))
    elif mode == "RGBA":
        image = image.convert("RGBA")
        image.putalpha(Image.fromarray(rng.integers(128, 256, (h, w), dtype=np.uint8)))
    else:
        image = image.convert(mode)
    return image, ".jpg" if fmt == "JPEG" else ".png"


def write_folder(root: Path, images: int) -> Path:
    """``images`` generated images in ``root/<class>/`` (10 classes in turn), written once:
    a folder with the same recipe and count is reused."""
    marker = root / ".generated.json"
    recipe = {"generator": GENERATOR, "images": images}
    if marker.is_file() and read_json(marker) == recipe:
        return root
    if root.exists():
        shutil.rmtree(root)
    for name in CLASSES:
        (root / name).mkdir(parents=True)
    for i in range(images):
        label = i % len(CLASSES)
        image, suffix = draw(label, i // len(CLASSES))
        image.save(root / CLASSES[label] / f"{i // len(CLASSES):06d}{suffix}", quality=90)
    write_json(marker, recipe)
    return root


# --- one search in a process of its own ----------------------------------------------------


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one search (in this process) and time its data preparation."""
    import tinytune
    from tinytune.data import ImageFolderDataset
    from tinytune.db import open_store
    from tinytune.spaces import default_network, get_supernet

    dataset_spec = f"imagefolder:{spec['folder']}"
    resolutions = get_supernet(default_network(dataset_spec)).resolutions
    start = time.perf_counter()
    dataset = ImageFolderDataset(spec["folder"])
    listed = time.perf_counter() - start
    reuse_s = None
    if not dataset.decoded.missing(resolutions):  # what the preflight does on a warm cache
        start = time.perf_counter()
        dataset.check(resolutions)
        reuse_s = time.perf_counter() - start
    seen: dict[str, float] = {}

    def progress(event: Any) -> None:
        now = time.perf_counter()
        if event.kind == "decoding":
            seen.setdefault("first", now)
            seen["last"] = now
        elif event.kind == "decoded":
            seen["reused"] = now

    called = time.perf_counter()
    result = tinytune.optimize(
        dataset_spec,
        trials=spec["trials"],
        epochs=spec["epochs"],
        lr=spec["lr"],
        workers=spec["workers"],
        gpus_per_trial=spec["gpus_per_trial"],
        time_budget=spec["time_budget"],
        storage=spec["storage"],
        study=spec["study"],
        progress=progress,
    )
    with open_store(spec["storage"]) as store:
        measured = store.evaluations(spec["study"], fidelity="measured")
    n = len(dataset._files)
    # first to last image, plus the first image's share
    decode_s = (seen["last"] - seen["first"]) * n / max(1, n - 1) if "first" in seen else None
    return {
        "images": n,
        "resolutions": list(resolutions),
        "list_hash_s": listed,
        "decode_s": decode_s,
        "reuse_s": reuse_s,
        "reused": "reused" in seen,
        "optimize_to_data_s": seen.get("reused", seen.get("last", called)) - called,
        "decoded_bytes": sum(p.stat().st_size for p in dataset.decoded.folder.glob("*px.uint8")),
        "search_s": result.wall_time_s,
        "fine_tunes": len(measured),
        "ok": sum(e.status == "ok" for e in measured),
        "task_s": result.task_time_s,
        "devices": result.devices,
        "stopped_by": result.stopped_by,
    }


def _status(pid: int) -> dict[str, int]:
    """The kB fields of ``/proc/PID/status`` (empty once the process is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _descendants(root: int) -> dict[int, str]:
    """Every living process below ``root`` (and it), with its command line."""
    parent, command = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            command[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for child_pid, ppid in parent.items():
            if ppid == p and child_pid not in tree:
                tree.add(child_pid)
                frontier.append(child_pid)
    return {p: command.get(p, b"").decode(errors="replace") for p in tree}


class Memory:
    """Peak memory of a process tree, sampled every ``every`` seconds in a thread."""

    def __init__(self, root: int, every: float = 0.2) -> None:
        self.root, self.every = root, every
        self.peaks: dict[str, dict[str, int]] = {
            role: {"hwm": 0, "anon": 0, "rss": 0} for role in ("driver", "worker", "other")
        }
        self.workers_total = 0  # the most resident memory of all workers at one sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid, command in _descendants(self.root).items():
                role = (
                    "driver"
                    if pid == self.root
                    else "worker"
                    if command.startswith("ray::") and "Agent" not in command.split()[0]
                    else "other"  # Ray's own processes, its agents included
                )
                s = _status(pid)
                peak = self.peaks[role]
                peak["hwm"] = max(peak["hwm"], s.get("VmHWM", 0))
                peak["anon"] = max(peak["anon"], s.get("RssAnon", 0))
                peak["rss"] = max(peak["rss"], s.get("VmRSS", 0))
                if role == "worker":
                    total += s.get("VmRSS", 0)
            self.workers_total = max(self.workers_total, total)
            self._stop.wait(self.every)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return {**self.peaks, "workers_total_rss": self.workers_total}


def run(spec: dict[str, Any], cache: Path) -> dict[str, Any]:
    """One search in a fresh process, its memory watched from here."""
    out = Path(spec["storage"].removeprefix("sqlite:///")).with_suffix(".json")
    env = {**with_root(), "TINYTUNE_CACHE": str(cache)}
    command = module_command("scale", "--child", json.dumps(spec), "--json", str(out))
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env)
    memory = Memory(process.pid)
    code = process.wait()
    peaks = memory.stop()
    if code != 0:
        raise SystemExit(f"the {spec['study']} run failed (exit {code})")
    record = read_json(out)
    return {**record, "memory": peaks, "process_s": time.perf_counter() - started}


def measure(args: argparse.Namespace, images: int) -> dict[str, Any]:
    """The cold, warm and (where CUDA is) GPU runs on a folder of ``images`` images."""
    import torch

    from tinytune.data import ImageFolderDataset

    work = args.workdir / f"n{images}"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    folder = write_folder(args.workdir / f"images-{images}", images)
    generated_s = time.perf_counter() - started
    cache = args.workdir / "cache"
    os.environ["TINYTUNE_CACHE"] = str(cache)
    decoded = ImageFolderDataset(folder).decoded.folder
    shutil.rmtree(decoded, ignore_errors=True)  # a cold cache for this folder
    runs: dict[str, Any] = {}
    settings = {
        "folder": str(folder),
        "trials": args.trials,
        "epochs": args.epochs,
        "lr": args.lr,
        "workers": args.workers,
        "time_budget": args.time_budget,
        "gpus_per_trial": 0.0,
    }
    for name in ("cold", "warm"):
        db = work / f"{name}.sqlite"
        db.unlink(missing_ok=True)
        spec = {**settings, "storage": f"sqlite:///{db}", "study": name}
        runs[name] = run(spec, cache)
        print(f"{images} images, {name}: {_summary(runs[name])}", flush=True)
    if torch.cuda.is_available():
        db = work / "gpu.sqlite"
        db.unlink(missing_ok=True)
        spec = {
            **settings,
            "gpus_per_trial": args.gpus_per_trial,
            "storage": f"sqlite:///{db}",
            "study": "gpu",
        }
        runs["gpu"] = run(spec, cache)
        print(f"{images} images, gpu: {_summary(runs['gpu'])}", flush=True)
    else:
        runs["gpu"] = None
        print(f"{images} images, gpu: no GPU here (torch.cuda.is_available() is False)")
    return {"images": images, "generated_s": generated_s, "settings": settings, "runs": runs}


def _ready(r: dict[str, Any]) -> float:
    """Listing and hashing, then decoding or finding every resolution decoded."""
    return float(r["list_hash_s"] + (r["decode_s"] or r["reuse_s"] or 0.0))


def _summary(r: dict[str, Any]) -> str:
    return (
        f"data ready {_ready(r):.1f} s (listing and hashing {r['list_hash_s']:.1f} s), "
        f"{r['fine_tunes']} fine-tunes in {r['search_s']:.0f} s, driver peak "
        f"{_mb(r['memory']['driver']['hwm'])}, worker peak {_mb(r['memory']['worker']['hwm'])}"
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def _per_hour(r: dict[str, Any]) -> str:
    return f"{3600 * r['fine_tunes'] / r['search_s']:.0f}" if r["search_s"] else "-"


def table(results: list[dict[str, Any]], where: str) -> str:
    """The Markdown of the measurements (one row per folder and run)."""
    heads = [
        "images",
        "run",
        "data ready (s)",
        "listing + hashing (s)",
        "decoding (s)",
        "call to data ready (s)",
        "decoded files",
        "fine-tunes (ok)",
        "search (s)",
        "fine-tunes / h",
        "driver peak RSS",
        "worker peak RSS",
        "worker peak private",
    ]
    lines = [head(heads)]
    for result in results:
        for name in ("cold", "warm", "gpu"):
            r = result["runs"].get(name)
            if r is None:
                if name == "gpu":
                    empty = [""] * (len(heads) - 3)
                    lines.append(
                        row([f"{result['images']:,}", "GPU workers", "no GPU here", *empty])
                    )
                continue
            what = {
                "cold": "CPU workers, cold cache",
                "warm": "CPU workers, cache reused",
                "gpu": "GPU workers, cache reused",
            }[name]
            decode = (
                f"{r['decode_s']:.1f}"
                if r["decode_s"] is not None
                else f"none: found in {1000 * r['reuse_s']:.1f} ms"
            )
            m = r["memory"]
            lines.append(
                row(
                    [
                        f"{result['images']:,}",
                        what,
                        f"{_ready(r):.1f}",
                        f"{r['list_hash_s']:.1f}",
                        decode,
                        f"{r['optimize_to_data_s']:.1f}",
                        f"{r['decoded_bytes'] / 1e9:.2f} GB",
                        f"{r['fine_tunes']} ({r['ok']})",
                        f"{r['search_s']:.0f}",
                        _per_hour(r),
                        _mb(m["driver"]["hwm"]),
                        _mb(m["worker"]["hwm"]),
                        _mb(m["worker"]["anon"]),
                    ]
                )
            )
    searched = "; ".join(f"{r['images']:,} images with `{_flags(r['settings'])}`" for r in results)
    lines += [
        "",
        f"Measured on {where}: {searched} (EfficientNet-Lite0, the default network of an "
        "image folder). Timings on a machine shared with other work are noisy.",
    ]
    return "\n".join(lines)


def _flags(s: dict[str, Any]) -> str:
    """The search's settings as ``python3 -m bench.scale`` flags."""
    flags = (
        f"--trials {s['trials']} --epochs {s['epochs']} --lr {s['lr']} --workers {s['workers']}"
    )
    return flags + (f" --time-budget {s['time_budget']}" if s["time_budget"] else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, nargs="+", default=[2000, 20000])
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--time-budget", default=None, help="e.g. 20m: the search's time budget")
    p.add_argument("--gpus-per-trial", type=float, default=0.5)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/tinytune-scale"))
    add_arguments(
        p,
        json=True,
        from_json="many",
        write="one",
        help={"write": "the Markdown file whose scale section to replace"},
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        record = child(json.loads(args.child))
        write_json(args.json, record)
        return 0
    if args.from_json:
        earlier = [read_json(path) for path in args.from_json]
        results = [r for e in earlier for r in e["results"]]
        where = earlier[0]["machine"]
    else:
        where = machine()
        results = [measure(args, n) for n in args.images]
        if args.json:
            write_json(args.json, {"machine": where, "results": results})
    text = table(results, where)
    print(text)
    if args.write:
        write_section(args.write, "scale", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
