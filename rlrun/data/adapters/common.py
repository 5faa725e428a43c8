"""Field helpers shared by the adapters: required fields, nested JSON, limits, stdio cases.

Each helper raises `RowError` naming the field, so every adapter reports bad rows the same way.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from rlrun.data.errors import RowError
from rlrun.records import StdioTest


def text(row: dict[str, Any], field: str) -> str:
    """A required, non-empty string field."""
    if field not in row or row[field] is None:
        raise RowError(field, "is missing")
    value = row[field]
    if not isinstance(value, str):
        raise RowError(field, f"must be text, got {type(value).__name__}")
    if not value.strip():
        raise RowError(field, "is empty")
    return value


def optional_text(row: dict[str, Any], field: str) -> str | None:
    value = row.get(field)
    return value if isinstance(value, str) and value.strip() else None


def first_text(row: dict[str, Any], fields: tuple[str, ...]) -> tuple[str, str]:
    """The first present of several alternative fields, as (field name, text)."""
    for field in fields:
        if row.get(field) is not None:
            return field, text(row, field)
    raise RowError(" or ".join(fields), "is missing")


def structured(row: dict[str, Any], field: str) -> Any:
    """A field holding a list/dict, possibly encoded as a JSON or Python-literal string.

    Python literals are parsed with `ast.literal_eval`, never evaluated.
    """
    if field not in row or row[field] is None:
        raise RowError(field, "is missing")
    value = row[field]
    if not isinstance(value, str):
        return value
    if not value.strip():
        raise RowError(field, "is empty")
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise RowError(field, "is a string that is neither JSON nor a Python literal") from None


def case_text(value: Any, field: str) -> str:
    """One test input or output as text (numbers are written out, lists of lines joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise RowError(field, f"holds a {type(value).__name__} where test text is expected")
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise RowError(field, f"holds a {type(value).__name__} where test text is expected")


def paired(inputs: Any, outputs: Any, field: str) -> list[tuple[Any, Any]]:
    """Parallel input/output lists as (input, output) pairs."""
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise RowError(field, "must hold lists of inputs and outputs")
    if len(inputs) != len(outputs):
        raise RowError(field, f"has {len(inputs)} inputs but {len(outputs)} outputs")
    return list(zip(inputs, outputs, strict=True))


def stdio_pairs(inputs: Any, outputs: Any, field: str) -> list[StdioTest]:
    """Parallel input/output lists as stdio tests."""
    return [StdioTest(case_text(i, f"{field}.inputs"), case_text(o, f"{field}.outputs"))
            for i, o in paired(inputs, outputs, field)]


def first_solution(value: Any) -> str | None:
    """A reference solution: the text itself, or the first non-blank text of a list."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, list):
        return next((s for s in value if isinstance(s, str) and s.strip()), None)
    return None


def extra_meta(row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The row's non-null `keys` for `Problem.meta`, its own `source` renamed `origin`."""
    return {("origin" if k == "source" else k): row[k] for k in keys if row.get(k) is not None}


_TIME = re.compile(r"^\s*([\d.]+)\s*(ms|milliseconds?|s|sec|seconds?)?\s*$", re.IGNORECASE)
_MEMORY = re.compile(
    r"^\s*([\d.]+)\s*(b|bytes?|kb|kilobytes?|mb|megabytes?|mib|gb|gigabytes?|gib)?\s*$",
    re.IGNORECASE,
)
_MB_PER_UNIT = {"b": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024}


def time_limit_s(value: Any) -> float | None:
    """Seconds from 2, 2.5, "2 seconds", "1000 ms" or CodeContests' {seconds, nanos}."""
    if isinstance(value, dict):
        seconds = float(value.get("seconds") or 0) + float(value.get("nanos") or 0) / 1e9
        return seconds or None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    match = _TIME.match(str(value))
    if not match:
        return None
    amount = float(match.group(1))
    unit = (match.group(2) or "s").lower()
    seconds = amount / 1000 if unit.startswith("m") else amount
    return seconds or None


def memory_limit_mb(value: Any, unit_if_bare: str = "m") -> int | None:
    """Megabytes from 256, "256 MB", "256 megabytes"; bare numbers are in `unit_if_bare`."""
    if isinstance(value, bool) or value is None:
        return None
    match = _MEMORY.match(str(value))
    if not match:
        return None
    unit = (match.group(2) or unit_if_bare).lower()[0]
    mb = float(match.group(1)) * _MB_PER_UNIT[unit]
    return round(mb) or None


_TIME_IN_TEXT = re.compile(r"Time Limit:\s*([\d.]+\s*\w+)", re.IGNORECASE)
_MEMORY_IN_TEXT = re.compile(r"Memory Limit:\s*([\d.]+\s*\w+)", re.IGNORECASE)


def limits_in_text(statement: str) -> tuple[float | None, int | None]:
    """Time and memory limits stated in a problem text ("Time Limit: 2000 ms")."""
    time_match, memory_match = _TIME_IN_TEXT.search(statement), _MEMORY_IN_TEXT.search(statement)
    return (
        time_limit_s(time_match.group(1)) if time_match else None,
        memory_limit_mb(memory_match.group(1)) if memory_match else None,
    )


def row_id(row: dict[str, Any], fields: tuple[str, ...], fmt: str, index: int) -> str:
    """The row's own id where it has one, else `<format>-<index>`."""
    for field in fields:
        value = row.get(field)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return f"{fmt}-{index}"
