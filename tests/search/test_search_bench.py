"""bench/search_efficiency.py end to end at the smallest settings: the strategies of each kind
(the default, MCUNetV3's recipe, one at a smaller budget) run within their epochs, the records
keep validation and test accuracy, and the report reads them back; every other strategy's
options make a valid search configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinytune.search.config.search_config import SearchConfig

from .benches import load_bench

# one strategy of each code path the benchmark takes: the default (presets, mutants that climb),
# MCUNetV3's contribution analysis and evolution, and (below) the halving ladder at a smaller
# budget; the others (a sampler alone, a preset's search) are the driver's with other options,
# which test_every_strategy_... checks
RUN = ("evolve", "mcunetv3")


@pytest.mark.slow
def test_search_bench_smallest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_bench("search_efficiency")
    out = tmp_path / "runs.jsonl"
    args = [
        *("--budget", "6", "--epochs", "2", "--screen-epochs", "1", "--screen-fraction", "0.25"),
        *("--seeds", "0", "--workers", "0", "--evolution-trials", "12", "--population", "4"),
        *("--small-budget", "2", "--small", "halving", "--lr", "1.6", "--strategies", *RUN),
        *("--out", str(out), "--db", str(tmp_path / "bench.db")),
    ]
    assert module.main(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strategy"] for r in records] == [*RUN, "halving@2"]
    for r in records:
        assert r["epochs"] <= r["budget_epochs"] + 1e-9, r["strategy"]
        assert r["points"], r["strategy"]  # each measured at least one candidate
        for val, sram, latency, test in r["points"]:
            assert 0.0 <= val <= 1.0 and 0.0 <= test <= 1.0 and sram > 0 and latency > 0
    by = {r["strategy"]: r for r in records}
    # the default measures the four presets on the default sub-network first: the best of them
    # within the budget is among its points; MCUNetV3's recipe measures none of them
    hand = by["evolve"]["hand_written"]
    assert hand is not None and tuple(hand) in {(p[0], p[3]) for p in by["evolve"]["points"]}
    assert by["mcunetv3"]["hand_written"] is None
    # the contribution analysis: 34 fine-tunes of 1 epoch on a quarter of the images
    assert by["mcunetv3"]["epochs"] == pytest.approx(
        34 * 0.25 + 2 * len(by["mcunetv3"]["points"]), abs=0.5
    )
    assert by["halving@2"]["budget_epochs"] == 4
    printed = capsys.readouterr().out
    assert "| mcunetv3 | 1 |" in printed and "× the best baseline's" in printed
    assert "* evolve: most accurate point on validation above the best of its own" in printed
    assert module.main(["--report", str(out)]) == 0
    assert capsys.readouterr().out.strip() in printed


def test_every_strategy_is_a_valid_search_configuration() -> None:
    module = load_bench("search_efficiency")
    assert set(RUN) <= set(module.STRATEGIES)
    for strategy, options in module.SEARCHES.items():
        config = SearchConfig(
            checkpoint="glyph.pt", study_name=strategy, dataset="digits", n_classes=10, **options
        )
        for option, value in options.items():
            assert getattr(config, option) == value, (strategy, option)


def test_the_report_counts_wins_and_ties_against_the_preset_searches_seed_by_seed() -> None:
    module = load_bench("search_efficiency")

    def record(strategy: str, seed: int, *points: tuple[float, float]) -> dict:
        # a point: (validation accuracy, peak SRAM, step latency, test accuracy)
        return {
            "strategy": strategy,
            "seed": seed,
            "points": [[v, 1.0, 1.0, t] for v, t in points],
        }

    records = [
        record("evolve", 0, (0.90, 0.80), (0.95, 0.93)),  # above both preset searches
        record("preset-last", 0, (0.91, 0.90)),
        record("preset-mcunetv3", 0, (0.94, 0.92)),
        record("evolve", 1, (0.97, 0.96)),  # level with the best of them
        record("preset-last", 1, (0.97, 0.95)),
        record("preset-mcunetv3", 1, (0.90, 0.99)),
        record("evolve", 2, (0.50, 0.40)),  # below
        record("preset-last", 2, (0.60, 0.55)),
    ]
    assert module._against_presets(records) == [
        "",
        "* evolve: most accurate point on validation above every preset search's in 1 of 3 "
        "seeds, level with the best of them in 1; seed by seed, validation (test) %, evolve / "
        "the best preset search: 0: 95.0 (93.0) / 94.0 (92.0); 1: 97.0 (96.0) / 97.0 (95.0); "
        "2: 50.0 (40.0) / 60.0 (55.0)",
    ]
    # against one preset search: seed 0 above preset-last's 91 %, seed 1 level, seed 2 below
    assert module._against_presets(records, "preset-last")[2] == (
        "* evolve: most accurate point on validation above preset-last's (the preset search of "
        "highest median hypervolume) in 1 of 3 seeds, level in 1"
    )
    # a variant of the default recorded under a label of its own is counted as the default is
    variant = [{**r, "strategy": "evolve-draws-4"} for r in records if r["strategy"] == "evolve"]
    presets = [r for r in records if r["strategy"] != "evolve"]
    assert module._against_presets(variant + presets, "preset-last")[1:] == [
        line.replace("evolve", "evolve-draws-4")
        for line in module._against_presets(records, "preset-last")[1:]
    ]
    assert module._against_presets([{**r, "strategy": "mcunetv3"} for r in records]) == []
    # MCUNetV3's recipe, a baseline but no preset search, is counted apart: seed 0 above its
    # 93 %, seed 1 level with its 97 %; seed 2 has no run of it
    recipe = [record("mcunetv3", 0, (0.93, 0.90)), record("mcunetv3", 1, (0.97, 0.97))]
    assert module._against_presets(records + recipe)[2] == (
        "* evolve: most accurate point on validation above MCUNetV3's recipe's (mcunetv3: "
        "contribution analysis, then evolution) in 1 of 2 seeds, level in 1; seed by seed, "
        "validation (test) %, evolve / mcunetv3: 0: 95.0 (93.0) / 93.0 (90.0); 1: 97.0 (96.0) "
        "/ 97.0 (97.0)"
    )
    assert module._against_presets(records + recipe)[1] == module._against_presets(records)[1]


def test_the_report_counts_the_seeds_above_the_strategys_own_hand_written_presets() -> None:
    module = load_bench("search_efficiency")

    def record(seed: int, best: float, hand: list[float] | None) -> dict:
        points = [[best, 1.0, 1.0, 0.5], [0.4, 1.0, 1.0, 0.4]]
        return {"strategy": "evolve", "seed": seed, "points": points, "hand_written": hand}

    records = [
        record(0, 0.9, [0.8, 0.7]),  # above
        record(1, 0.8, [0.8, 0.7]),  # level: the preset is its best point
        record(2, 0.9, [0.85, 0.8]),  # above
        record(3, 0.9, None),  # an older record, without the field: not counted
        {  # a preset's search that drew the default sub-network: no presets measured first
            "strategy": "preset-last",
            "seed": 0,
            "points": [[0.9, 1, 1, 0.9]],
            "hand_written": [0.8, 0.8],
        },
    ]
    assert module._against_hand_written(records) == [
        "* evolve: most accurate point on validation above the best of its own hand-written "
        "presets (on the default sub-network) in 2 of 3 seeds, level in 1; seed by seed, "
        "validation %, evolve / that preset: 0: 90.0 / 80.0; 1: 80.0 / 80.0; 2: 90.0 / 85.0"
    ]


def test_the_report_gives_the_drivers_own_seconds_where_the_records_carry_them() -> None:
    module = load_bench("search_efficiency")

    def record(strategy: str, driver_s: float | None, wall_s: float) -> dict:
        return {"strategy": strategy, "driver_s": driver_s, "wall_s": wall_s}

    records = [
        record("evolve", 2.0, 10.0),  # 20 % of its wall
        record("evolve", 6.0, 20.0),  # 30 %
        record("evolve", 4.0, 40.0),  # 10 %
        record("mcunetv3", None, 50.0),  # no search driver: not reported
        {"strategy": "preset-last", "wall_s": 5.0},  # an older record: none
    ]
    assert module._driver_time(records) == [
        "",
        "* the driver's own seconds a run (median, range; share of the wall): "
        "evolve 4.0 s (2.0–6.0; 20 % of the wall)",
    ]
    assert module._driver_time(records[3:]) == []


def test_a_given_latency_reference_keeps_the_hypervolume_whatever_else_the_file_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_bench("search_efficiency")
    kb = 256 * 1024

    def record(strategy: str, *points: tuple[float, float, float]) -> dict:
        # a point: (validation accuracy, peak SRAM bytes, step latency s, test accuracy)
        return {
            "strategy": strategy,
            "seed": 0,
            "points": [[a, m, t, a] for a, m, t in points],
            "sram_budget": kb,
            "epochs": 1,
            "wall_s": 1.0,
        }

    def medians(text: str) -> dict[str, float]:
        rows = [line.split("|") for line in text.splitlines() if line.startswith("| ")]
        return {r[1].strip(): float(r[3]) for r in rows if r[1].strip() in ("evolve", "slow")}

    evolve = record("evolve", (0.8, kb / 2, 1.0))
    # by hand, reference (0, 256 KB, 2 s): 0.8 × (1 − 0.5) × (1 − 1.0 / 2.0) = 0.2
    assert medians(module.report([evolve], 2.0)) == {"evolve": 0.2}
    # a strategy with a slower step moves the default reference (1.1 × 4 s), not a given one
    slow = record("slow", (0.9, kb / 4, 4.0))
    assert medians(module.report([evolve, slow], 2.0)) == {"evolve": 0.2, "slow": 0.0}
    by_file = medians(module.report([evolve, slow]))
    assert by_file["evolve"] == pytest.approx(0.8 * 0.5 * (1 - 1.0 / 4.4), abs=5e-5)
    assert "4.4 s a step (1.1 × the slowest step in these records)" in module.report(
        [evolve, slow]
    )
    assert "2 s a step (given)" in module.report([evolve], 2.0)
    with pytest.raises(SystemExit):
        module.main(["--report", "x.jsonl", "--latency-ref", "0"])
    assert "--latency-ref must be a positive number of seconds, not 0.0" in capsys.readouterr().err


def test_a_report_takes_several_files_once_each_and_of_one_data_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--report A B`` is the report of A's and B's records together; a run given twice, a
    file that is not there and two data sets are one-line errors."""
    module = load_bench("search_efficiency")
    first, more = (
        RECORDS / f"search-letters-reproducible-zen5{s}.jsonl" for s in ("", "-seeds5-9")
    )
    both = tmp_path / "both.jsonl"
    both.write_text(first.read_text() + more.read_text())
    assert module.main(["--report", str(first), str(more), "--latency-ref", "2.35838"]) == 0
    together = capsys.readouterr().out
    assert module.main(["--report", str(both), "--latency-ref", "2.35838"]) == 0
    assert capsys.readouterr().out == together and "| evolve | 10 |" in together
    textures = RECORDS / "search-textures-reproducible-zen5.jsonl"
    for files, error in [
        ([first, both], f"{both} holds evolve seed 0 of imagefolder:/tmp/letters again ({first}"),
        ([tmp_path / "none.jsonl"], f"--report: no records file {tmp_path / 'none.jsonl'}"),
        ([first, textures], "records of imagefolder:/tmp/letters and imagefolder:/tmp/textures"),
        (
            [RECORDS.parent / "search.md"],
            "search.md is not a file of run records (JSON lines)",
        ),
    ]:
        with pytest.raises(SystemExit):
            module.main(["--report", *map(str, files)])
        assert error in capsys.readouterr().err


