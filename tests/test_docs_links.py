"""Every relative link of the README and of ``docs/`` leads somewhere: to a file of the
repository and, with ``#anchor``, to a heading of that file (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, every character but letters, digits, ``_``,
    ``-`` and spaces dropped, spaces turned into ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated one as GitHub numbers it)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(text):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text: str) -> list[str]:
    """The targets of a Markdown text's links and images, outside code blocks and spans."""
    found = []
    for line in _prose(text):
        line = re.sub(r"`[^`]*`", "", line)
        for match in LINK.finditer(line):
            found.append(match.group(1) or match.group(2))
    return found


def broken(page: Path) -> list[str]:
    """The relative links of ``page`` whose file or heading does not exist."""
    bad = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            bad.append(f"{target}: no heading with that anchor")
    return bad


def test_slugs_follow_githubs_rule() -> None:
    # written out by hand from the anchors GitHub gives these headings
    assert slug("The papers' claims, measured on tinytune's pipeline") == (
        "the-papers-claims-measured-on-tinytunes-pipeline"
    )
    assert slug("Mutations of the front (`--mutate`)") == "mutations-of-the-front---mutate"
    assert slug("On the largest sub-network: 10× less SRAM") == (
        "on-the-largest-sub-network-10-less-sram"
    )
    assert slug("With today's planner") == "with-todays-planner"


def test_anchors_skip_code_blocks_and_number_repeats() -> None:
    text = "# A\n\n```bash\n# not a heading\n```\n\n## A\n\n### Other one\n"
    assert anchors(text) == {"a", "a-1", "other-one"}


def test_links_skip_code_and_find_images() -> None:
    text = "[a](x.md) `[b](y.md)` ![pic](docs/p.png)\n```\n[c](z.md)\n```\n[d](w.md#h)"
    assert links(text) == ["x.md", "docs/p.png", "w.md#h"]


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Here\n")
    page.write_text("[ok](other.md#here) [gone](nothing.md) [no heading](other.md#there)\n")
    assert broken(page) == [
        "nothing.md: no such file",
        "other.md#there: no heading with that anchor",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []
