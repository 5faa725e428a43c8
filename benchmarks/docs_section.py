"""Writes one benchmark's section of docs/benchmarks.md, leaving the other sections as they are.

A section starts at its `## ` heading and ends where the next heading or another script's
`<!--` marker begins; a missing section is appended. Every benchmark's `--smoke` run (what
tests/benchmarks/test_smoke.py runs) writes no section and says so with `smoke_done`.
"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SMOKE_HELP = ("check that the benchmark runs: its code path on tiny sizes, in seconds; reports no "
              "figures and leaves docs/benchmarks.md as it is")


def smoke_done(script: str) -> int:
    """The last line of a `--smoke` run, in place of the table; 0 for the exit status."""
    print(f"{script}: smoke run done (tiny sizes, so no figures; docs/benchmarks.md unchanged)")
    return 0


def write_section(heading: str, section: str, docs: Path = DOCS) -> None:
    text = docs.read_text() if docs.exists() else "# Benchmarks\n"
    if heading in text:
        before, _, rest = text.partition(heading)
        ends = [i for i in (rest.find("\n## "), rest.find("\n<!--")) if i >= 0]
        text = before + section + (rest[min(ends):] if ends else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(text)