# the table at the top of docs/bench/search.md: each folder's records on two processors
RECORDS = Path(__file__).resolve().parents[2] / "docs" / "bench" / "records"
FOLDER_FILES = {
    "letters": (
        "search-letters-reproducible-zen3.jsonl",
        "search-letters-reproducible-zen5.jsonl",
    ),
    "textures": (
        "search-textures-reproducible-zen3.jsonl",
        "search-textures-reproducible-zen5.jsonl",
    ),
    "symbols": (
        "search-symbols-reproducible-zen3.jsonl",
        "search-symbols-reproducible-zen5.jsonl",
    ),
    "textures-hard": (
        "search-textures-hard-reproducible.jsonl",
        "search-textures-hard-reproducible-zen5.jsonl",
    ),
}
PRESET_LAST = (
    r"above preset-last's \(the preset search of highest median hypervolume\) in (\d) of 5 "
    r"seeds, level in (\d)"
)
EVERY_PRESET = (
    r"above every preset search's in (\d) of 5 seeds, level with the best of them in (\d)"
)
HAND_WRITTEN = (
    r"above the best of its own hand-written presets \(on the default sub-network\) in (\d) "
    r"of 5 seeds, level in (\d)"
)
# each documented table: the records it is read from (per folder, one file per processor),
# its hypervolume row's label, the decimals of its ratios, and each count row's label with the
# report's line it is read from
SCREENED = {  # today's default on two processors: an AMD EPYC Zen 5 and an Intel Xeon
    folder: tuple(f"search-{folder}-screened-{cpu}.jsonl" for cpu in ("zen5", "xeon"))
    for folder in FOLDER_FILES
}
TABLES = {
    "bench/search.md, today's default": (
        SCREENED,
        "the default's median hypervolume against `preset-last`'s, the best preset search's",
        4,
        {
            "seeds where its most accurate point on validation beats `preset-last`'s (level)": (
                PRESET_LAST
            ),
            "seeds where it beats both preset searches', the better of `preset-last`'s and "
            "`preset-mcunetv3`'s seed by seed (level)": EVERY_PRESET,
            "seeds where it beats its own hand-written presets, the four it measures first on "
            "the default sub-network (level)": HAND_WRITTEN,
        },
    ),
    "bench/search.md, before the screen": (
        FOLDER_FILES,
        "the default's median hypervolume against the best preset search's (`preset-last`)",
        4,
        {
            "seeds where its most accurate point on validation beats the most accurate of that "
            "search, `preset-last`'s (level)": PRESET_LAST,
            "seeds where it beats every preset search's, the better of `preset-last`'s and "
            "`preset-mcunetv3`'s seed by seed (level)": EVERY_PRESET,
            "seeds where it beats the best of its own hand-written presets, the four presets it "
            "measures first on the default sub-network (level)": HAND_WRITTEN,
        },
    ),
    "searching.md": (
        SCREENED,
        "median hypervolume, against the best preset search's (`--preset last`)",
        3,
        {
            "seeds where its most accurate point on validation beats that search's (level)": (
                PRESET_LAST
            ),
            "seeds where it beats every preset search's, the better of two seed by seed "
            "(level)": EVERY_PRESET,
            "seeds where it beats the best of the hand-written presets it measures first "
            "(level)": HAND_WRITTEN,
        },
    ),
}


