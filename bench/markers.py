"""Generated blocks of Markdown pages: the text between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``, which a benchmark script replaces with the figures it has just measured.

The README and the pages under ``docs/`` show tables that scripts write, never tables typed by
hand; each script names its blocks, and the page that holds a block is found by its markers, so
a block can move from page to page without the script changing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["markers", "page_with", "read_block", "replace_block", "write_blocks", "write_section"]


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of block ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _split(doc: str, name: str, where: str) -> tuple[str, str, str]:
    """``doc`` as (text up to and with the begin marker, the block, the end marker and after);
    a ``SystemExit`` naming ``where`` unless both markers occur exactly once, in order."""
    begin, end = markers(name)
    if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
        raise SystemExit(f"{where} has no single {begin} … {end} block to replace")
    head, rest = doc.split(begin, 1)
    inside, tail = rest.split(end, 1)
    return head + begin, inside, end + tail


def replace_block(doc: str, name: str, text: str, where: str = "the page") -> str:
    """``doc`` with block ``name`` replaced by ``text`` (on lines of its own between the
    markers); everything outside the markers is kept as it was."""
    head, _, tail = _split(doc, name, where)
    return f"{head}\n{text.strip(chr(10))}\n{tail}"


def read_block(doc: str, name: str, where: str = "the page") -> str:
    """The text of block ``name`` in ``doc``, without the newlines next to its markers."""
    return _split(doc, name, where)[1].strip("\n")


def write_section(path: Path, name: str, text: str) -> None:
    """Replace block ``name`` of the file ``path`` by ``text``."""
    path.write_text(replace_block(path.read_text(), name, text, str(path)))


def page_with(name: str, pages: Iterable[Path]) -> Path:
    """The one page of ``pages`` that holds block ``name``; a ``SystemExit`` when none or
    several do."""
    begin, _ = markers(name)
    holding = [page for page in pages if begin in page.read_text()]
    if len(holding) != 1:
        found = ", ".join(map(str, holding)) or "none of them"
        raise SystemExit(f"block {name!r} must be in exactly one of the pages given: {found}")
    return holding[0]


def write_blocks(pages: Iterable[Path], blocks: Mapping[str, str]) -> list[Path]:
    """Write every block of ``blocks`` (name: text) into the page of ``pages`` that holds its
    markers. Every page is checked before any is written, so a missing block changes nothing.
    Returns the pages written."""
    pages = list(pages)
    where = {name: page_with(name, pages) for name in blocks}
    docs = {page: page.read_text() for page in set(where.values())}
    for name, text in blocks.items():
        docs[where[name]] = replace_block(docs[where[name]], name, text, str(where[name]))
    for page, doc in docs.items():
        page.write_text(doc)
    return sorted(docs)
