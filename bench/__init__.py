"""The benchmark scripts, run as modules from the repository's root (``python3 -m bench.NAME``),
and what they share: :mod:`bench.harness` (arguments, JSON, Markdown tables, the machine) and
:mod:`bench.markers` (the generated blocks of Markdown pages)."""