RATIO = r"\* evolve: ([\d.]+)× the best baseline's \(preset-last\)"


def _report(*names: str) -> str:
    """``--report``'s text of the committed records ``names`` together, at the documented
    reference point."""
    module = load_bench("search_efficiency")
    lines = [line for name in names for line in (RECORDS / name).read_text().splitlines()]
    return module.report([json.loads(line) for line in lines], latency_ref=2.35838)


def _table_rows(document: str) -> dict[str, list[str]]:
    """A document's table rows by their first cell, each one's other cells (bold dropped)."""
    text = (RECORDS.parents[1] / document).read_text().replace("**", "")
    return {
        line.split(" | ")[0][2:]: [c.rstrip(" |") for c in line.split(" | ")[1:]]
        for line in text.splitlines()
    }


@pytest.mark.parametrize("document", TABLES)
def test_the_documented_search_table_is_what_its_records_give(document: str) -> None:
    """Every figure of the search benchmark's table on real features (hypervolume ratios and
    seed counts, Zen 3 / Zen 5), in the benchmark's page and in the guide, is what ``--report``
    computes from the committed records, with the documented reference point."""
    import re

    rows = _table_rows(document.split(",")[0])
    files, label, decimals, counts = TABLES[document]
    reports = [[_report(name) for name in names] for names in files.values()]
    for i, texts in enumerate(reports):
        found = [re.search(RATIO, t) for t in texts]
        assert all(found)
        assert rows[label][i] == " / ".join(f"{float(m[1]):.{decimals}f}×" for m in found if m)
    for row, pattern in counts.items():
        for i, texts in enumerate(reports):
            found = [re.search(pattern, t) for t in texts]
            assert all(found), row
            cell = " / ".join(f"{m[1]} ({m[2]})" for m in found if m) + " of 5"
            assert rows[row][i] == cell, row


