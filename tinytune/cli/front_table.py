"""The front as the commands print it: one row per fine-tune, its schedule twins folded in.

A fine-tune measured once may sit on the front several times, once per patch schedule of its
frozen prefix (its *schedule twins*: the same values, other SRAM and step time). The table
folds them into one row: its trials in order of SRAM, the patches per side of each in turn,
and the ranges of SRAM and step time they span. ``wide`` gives every point a row with its
flash, its SRAM against the reference and its whole candidate key; :func:`front_json` gives
all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tinytune.units import format_bytes

if TYPE_CHECKING:
    from rich.table import Table

    from tinytune.search import FrontPoint
    from tinytune.search.run import Int8Accuracy

__all__ = [
    "ROWS",
    "Schedule",
    "fold",
    "front_json",
    "front_table",
    "measured_words",
    "schedules_of",
    "study_counts",
]


ROWS = (
    "a row per fine-tune: its trials in order of SRAM, one per patch schedule of its frozen "
    "prefix, with their patches per side (1: whole images); the reference, full fine-tuning, "
    "last where it is off the front"
)
"""What a row of the folded table is, for the caption under it."""


@dataclass(frozen=True)
class Schedule:
    """How a front point runs its step.

    Attributes:
        fine_tune: the key of the candidate as fine-tuned (whole images); schedule twins share
            it.
        patches: patches per side of the frozen prefix (1: whole images).
    """

    fine_tune: str
    patches: int


def measured_words(fine_tunes: int, twins: int) -> str:
    """The one wording of how much was measured: ``13 measured fine-tunes and 21 schedule
    twins`` (a twin is a fine-tune's candidate under another patch schedule, not trained)."""
    words = f"{fine_tunes} measured fine-tune{'' if fine_tunes == 1 else 's'}"
    return words + (f" and {twins} schedule twin{'' if twins == 1 else 's'}" if twins else "")


def augmented_words(augment: str | None) -> str:
    """What a front's title adds when its fine-tunes trained on augmented images (``augment``
    not ``none``): the accuracies are a host's, and the bundle trains on its samples as
    given."""
    if augment in (None, "none"):
        return ""
    return (
        f", fine-tuned on augmented images (--augment {augment}; the bundle trains on its "
        "samples as given)"
    )


def study_counts(evaluations: Sequence[Any]) -> tuple[int, int]:
    """The measured fine-tunes and the schedule twins among a study's successful measured
    evaluations."""
    from tinytune.db import TWIN_OF

    twins = sum(1 for e in evaluations if TWIN_OF in (e.details or {}))
    return len(evaluations) - twins, twins


def schedules_of(storage: str, keys: Sequence[str]) -> dict[str, Schedule]:
    """The schedule of every stored candidate of ``keys`` (a key not stored is left out)."""
    from tinytune.db import open_store
    from tinytune.spaces import Candidate

    out = {}
    with open_store(storage) as store:
        for key in dict.fromkeys(keys):
            record = store.get_candidate(key)
            if record is not None:
                candidate = Candidate.from_json(record.payload)
                out[key] = Schedule(candidate.training.key, candidate.schedule.patches)
    return out


def fold(
    points: Sequence[FrontPoint], schedules: Mapping[str, Schedule]
) -> list[list[FrontPoint]]:
    """``points`` grouped by fine-tune, each group in order of SRAM (then step time), the
    groups in order of their least SRAM."""
    groups: dict[str, list[FrontPoint]] = {}
    for p in points:
        known = schedules.get(p.candidate_key)
        groups.setdefault(known.fine_tune if known else p.candidate_key, []).append(p)
    ordered = [
        sorted(g, key=lambda p: (p.memory_bytes, p.latency_s or 0.0)) for g in groups.values()
    ]
    return sorted(ordered, key=lambda g: (g[0].memory_bytes, g[0].latency_s or 0.0))


def _patches(counts: Sequence[int]) -> str:
    """Patches per side of each point in turn, as its trial is listed (1: whole images)."""
    return " ".join(str(n) for n in counts)


def _span(values: Sequence[float], text: Any) -> str:
    """The range of ``values`` as ``text`` writes one, or one value where all are equal."""
    lo, hi = text(min(values)), text(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _kb_span(values: Sequence[int]) -> str:
    lo, hi = format_bytes(min(values)), format_bytes(max(values))
    if lo == hi:
        return lo
    (lo_n, lo_unit), hi_unit = lo.split(), hi.split()[1]
    return f"{lo_n}–{hi}" if lo_unit == hi_unit else f"{lo}–{hi}"


def _accuracy(val: float | None, test: float | None) -> str:
    shown = [f"{100 * a:.1f}" if a is not None else "-" for a in (val, test)]
    return f"{shown[0]}/{shown[1]}%"


def _against(point: FrontPoint, reference: FrontPoint | None) -> str:
    """Test accuracy against the reference's, in points."""
    if reference is None or point.candidate_key == reference.candidate_key:
        return "reference" if reference is not None else "-"
    if point.test_accuracy is None or reference.test_accuracy is None:
        return "-"
    return f"{100 * (point.test_accuracy - reference.test_accuracy):+.1f} pp"


def front_table(
    front: Sequence[FrontPoint],
    title: str,
    reference: FrontPoint | None = None,
    int8: Mapping[str, Int8Accuracy] | None = None,
    *,
    schedules: Mapping[str, Schedule] | None = None,
    wide: bool = False,
    caption: str | None = None,
    width: int | None = None,
) -> Table:
    """A rich table of the front: validation / test accuracy (chosen on the first), test
    accuracy against the reference (full fine-tuning, a row of its own, last, where it is not
    on the front), the device's int8 accuracy where measured (``int8``, by candidate key),
    training SRAM and the predicted step. One row per fine-tune (its schedule twins by
    ``schedules``), or with ``wide`` one per point with its flash, SRAM against the reference
    and candidate key. Given a terminal's ``width`` that the table does not fit, it leaves out
    the columns of :data:`NARROW_DROPS` in turn until it fits, and says so under it."""

    schedules = schedules or {}
    on_front = {p.candidate_key for p in front}
    groups = [[p] for p in front] if wide else fold(front, schedules)
    if wide:
        groups.sort(key=lambda g: (g[0].memory_bytes, g[0].latency_s or 0.0))
    if reference is not None and reference.candidate_key not in on_front:
        groups.append([reference])
    cols = ["trial" if wide else "trials", "scheme", "patches", "val/test"]
    cols += ["vs full"] if reference is not None else []
    cols += ["int8"] if int8 else []  # val/test, trained as the device trains
    cols += ["peak SRAM", "step"]
    cols += ["SRAM vs full", "flash", "candidate"] if wide else []
    if int8:
        device = "int8: the validation/test accuracy trained as the device trains (batch 1, QAS)"
        caption = f"{caption}; {device}" if caption else device
    rows = [
        dict(zip(cols, _row(g, reference, int8, schedules, on_front, wide), strict=True))
        for g in groups
    ]
    table = _table(title, caption, cols, rows)
    dropped: list[str] = []
    for col in NARROW_DROPS if width is not None and not wide else ():
        if _natural_width(table) <= width or col not in cols:
            continue
        cols = [c for c in cols if c != col]
        dropped.append(col)
        note = f"{', '.join(dropped)}: left out to fit {width} columns (--json has every field)"
        table = _table(title, f"{caption}; {note}" if caption else note, cols, rows)
    return table


NARROW_DROPS = ("vs full", "patches", "int8")
"""The columns a narrow terminal loses first, in order (never trials, accuracy, SRAM, step)."""


def _table(title: str, caption: str | None, cols: list[str], rows: list[dict[str, str]]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in cols:
        left = col in ("trials", "trial", "scheme", "patches", "candidate")
        # only a long scheme's name may take a second line; no number is ever cut
        table.add_column(
            col,
            justify="left" if left else "right",
            no_wrap=col != "scheme",
            min_width=9 if col == "scheme" else None,
        )
    for row in rows:
        table.add_row(*(row[c] for c in cols))
    return table


def _natural_width(table: Table) -> int:
    """The columns ``table`` takes with nothing cut or wrapped."""
    from rich.console import Console

    console = Console(width=1000)
    return console.measure(table).maximum


def _row(
    group: list[FrontPoint],
    reference: FrontPoint | None,
    int8: Mapping[str, Int8Accuracy] | None,
    schedules: Mapping[str, Schedule],
    on_front: set[str],
    wide: bool,
) -> list[str]:
    first = group[0]
    off = first.candidate_key not in on_front
    sides = [
        schedules[p.candidate_key].patches if p.candidate_key in schedules else 1 for p in group
    ]
    row = [
        " ".join(str(p.trial) for p in group),
        first.scheme + (", off the front" if off and wide else ""),
        _patches(sides),
        _accuracy(first.val_accuracy, first.test_accuracy),
    ]
    if reference is not None:
        row.append(_against(first, reference))
    if int8:
        device = next((int8[p.candidate_key] for p in group if p.candidate_key in int8), None)
        row.append(
            _accuracy(device.val_accuracy, device.test_accuracy) if device is not None else "-"
        )
    row.append(_kb_span([p.memory_bytes for p in group]))
    latencies = [p.latency_s for p in group if p.latency_s is not None]
    row.append(_span(latencies, lambda s: f"{1000 * s:.0f}") + " ms" if latencies else "-")
    if wide:
        ratio = (
            f"{reference.memory_bytes / first.memory_bytes:.1f}× less"
            if reference is not None and first.candidate_key != reference.candidate_key
            else ""
        )
        flash = format_bytes(first.flash_bytes) if first.flash_bytes else "-"
        row += [ratio, flash, first.candidate_key]
    return row


def front_json(
    front: Sequence[FrontPoint],
    reference: FrontPoint | None,
    int8: Mapping[str, Int8Accuracy],
    schedules: Mapping[str, Schedule],
) -> list[dict[str, Any]]:
    """Every point of the front, then the reference where it is off the front, as JSON
    objects: the stored point's fields, its patches per side and fine-tune, whether it is on
    the front, and its int8 accuracies where measured."""
    on_front = {p.candidate_key for p in front}
    points = list(front)
    if reference is not None and reference.candidate_key not in on_front:
        points.append(reference)
    out = []
    for p in points:
        known = schedules.get(p.candidate_key)
        device = int8.get(p.candidate_key)
        out.append(
            {
                **asdict(p),
                "on_front": p.candidate_key in on_front,
                "reference": reference is not None and p.candidate_key == reference.candidate_key,
                "patches": known.patches if known else None,
                "fine_tune": known.fine_tune if known else None,
                "int8_val_accuracy": device.val_accuracy if device else None,
                "int8_test_accuracy": device.test_accuracy if device else None,
            }
        )
    return out
