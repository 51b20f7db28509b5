"""The generated blocks of the README and ``docs/``: ``bench/markers.py`` replaces exactly the
text between a block's markers, and every benchmark script's block sits in the page that the
script (or the command beside the block) writes."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.search.benches import load_bench

ROOT = Path(__file__).resolve().parents[1]
# each block a script writes, and the page that holds it
BLOCKS = {
    "fresh-run": "README.md",  # bench/readme.py
    "first-run": "docs/bench/first-run.md",  # bench/first_run.py
    "first-run-letters": "docs/bench/first-run.md",  # bench/first_run.py --section ...
    "lr-grid": "docs/bench/lr-grid.md",  # bench/lr_grid.py --section ...
    "lr-grid-16": "docs/bench/lr-grid.md",
    "lr-grid-lengths": "docs/bench/lr-grid.md",
    "seeds": "docs/bench/claims.md",  # bench/seeds.py
    "device-accuracy": "docs/bench/device-accuracy.md",
    "device-accuracy-folder": "docs/bench/device-accuracy.md",
    "scale": "docs/scale.md",  # bench/scale.py --write docs/scale.md
}


@pytest.fixture(scope="module")
def markers() -> ModuleType:
    return load_bench("markers")


DOC = "# Page\n\nbefore\n<!-- t:begin -->\nold\ntable\n<!-- t:end -->\nafter\n"


def test_a_block_is_replaced_and_nothing_else(markers: ModuleType) -> None:
    assert markers.replace_block(DOC, "t", "new\n") == (
        "# Page\n\nbefore\n<!-- t:begin -->\nnew\n<!-- t:end -->\nafter\n"
    )
    assert markers.read_block(DOC, "t") == "old\ntable"
    # replacing a block by its own text gives the page back
    assert markers.replace_block(DOC, "t", markers.read_block(DOC, "t")) == DOC


@pytest.mark.parametrize(
    "doc",
    [
        "no markers\n",
        "<!-- t:begin -->\nonly the start\n",
        "<!-- t:end -->\nend before begin\n<!-- t:begin -->\n",
        DOC + DOC,  # twice: which one is meant is not clear
    ],
)
def test_a_page_without_one_block_is_refused(markers: ModuleType, doc: str) -> None:
    with pytest.raises(SystemExit, match=r"<!-- t:begin --> … <!-- t:end -->"):
        markers.replace_block(doc, "t", "new")


def test_blocks_go_to_the_page_that_holds_them(markers: ModuleType, tmp_path: Path) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(DOC)
    b.write_text("<!-- u:begin -->\n<!-- u:end -->\n")
    written = markers.write_blocks([a, b], {"u": "U", "t": "T"})
    assert written == [a, b]
    assert markers.read_block(a.read_text(), "t") == "T"
    assert b.read_text() == "<!-- u:begin -->\nU\n<!-- u:end -->\n"


def test_a_missing_block_writes_no_page(markers: ModuleType, tmp_path: Path) -> None:
    a = tmp_path / "a.md"
    a.write_text(DOC)
    with pytest.raises(SystemExit, match="'v'"):
        markers.write_blocks([a], {"t": "T", "v": "V"})
    assert a.read_text() == DOC


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_every_block_is_once_in_its_page(markers: ModuleType, name: str) -> None:
    doc = (ROOT / BLOCKS[name]).read_text()
    markers.read_block(doc, name, BLOCKS[name])  # raises unless exactly once, in order
    others = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    holding = [p for p in others if markers.markers(name)[0] in p.read_text()]
    assert holding == [ROOT / BLOCKS[name]]


def test_the_scripts_default_pages_hold_their_blocks() -> None:
    seeds = load_bench("seeds")
    holding = {
        name for name in BLOCKS for page in seeds.PAGES if f"<!-- {name}:" in page.read_text()
    }
    assert holding == {"seeds", "device-accuracy", "device-accuracy-folder"}
    assert load_bench("readme").README == ROOT / "README.md"


def test_every_write_command_names_pages_that_exist() -> None:
    """``--write PAGE`` in the pages' commands and the scripts' docstrings names pages of this
    repository, and ``--section NAME`` a block of that page."""
    sources = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "bench").glob("*.py")]
    found = 0
    for source in sources:
        text = source.read_text()
        for match in re.finditer(
            r"--write((?:\s+docs/[\w./-]+\.md)+)(?:\s+--section\s+([\w-]+))?", text
        ):
            pages = match.group(1).split()
            for page in pages:
                assert (ROOT / page).is_file(), f"{source.name}: {page}"
                found += 1
            if match.group(2):
                assert any(
                    f"<!-- {match.group(2)}:begin -->" in (ROOT / p).read_text() for p in pages
                )
    assert found >= 8  # the commands of first-run, lr-grid, device accuracy and the claims