TEN_SEEDS = {
    # each ten-seed table of the search benchmark: its records' name, the label of its
    # hypervolume row (seeds 5-9; all ten) and of its count rows
    "today's default": (
        "screened",
        "ten seeds: its median hypervolume against `preset-last`'s, seeds 5–9; all ten",
        {
            "ten seeds: seeds where its most accurate point beats `preset-last`'s (level)": (
                PRESET_LAST
            ),
            "ten seeds: seeds where it beats both preset searches' (level)": EVERY_PRESET,
            "ten seeds: seeds where it beats its own hand-written presets (level)": HAND_WRITTEN,
        },
    ),
    "before the screen": (
        "reproducible",
        "the default's median hypervolume against `preset-last`'s: seeds 5–9; all ten",
        {
            "seeds where its most accurate point beats `preset-last`'s (level), all ten": (
                PRESET_LAST
            ),
            "seeds where it beats every preset search's (level), all ten": EVERY_PRESET,
            "seeds where it beats its own hand-written presets (level), all ten": HAND_WRITTEN,
        },
    ),
}


@pytest.mark.parametrize("table", TEN_SEEDS)
def test_the_ten_seed_table_is_what_its_records_give(table: str) -> None:
    """The ten-seed tables of the search benchmark (Zen 5, seeds 5-9 and all ten) are what
    ``--report`` computes from the two committed files of each folder; today's also gives the
    default's before the screen, as the other table does."""
    import re

    rows = _table_rows("bench/search.md")
    name, label, counts = TEN_SEEDS[table]
    before = rows[TEN_SEEDS["before the screen"][1]]
    for i, folder in enumerate(("letters", "textures", "symbols")):
        first, more = (f"search-{folder}-{name}-zen5{s}.jsonl" for s in ("", "-seeds5-9"))
        ten = _report(first, more)
        ratios = [re.search(RATIO, t) for t in (_report(more), ten)]
        assert all(ratios)
        assert rows[label][i] == "; ".join(f"{m[1]}×" for m in ratios if m)
        if table == "today's default":
            assert rows["ten seeds: the same before the screen"][i] == before[i]
        for row, pattern in counts.items():
            found = re.search(pattern.replace(r"(\d)", r"(\d+)").replace("of 5", "of 10"), ten)
            assert found, row
            assert rows[row][i] == f"{found[1]} ({found[2]}) of 10", row


