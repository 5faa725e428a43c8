"""The `algo.*` choices: each one the config offers has a row in docs/algorithms.md's option map,
and the config offers them without importing torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rlrun.config import CHOICES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"


def _documented() -> dict[str, set[str]]:
    """Values per key in the option map's first column, whose cells name them as
    "`key: value`", "`key: value` / `other`" or several such groups split by commas."""
    lines = DOCS.read_text().splitlines()
    start = lines.index("| rlrun `algo.` | TRL `GRPOConfig` | veRL | notes |")
    documented: dict[str, set[str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        for group in line.split("|")[1].split(","):
            names = re.findall(r"`([^`]+)`", group)
            if names and ": " in names[0]:
                key, first = names[0].split(": ", 1)
                documented.setdefault(key, set()).update([first, *names[1:]])
    return documented


def test_every_algo_choice_is_in_the_docs_option_map() -> None:
    documented = _documented()
    missing = [
        f"{key}: {value}"
        for key, choices in CHOICES.items() if key.startswith("algo.")
        for value in choices if value not in documented.get(key.removeprefix("algo."), set())
    ]
    assert not missing, f"docs/algorithms.md's option map has no row for {missing}"


def test_loading_the_config_does_not_import_torch() -> None:
    code = "import sys, rlrun.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
