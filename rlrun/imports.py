"""Plug-ins named in config as `module:attr` (or `path/to/file.py:attr`): import and look up."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any


def import_object(spec: str, where: str, what: str, example: str,
                  error: type[Exception]) -> Any:
    """The `what` that `spec` names; `error` (one line naming `where`, the config key) when it
    is not `module:attr` (`example` shows the form), the module cannot be imported, or it has no
    such attribute."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise error(f"{where}: {spec!r} is not {example}")
    try:
        if module_name.endswith(".py"):
            module = _import_file(module_name)
        else:
            module = importlib.import_module(module_name)
    except Exception as err:
        raise error(
            f"{where}: cannot import {module_name!r} for {what} {spec!r} "
            f"({type(err).__name__}: {err}); install it or put its directory on PYTHONPATH"
        ) from err
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise error(f"{where}: module {module_name!r} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


def _import_file(path: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no such file {path}")
    name = f"rlrun_plugin_{file.stem}"
    module_spec = importlib.util.spec_from_file_location(name, file)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module