def test_the_default_before_the_screen_is_the_same_in_each_table() -> None:
    """The row of today's tables that gives the default before the screen holds the figures of
    the table of that default (Zen 5), in the benchmark's page and in the guide."""
    page, guide = _table_rows("bench/search.md"), _table_rows("searching.md")
    label, _, counts = TABLES["bench/search.md, before the screen"][1:]
    level = next(row for row in counts if "`preset-last`'s (level)" in row)
    zen5 = [cell.split(" / ")[1] for cell in page[label]]
    seeds = [cell.split(" / ")[1].removesuffix(" of 5") for cell in page[level]]
    row = (
        "the default before its draws were screened, Zen 5 ([below](#before-the-hypervolumes-"
        "draws-unscreened-zen-3--zen-5)): hypervolume against `preset-last`'s; seeds above its "
        "best point (level)"
    )
    assert page[row] == [f"{r}; {n}" for r, n in zip(zen5, seeds, strict=True)]
    guide_row = "before the draws by the hypervolume were screened: median hypervolume, Zen 5"
    assert guide[guide_row] == [f"{float(r.rstrip('×')):.3f}×" for r in zen5]


def test_the_documented_drivers_time_before_and_after_is_what_its_records_give() -> None:
    """The benchmark page's driver seconds before and after pricing was made cheaper (medians,
    their ratio, the median shares of the wall) are the committed records', whose searches
    found the same points, value for value, as the Xeon's table records of the same seeds."""
    import statistics

    runs = {
        when: [json.loads(line) for line in (RECORDS / name).read_text().splitlines()]
        for when, name in (
            ("before", "search-textures-driver-before.jsonl"),
            ("after", "search-textures-driver-after.jsonl"),
        )
    }
    table = [
        json.loads(line)
        for line in (RECORDS / "search-textures-screened-xeon.jsonl").read_text().splitlines()
    ]
    for records in runs.values():
        assert sorted(r["seed"] for r in records) == [0, 1, 2, 3, 4]
        for r in records:
            same = [t for t in table if t["strategy"] == "evolve" and t["seed"] == r["seed"]]
            assert [t["points"] for t in same] == [r["points"]]
    own = {when: statistics.median(r["driver_s"] for r in rs) for when, rs in runs.items()}
    share = {
        when: statistics.median(r["driver_s"] / r["wall_s"] for r in rs)
        for when, rs in runs.items()
    }
    page = (RECORDS.parents[1] / "bench" / "search.md").read_text()
    sentence = (
        f"from {own['before']:.1f} s a run to {own['after']:.1f} s (median; "
        f"{own['after'] / own['before']:.2f}×), {100 * share['before']:.0f} % of the wall time "
        f"to {100 * share['after']:.0f} %"
    )
    assert sentence in " ".join(page.split())


