"""Renders `conf/base.yaml` from the config schema: every knob, its default and its comment.

The dataclasses in `rlrun.config` are the single source of defaults and docs; this keeps the
YAML a user reads in step with them (`python -m rlrun.config_yaml > conf/base.yaml`, checked by
a test).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import re
import sys
import tokenize
from typing import Any

from omegaconf import OmegaConf

from rlrun import config as schema

_FIELD = re.compile(r"^\s+(\w+):")
_PLAIN = re.compile(r"^[A-Za-z0-9_./${}][A-Za-z0-9_./${} ,'()<>|*-]*$")

HEADER = """\
# Every rlrun knob with its default. Recipes override only what they change:
#   rlrun train conf/gsm8k_grpo.yaml rollout.num_actors=4 algo.group_size=16
#   rlrun config show conf/demo.yaml   # the resolved config
"""


def _comments(cls: type) -> dict[str, str]:
    source = inspect.getsource(cls)
    lines = source.splitlines()
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            m = _FIELD.match(lines[tok.start[0] - 1])
            if m:
                out[m.group(1)] = tok.string.lstrip("#").strip()
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        plain = _PLAIN.match(value) and value.strip() == value and value not in ("null", "true")
        return value if plain else json.dumps(value)
    if isinstance(value, list):
        return json.dumps(value)
    return OmegaConf.to_yaml({"v": value}).strip()[len("v:") :].strip()


def _render(obj: Any, indent: int, lines: list[str]) -> None:
    comments = _comments(type(obj))
    pad = "  " * indent
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        comment = comments.get(f.name, "")
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}{f.name}:" + (f"  # {comment}" if comment else ""))
            _render(value, indent + 1, lines)
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            lines.append(f"{pad}{f.name}:" + (f"  # {comment}" if comment else ""))
            for item in value:
                sub: list[str] = []
                _render(item, indent + 2, sub)
                first = sub[0].lstrip()
                lines.append(f"{pad}  - {first}")
                lines.extend(sub[1:])
        else:
            rendered = _scalar(value)
            lines.append(f"{pad}{f.name}: {rendered}" + (f"  # {comment}" if comment else ""))


def render_base_yaml() -> str:
    """The text of conf/base.yaml for the current schema."""
    lines: list[str] = [HEADER]
    root = schema.Config()
    for f in dataclasses.fields(root):
        lines.append(f"{f.name}:")
        _render(getattr(root, f.name), 1, lines)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_base_yaml())