def test_the_documented_comparison_with_mcunetv3s_recipe_is_what_its_records_give() -> None:
    """The Xeon's table against MCUNetV3's recipe (and the letters' other preset searches): its
    median hypervolumes, seed counts and the recipe's median best point are what ``--report``
    computes from the committed records, which chose the same rates as the table's searches."""
    import re

    rows = _table_rows("bench/search.md")

    def medians(text: str, *strategies: str) -> str:
        found = [re.search(rf"^\| {s} \| 5 \| ([\d.]+) \|", text, re.M) for s in strategies]
        return "; ".join(m[1] if m else "missing" for m in found)

    for i, folder in enumerate(("letters", "textures", "symbols")):
        names = (f"search-{folder}-screened-xeon.jsonl", f"search-{folder}-baselines-xeon.jsonl")
        runs = [json.loads(line) for n in names for line in (RECORDS / n).read_text().splitlines()]
        chosen = {json.dumps({k: v["lr"] for k, v in r["lr"].items()}) for r in runs}
        assert len(chosen) == 1, folder  # every run of the folder at the same rates
        text = _report(*names)
        label = "median hypervolume: the default; `preset-last`; MCUNetV3's recipe"
        assert rows[label][i] == medians(text, "evolve", "preset-last", "mcunetv3")
        others = rows["median hypervolume: `preset-bias-only`; `preset-tinytl`"][i]
        assert others == (
            medians(text, "preset-bias-only", "preset-tinytl")
            if folder == "letters"
            else "not run"
        )
        count = re.search(r"above MCUNetV3's recipe's .* in (\d) of 5 seeds, level in (\d)", text)
        assert count
        label = (
            "seeds where the default's most accurate point on validation beats the recipe's "
            "(level)"
        )
        assert rows[label][i] == f"{count[1]} ({count[2]}) of 5"
        best = re.search(
            r"^\| mcunetv3 \| 5 \|(?: [^|]+ \|){3} ([\d.]+) \| ([\d.]+) \|", text, re.M
        )
        assert best
        label = "the recipe's median most accurate point, validation / test (%)"
        assert rows[label][i] == f"{best[1]} / {best[2]}"
