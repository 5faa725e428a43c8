"""The vLLM stand-in (tests/stand_ins/vllm): its API against real vLLM 0.33.0 and 0.34.0, and
its behaviour.

The drift tests run once per release in vllm_source.VERSIONS: 0.33.0, the release rlrun's
`vllm` extra pins (0.34.0 cannot be installed from PyPI), and 0.34.0, the release the stand-in
mirrors. Each parses the real source out of that release's wheel (tests/engines/
vllm_source.py; never imported) and checks every public function, method, dataclass field and
constant the stand-in defines against the same name at the same module path: parameter names,
positional order, keyword-only-ness and defaults (compared as source text). The stand-in may
omit parameters only behind `**kwargs`, and then only where the real function has `**kwargs`
too; for `LLM`, every keyword it consumes must be a real `EngineArgs` field with the same
default. Where 0.33.0 declares something differently from 0.34.0, VERSION_SPECIFIC lists it,
with why rlrun does not depend on it; anything else that differs fails. A release's tests are
skipped, with the reason, when its wheel can be neither found nor downloaded.

The behaviour tests import the stand-in through the `vllm` fixture, which puts tests/stand_ins
first on sys.path for this module only and removes the stand-in from sys.modules afterwards.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from tests.engines.vllm_source import VERSIONS, VllmSourceUnavailable, WheelSource, vllm_source

STAND_INS = Path(__file__).resolve().parents[1] / "stand_ins"
TIMEOUT_ENV = "RLRUN_VLLM_STAND_IN_TIMEOUT_S"
# Names rlrun's old weight-sync examples used; vLLM 0.33 and 0.34 no longer have them.
REMOVED_NAMES = ("NCCLTrainerSendWeightsArgs", "trainer_send_weights")


# --- source trees ------------------------------------------------------------------------------


class Tree:
    """One vllm package's source, parsed on demand: the real one (in the wheel) or the stand-in."""

    def __init__(self, locate: Callable[[str], str | None], read: Callable[[str], str]) -> None:
        self._locate = locate
        self._read = read
        self._parsed: dict[str, tuple[str, ast.Module] | None] = {}

    def parse(self, module: str) -> tuple[str, ast.Module] | None:
        if module not in self._parsed:
            path = self._locate(module)
            self._parsed[module] = None if path is None else (path, ast.parse(self._read(path)))
        return self._parsed[module]


def real_tree(source: WheelSource) -> Tree:
    return Tree(source.module_path, source.read)


def stand_in_tree() -> Tree:
    def locate(module: str) -> str | None:
        base = STAND_INS / Path(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return str(path.relative_to(STAND_INS.parents[1]))
        return None

    return Tree(locate, lambda path: (STAND_INS.parents[1] / path).read_text())


@dataclass(frozen=True)
class Defn:
    """A name's definition: the module and file that define it, and its AST node."""

    module: str
    path: str
    node: ast.AST

    @property
    def where(self) -> str:
        return f"{self.path}:{getattr(self.node, 'lineno', 1)}"


@dataclass(frozen=True)
class ImportRef:
    module: str
    name: str


def _package(module: str, path: str) -> str:
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]


def _top_level(tree: Tree, module: str) -> dict[str, ast.AST | ImportRef]:
    """Runtime top-level names of a module: definitions, assignments and `from` imports
    (`if TYPE_CHECKING:` blocks excluded, `try:` bodies included)."""
    parsed = tree.parse(module)
    if parsed is None:
        return {}
    path, mod = parsed
    names: dict[str, ast.AST | ImportRef] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names[stmt.target.id] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    package = _package(module, path)
                    for _ in range(stmt.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for alias in stmt.names:
                    names[alias.asname or alias.name] = ImportRef(base, alias.name)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body)
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" not in ast.unparse(stmt.test):
                visit(stmt.body)
                visit(stmt.orelse)

    visit(mod.body)
    return names


def _lazy_exports(tree: Tree, module: str) -> dict[str, ImportRef]:
    """vllm/__init__.py exports its public API lazily through MODULE_ATTRS."""
    node = _top_level(tree, module).get("MODULE_ATTRS")
    if not isinstance(node, ast.Assign):
        return {}
    exports = {}
    for name, target in ast.literal_eval(node.value).items():
        target_module, _, attr = target.partition(":")
        exports[name] = ImportRef(f"{module}{target_module}", attr)
    return exports


def resolve(tree: Tree, module: str, name: str, depth: int = 0) -> Defn | ImportRef | None:
    """Where `module.name` is defined in `tree`: a Defn, an ImportRef to a module outside
    vllm, or None if the name does not exist there."""
    if depth > 20:
        return None
    entry = _top_level(tree, module).get(name) or _lazy_exports(tree, module).get(name)
    if entry is None:
        return None
    if isinstance(entry, ImportRef):
        if entry.module.split(".")[0] != "vllm":
            return entry
        found = resolve(tree, entry.module, entry.name, depth + 1)
        if found is None and tree.parse(f"{entry.module}.{entry.name}") is not None:
            return ImportRef(f"{entry.module}.{entry.name}", "")  # a submodule
        return found
    parsed = tree.parse(module)
    assert parsed is not None
    return Defn(module, parsed[0], entry)


def class_chain(tree: Tree, defn: Defn) -> list[Defn]:
    """The class and the bases it inherits from inside vllm, in method-resolution order
    (depth first, left to right; good enough for vLLM's single-inheritance mixins)."""
    chain: list[Defn] = []

    def walk(current: Defn) -> None:
        if current in chain:
            return
        chain.append(current)
        assert isinstance(current.node, ast.ClassDef)
        for base in current.node.bases:
            if isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                found = resolve(tree, current.module, base.id)
                if isinstance(found, Defn) and isinstance(found.node, ast.ClassDef):
                    walk(found)

    walk(defn)
    return chain


# --- where the releases differ -------------------------------------------------------------


@dataclass(frozen=True)
class VersionSpecific:
    """How one release declares a stand-in item differently from vLLM 0.34.0 (which the
    stand-in mirrors), and `why` rlrun is unaffected. Every other part of the item is still
    compared, and an entry that no longer matches the release's source is itself a failure."""

    why: str
    lacks: tuple[str, ...] = ()  # parameters or fields the release does not have
    defaults: tuple[tuple[str, str], ...] = ()  # (parameter, the release's default)
    absent: bool = False  # the release has no such method
    # The release's method is `(self, *args, **kwargs)` handing everything to
    # `self.model_runner.<same name>`; the stand-in is compared with each of these
    # ("module:Class") methods instead.
    forwards_to: tuple[str, ...] = ()


# Every difference between vLLM 0.33.0 and 0.34.0 in what the stand-in declares (real
# file:line in 0.33.0 / 0.34.0). None is in what rlrun uses (rlrun/engines/vllm.py,
# rlrun/weights/collective.py, actors/rollout.py, actors/weight_sync.py); were one of them, it
# would not be listed here and the 0.33.0 drift test would fail.
VERSION_SPECIFIC: dict[str, dict[str, VersionSpecific]] = {
    "0.33.0": {
        # vllm/entrypoints/llm.py:196 `= 0.92` / :205 `= None` (0.34 resolves None itself).
        "vllm.entrypoints.llm.LLM.__init__": VersionSpecific(
            "rlrun always passes gpu_memory_utilization (rollout.gpu_memory_utilization), so "
            "it does not depend on the default",
            defaults=(("gpu_memory_utilization", "0.92"),),
        ),
        # vllm/entrypoints/llm.py:839 `sleep(self, level, mode)` / :849 adds reset_connector.
        "vllm.entrypoints.llm.LLM.sleep": VersionSpecific(
            "rlrun calls sleep(level=...) only", lacks=("reset_connector",),
        ),
        # vllm/distributed/weight_transfer/nccl_common.py:76-107 / :109 and :114 (new fields).
        "vllm.distributed.weight_transfer.nccl_common.NCCLWeightTransferInitInfo":
            VersionSpecific(
                "rlrun's init_info sets master_address, master_port, rank_offset, world_size, "
                "packed and packed_buffer_size_bytes only",
                lacks=("use_load_plan", "metadata"),
            ),
        # vllm/distributed/weight_transfer/nccl_engine.py:85-100 / :113 `src: int = 0`.
        "vllm.distributed.weight_transfer.nccl_engine.NCCLWeightTransferUpdateInfo":
            VersionSpecific(
                "rlrun's update_info sets names, dtype_names and shapes only, and rlrun "
                "broadcasts from rank 0, the source 0.33 always receives from "
                "(nccl_engine.py:223 and :413 `src=0`)",
                lacks=("src",),
            ),
        # Not in 0.33's vllm/v1/worker/gpu_worker.py / :1652.
        "vllm.v1.worker.gpu_worker.Worker.has_incomplete_weight_update": VersionSpecific(
            "rlrun never calls it (only the stand-in's own behaviour tests do)", absent=True,
        ),
        # vllm/v1/worker/gpu_worker.py:636 `reload_weights(self, *args, **kwargs)` forwards to
        # the model runner (gpu_model_runner.py:5226, or gpu/model_runner.py:586 with the V2
        # runner) / gpu_worker.py:645 declares the same parameters itself. rlrun DOES call it
        # (collective_rpc("reload_weights", kwargs=...)), so this is not waived: the stand-in
        # must match both runners' signatures.
        "vllm.v1.worker.gpu_worker.Worker.reload_weights": VersionSpecific(
            "the parameters are declared on the model runners Worker forwards to",
            forwards_to=("vllm.v1.worker.gpu_model_runner:GPUModelRunner",
                         "vllm.v1.worker.gpu.model_runner:GPUModelRunner"),
        ),
    },
}


def _apply_specific(mine: list[Any], theirs: list[Any], spec: VersionSpecific | None,
                    at: str) -> tuple[list[Any], list[str]]:
    """The stand-in's parameters or fields (`mine`) as `spec`'s release declares them, and
    the problems with `spec` itself (an entry the source no longer bears out)."""
    if spec is None:
        return mine, []
    problems = []
    own, real = {m.name: m for m in mine}, {t.name for t in theirs}
    for name in spec.lacks:
        if name not in own:
            problems.append(f"{at}: VERSION_SPECIFIC lists {name!r}, which the stand-in lacks")
        if name in real:
            problems.append(f"{at}: VERSION_SPECIFIC says vLLM lacks {name!r}, but it has it")
    defaults = dict(spec.defaults)
    for name, default in defaults.items():
        if name not in own or _same_default(own[name].default, default):
            problems.append(f"{at}: VERSION_SPECIFIC gives {name!r} the default {default}, "
                            f"which is not how the stand-in differs")
    adjusted = [dataclasses.replace(m, default=defaults.get(m.name, m.default))
                for m in mine if m.name not in spec.lacks]
    return adjusted, problems


def compare_forwarding(tree: Tree, stand: Defn, real: Defn, spec: VersionSpecific,
                       what: str) -> list[str]:
    """`real` must hand `*args, **kwargs` to `self.model_runner`; the stand-in is compared
    with the method of every class in `spec.forwards_to`."""
    assert isinstance(real.node, ast.FunctionDef)
    name = real.node.name
    call = f"self.model_runner.{name}(*args, **kwargs)"
    shape = [(p.name, p.kind) for p in signature(real.node)]
    if shape != [("self", "positional"), ("args", "*args"), ("kwargs", "**kwargs")] or not any(
        isinstance(n, ast.Call) and ast.unparse(n) == call for n in ast.walk(real.node)
    ):
        return [f"{what} ({real.where}): VERSION_SPECIFIC says it forwards to the model runner, "
                f"but it is not `def {name}(self, *args, **kwargs)` calling {call}"]
    problems = []
    for target in spec.forwards_to:
        module, cls_name = target.split(":")
        cls = resolve(tree, module, cls_name)
        if not (isinstance(cls, Defn) and isinstance(cls.node, ast.ClassDef)):
            problems.append(f"{what}: forwarding target {target} does not exist")
            continue
        methods: dict[str, Defn] = {}
        for base in reversed(class_chain(tree, cls)):
            methods.update(_methods(base))
        if name not in methods:
            problems.append(f"{what}: forwarding target {target} ({cls.where}) has no {name}")
            continue
        problems += compare_function(stand, methods[name], f"{what} -> {module}.{cls_name}")
    return problems


# --- signatures --------------------------------------------------------------------------------

REQUIRED = "<required>"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # positional | keyword-only | *args | **kwargs
    default: str


def _same_default(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        # Constant expressions written differently (1024 * 1024 * 1024 vs 1073741824).
        return _const(a) == _const(b)
    except (ValueError, SyntaxError, TypeError):
        return False


def _const(text: str) -> Any:
    node = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
               ast.Tuple, ast.List, ast.Load)
    if not all(isinstance(n, allowed) for n in ast.walk(node)):
        raise ValueError(text)
    return eval(compile(node, "<default>", "eval"), {"__builtins__": {}})


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Param]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [REQUIRED] * (len(positional) - len(a.defaults)) + [
        ast.unparse(d) for d in a.defaults
    ]
    params = [Param(p.arg, "positional", d) for p, d in zip(positional, defaults, strict=True)]
    if a.vararg:
        params.append(Param(a.vararg.arg, "*args", REQUIRED))
    params += [
        Param(p.arg, "keyword-only", REQUIRED if d is None else ast.unparse(d))
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
    ]
    if a.kwarg:
        params.append(Param(a.kwarg.arg, "**kwargs", REQUIRED))
    return params


def _decorators(node: ast.AST) -> set[str]:
    """The decorators that change how a method is called."""
    names = {ast.unparse(d).split("(")[0] for d in getattr(node, "decorator_list", [])}
    return names & {"staticmethod", "classmethod", "property"}


def compare_function(stand: Defn, real: Defn, what: str,
                     spec: VersionSpecific | None = None) -> list[str]:
    """Problems with the stand-in function `stand` as a mirror of `real` (as `spec` adjusts)."""
    assert isinstance(stand.node, ast.FunctionDef | ast.AsyncFunctionDef)
    if not isinstance(real.node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [f"{what}: {real.where} is not a function ({stand.where})"]
    at = f"{what} (real {real.where}, stand-in {stand.where})"
    problems = []
    if type(stand.node) is not type(real.node):
        problems.append(f"{at}: async-ness differs")
    if _decorators(stand.node) != _decorators(real.node):
        problems.append(f"{at}: decorators {_decorators(stand.node)} != {_decorators(real.node)}")
    mine, theirs = signature(stand.node), signature(real.node)
    mine, spec_problems = _apply_specific(mine, theirs, spec, at)
    problems += spec_problems
    pos_mine = [p for p in mine if p.kind == "positional"]
    pos_theirs = [p for p in theirs if p.kind == "positional"]
    if [p.name for p in pos_mine] != [p.name for p in pos_theirs]:
        problems.append(f"{at}: positional parameters {[p.name for p in pos_mine]} != "
                        f"{[p.name for p in pos_theirs]}")
    by_name = {p.name: p for p in theirs}
    kinds_mine = {p.kind for p in mine}
    kinds_theirs = {p.kind for p in theirs}
    for star in ("*args", "**kwargs"):
        if (star in kinds_mine) != (star in kinds_theirs):
            problems.append(f"{at}: {star} in stand-in: {star in kinds_mine}, "
                            f"real: {star in kinds_theirs}")
    for p in mine:
        if p.kind in ("*args", "**kwargs"):
            continue
        real_p = by_name.get(p.name)
        if real_p is None:
            problems.append(f"{at}: parameter {p.name!r} does not exist in vLLM")
        elif real_p.kind != p.kind:
            problems.append(f"{at}: {p.name!r} is {p.kind} in the stand-in, {real_p.kind} in vLLM")
        elif not _same_default(p.default, real_p.default):
            problems.append(f"{at}: {p.name!r} default {p.default} != vLLM's {real_p.default}")
    if "**kwargs" not in kinds_mine:
        missing = [p.name for p in theirs if p.kind == "keyword-only"
                   and p.name not in {q.name for q in mine}]
        if missing:
            problems.append(f"{at}: keyword-only parameters missing (and no **kwargs): {missing}")
    return problems


# --- dataclass fields --------------------------------------------------------------------------


def _is_dataclass_like(node: ast.ClassDef) -> tuple[bool, bool]:
    """(is a dataclass/config/msgspec struct, its fields are keyword-only)."""
    for deco in node.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(func).split(".")[-1] in ("dataclass", "config"):
            kw_only = isinstance(deco, ast.Call) and any(
                k.arg == "kw_only" and ast.unparse(k.value) == "True" for k in deco.keywords
            )
            return True, kw_only
    if any(ast.unparse(b).endswith("Struct") for b in node.bases):
        kw_only = any(k.arg == "kw_only" and ast.unparse(k.value) == "True"
                      for k in node.keywords)
        return True, kw_only
    return False, False


def _field_default(value: ast.expr | None) -> tuple[str, bool]:
    """(default text, declared keyword-only) of a field's right-hand side."""
    if value is None:
        return REQUIRED, False
    if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in ("field",
                                                                                  "Field"):
        kw = {k.arg: k.value for k in value.keywords}
        kw_only = "kw_only" in kw and ast.unparse(kw["kw_only"]) == "True"
        if "default" in kw:
            return ast.unparse(kw["default"]), kw_only
        if "default_factory" in kw:
            return f"factory:{ast.unparse(kw['default_factory'])}", kw_only
        return REQUIRED, kw_only
    return ast.unparse(value), False


@dataclass(frozen=True)
class Field:
    name: str
    keyword_only: bool
    default: str
    where: str


def dataclass_fields(tree: Tree, defn: Defn) -> list[Field] | None:
    """The public fields of a dataclass-like class, bases first (None: not dataclass-like)."""
    chain = class_chain(tree, defn)
    if not _is_dataclass_like(defn.node)[0]:
        return None
    fields: dict[str, Field] = {}
    for cls in reversed(chain):
        node = cls.node
        assert isinstance(node, ast.ClassDef)
        is_dc, kw_only = _is_dataclass_like(node)
        if not is_dc:
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            if name.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                continue
            default, field_kw_only = _field_default(stmt.value)
            fields[name] = Field(name, kw_only or field_kw_only, default,
                                 f"{cls.path}:{stmt.lineno}")
    return list(fields.values())


def compare_fields(tree_s: Tree, stand: Defn, tree_r: Tree, real: Defn, what: str,
                   spec: VersionSpecific | None = None) -> list[str]:
    mine, theirs = dataclass_fields(tree_s, stand), dataclass_fields(tree_r, real)
    at = f"{what} (real {real.where}, stand-in {stand.where})"
    if theirs is None:
        return [f"{at}: the stand-in is a dataclass, vLLM's class is not"]
    assert mine is not None
    mine, problems = _apply_specific(mine, theirs, spec, at)
    if [f.name for f in mine] != [f.name for f in theirs]:
        problems.append(f"{at}: fields {[f.name for f in mine]} != vLLM's "
                        f"{[f.name for f in theirs]}")
    real_by_name = {f.name: f for f in theirs}
    for f in mine:
        r = real_by_name.get(f.name)
        if r is None:
            continue
        if f.keyword_only != r.keyword_only:
            problems.append(f"{what}.{f.name} ({r.where}): keyword-only {f.keyword_only} in the "
                            f"stand-in, {r.keyword_only} in vLLM")
        if not _same_default(f.default, r.default):
            problems.append(f"{what}.{f.name} ({r.where}): default {f.default} != {r.default}")
    return problems


# --- the walk ----------------------------------------------------------------------------------


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    # This release's VERSION_SPECIFIC entries, and those the walk reached.
    specific: dict[str, VersionSpecific] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)

    def spec(self, qualname: str) -> VersionSpecific | None:
        if qualname in self.specific:
            self.applied.add(qualname)
        return self.specific.get(qualname)


def _stand_in_modules() -> list[str]:
    modules = []
    for path in sorted((STAND_INS / "vllm").rglob("*.py")):
        parts = path.relative_to(STAND_INS).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue  # the stand-in's own internals (vllm/_stand_in.py)
        modules.append(".".join(parts))
    return modules


def _class_assignments(node: ast.ClassDef) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out[stmt.target.id] = stmt
    return out


def _value_text(stmt: ast.stmt) -> str | None:
    value = getattr(stmt, "value", None)
    return None if value is None else ast.unparse(value)


def _classdef(defn: Defn) -> ast.ClassDef:
    assert isinstance(defn.node, ast.ClassDef), defn.where
    return defn.node


def _methods(defn: Defn) -> dict[str, Defn]:
    return {
        stmt.name: Defn(defn.module, defn.path, stmt)
        for stmt in _classdef(defn).body
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def check_class(tree_s: Tree, stand: Defn, tree_r: Tree, real: Defn, qualname: str,
                report: Report) -> None:
    """Fields (dataclass-like), public methods and `__init__`, class constants and vllm bases
    of a stand-in class against the real class and its bases."""
    if not isinstance(real.node, ast.ClassDef):
        report.problems.append(f"{qualname}: {real.where} is not a class")
        return
    real_chain = class_chain(tree_r, real)
    stand_is_dc = _is_dataclass_like(_classdef(stand))[0]
    if stand_is_dc:
        report.problems += compare_fields(tree_s, stand, tree_r, real, qualname,
                                          report.spec(qualname))
        report.checked.append(f"{qualname} fields")
    real_bases = {_classdef(c).name for c in real_chain}
    for base in class_chain(tree_s, stand)[1:]:
        name = _classdef(base).name
        if not base.module.split(".")[-1].startswith("_") and name not in real_bases:
            report.problems.append(f"{qualname}: base {name} is not among vLLM's bases of "
                                   f"{real.where}")
    real_methods: dict[str, Defn] = {}
    for cls in reversed(real_chain):
        real_methods.update(_methods(cls))
    for name, method in _methods(stand).items():
        if name.startswith("_") and name != "__init__":
            continue
        what = f"{qualname}.{name}"
        spec = report.spec(what)
        if spec is not None and spec.absent:
            if name in real_methods:
                report.problems.append(f"{what}: VERSION_SPECIFIC says vLLM lacks it, but "
                                       f"{real_methods[name].where} has it")
            continue
        if name not in real_methods:
            report.problems.append(f"{what} ({method.where}) does not exist in vLLM's "
                                   f"{qualname} ({real.where}) or its bases")
            continue
        if spec is not None and spec.forwards_to:
            report.problems += compare_forwarding(tree_r, method, real_methods[name], spec, what)
        else:
            report.problems += compare_function(method, real_methods[name], what, spec)
        report.checked.append(what)
    if stand_is_dc:
        return
    real_assigns: dict[str, tuple[Defn, ast.stmt]] = {}
    for cls in reversed(real_chain):
        real_assigns.update({k: (cls, v) for k, v in _class_assignments(_classdef(cls)).items()})
    for name, stmt in _class_assignments(_classdef(stand)).items():
        if name.startswith("_"):
            continue
        what = f"{qualname}.{name}"
        if name not in real_assigns:
            report.problems.append(f"{what} ({stand.path}:{stmt.lineno}) does not exist in vLLM")
            continue
        owner, real_stmt = real_assigns[name]
        mine, theirs = _value_text(stmt), _value_text(real_stmt)
        if mine is not None and theirs is not None and not _same_default(mine, theirs):
            report.problems.append(f"{what} ({owner.path}:{real_stmt.lineno}): {mine} != {theirs}")
        report.checked.append(what)


def _check_reexport(tree_s: Tree, tree_r: Tree, module: str, name: str, report: Report) -> None:
    """A name the stand-in re-exports must come, in vLLM too, from the same defining module."""
    stand = resolve(tree_s, module, name)
    real = resolve(tree_r, module, name)
    assert isinstance(stand, Defn)
    if not isinstance(real, Defn) or real.module != stand.module:
        report.problems.append(f"{module}.{name}: the stand-in re-exports {stand.module}.{name}; "
                               f"vLLM's {module} gives {real}")
    report.checked.append(f"{module}.{name} (re-export)")


def check_stand_in(tree_s: Tree, tree_r: Tree, version: str) -> Report:
    """Walk every public name the stand-in defines or re-exports and compare it with vLLM
    `version`'s, as VERSION_SPECIFIC adjusts it for that release."""
    report = Report(specific=VERSION_SPECIFIC.get(version, {}))
    for module in _stand_in_modules():
        parsed_real = tree_r.parse(module)
        if parsed_real is None:
            report.problems.append(f"module {module} does not exist in vLLM {version}")
            continue
        top = _top_level(tree_s, module)
        all_node = top.get("__all__")
        exported = set(ast.literal_eval(all_node.value)) if isinstance(all_node, ast.Assign) \
            else set()
        for name, entry in top.items():
            if name.startswith("_"):
                continue
            if isinstance(entry, ImportRef):
                # Only names in __all__ are re-exports; other imports are for the module's use.
                if name in exported and entry.module.split(".")[0] == "vllm":
                    _check_reexport(tree_s, tree_r, module, name, report)
                continue
            qualname = f"{module}.{name}"
            stand = resolve(tree_s, module, name)
            real = resolve(tree_r, module, name)
            assert isinstance(stand, Defn)
            if real is None:
                report.problems.append(f"{qualname} ({stand.where}) does not exist in vLLM's "
                                       f"{parsed_real[0]}")
            elif not isinstance(real, Defn):
                report.problems.append(f"{qualname}: vLLM imports it from {real.module}")
            elif isinstance(entry, ast.ClassDef):
                check_class(tree_s, stand, tree_r, real, qualname, report)
            elif isinstance(entry, ast.FunctionDef | ast.AsyncFunctionDef):
                report.problems += compare_function(stand, real, qualname,
                                                    report.spec(qualname))
                report.checked.append(qualname)
            else:
                assert isinstance(entry, ast.stmt)
                mine, theirs = _value_text(entry), None
                if isinstance(real.node, ast.stmt):
                    theirs = _value_text(real.node)
                if mine is not None and (theirs is None or not _same_default(mine, theirs)):
                    report.problems.append(f"{qualname} ({real.where}): {mine} != {theirs}")
                report.checked.append(qualname)
    report.problems += [f"VERSION_SPECIFIC[{version!r}][{name!r}] names nothing the stand-in "
                        f"declares in that form" for name in report.specific
                        if name not in report.applied]
    return report


def _class_field_default(tree: Tree, module: str, cls_name: str, attr: str) -> Any:
    """The default of `cls_name.attr` (a config dataclass field), as a Python value."""
    cls = resolve(tree, module, cls_name)
    assert isinstance(cls, Defn) and isinstance(cls.node, ast.ClassDef), (module, cls_name)
    fields = {f.name: f for f in dataclass_fields(tree, cls) or []}
    text = fields[attr].default
    if text == REQUIRED or text.startswith("factory:"):
        raise ValueError(f"{cls_name}.{attr} has no literal default ({text})")
    return ast.literal_eval(text)


def engine_args_defaults(tree: Tree) -> dict[str, tuple[Any, str]]:
    """Every `EngineArgs` field (engine/arg_utils.py) with its default, following
    `ModelConfig.x` and `get_field(VllmConfig, "x")` to the config classes."""
    module = "vllm.engine.arg_utils"
    cls = resolve(tree, module, "EngineArgs")
    assert isinstance(cls, Defn) and isinstance(cls.node, ast.ClassDef)
    out: dict[str, tuple[Any, str]] = {}
    for stmt in cls.node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        where = f"{cls.path}:{stmt.lineno}"
        value = stmt.value
        try:
            if value is None:
                default: Any = REQUIRED
            elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
                default = _class_field_default(tree, module, value.value.id, value.attr)
            elif isinstance(value, ast.Call) and ast.unparse(value.func) == "get_field":
                cls_arg, name_arg = value.args
                default = _class_field_default(tree, module, ast.unparse(cls_arg),
                                               ast.literal_eval(name_arg))
            else:
                default = ast.literal_eval(value)
        except (ValueError, KeyError, AssertionError, TypeError):
            default = f"<unresolved: {ast.unparse(stmt)}>"
        out[stmt.target.id] = (default, where)
    return out


# --- drift tests -------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=VERSIONS)
def source(request: pytest.FixtureRequest) -> WheelSource:
    version = request.param
    try:
        return vllm_source(version)
    except VllmSourceUnavailable as err:
        pytest.skip(f"the vLLM {version} source is unavailable, so API drift against it cannot "
                    f"be checked: {err}")


@pytest.fixture(scope="module")
def real(source: WheelSource) -> Tree:
    return real_tree(source)


@pytest.fixture(scope="module")
def report(source: WheelSource, real: Tree) -> Report:
    return check_stand_in(stand_in_tree(), real, source.version)


def test_stand_in_signatures_match_vllm(report: Report) -> None:
    assert not report.problems, "\n".join(report.problems)


def test_the_stand_in_mirrors_0_34_and_only_0_33_differs() -> None:
    # The stand-in declares 0.34.0's API exactly; only older releases may need entries.
    assert set(VERSIONS) == {"0.33.0", "0.34.0"}
    assert set(VERSION_SPECIFIC) == {"0.33.0"}


def test_drift_check_covers_what_rlrun_calls(report: Report) -> None:
    # Guards the walk itself: if it silently stopped reaching these, the test above would
    # pass while checking nothing.
    expected = {
        "vllm.entrypoints.llm.LLM.__init__", "vllm.entrypoints.llm.LLM.generate",
        "vllm.entrypoints.llm.LLM.collective_rpc", "vllm.entrypoints.llm.LLM.sleep",
        "vllm.entrypoints.llm.LLM.wake_up", "vllm.entrypoints.llm.LLM.reset_prefix_cache",
        "vllm.entrypoints.llm.LLM.init_weight_transfer_engine",
        "vllm.entrypoints.llm.LLM.update_weights", "vllm.entrypoints.llm.LLM.finish_weight_update",
        "vllm.entrypoints.llm.LLM.start_weight_update",
        "vllm.entrypoints.llm.LLM.get_weight_version",
        "vllm.entrypoints.llm.LLM.shutdown_weight_transfer_engine",
        "vllm.sampling_params.SamplingParams fields", "vllm.outputs.CompletionOutput fields",
        "vllm.outputs.RequestOutput.__init__", "vllm.logprobs.Logprob fields",
        "vllm.config.weight_transfer.WeightTransferConfig fields",
        "vllm.config.WeightTransferConfig (re-export)", "vllm.LLM (re-export)",
        "vllm.distributed.weight_transfer.nccl_common.trainer_init",
        "vllm.distributed.weight_transfer.nccl_common.NCCLWeightTransferInitInfo fields",
        "vllm.distributed.weight_transfer.nccl_engine.NCCLWeightTransferUpdateInfo fields",
        "vllm.distributed.weight_transfer.base.WeightTransferInitRequest fields",
        "vllm.distributed.weight_transfer.base.WeightTransferUpdateRequest fields",
        "vllm.distributed.weight_transfer.packed_tensor.packed_nccl_broadcast_producer",
        "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.broadcast",
        "vllm.v1.worker.gpu_worker.Worker.reload_weights",
        "vllm.v1.executor.ray_utils.get_bundles_for_indices",
    }
    assert expected <= set(report.checked), sorted(expected - set(report.checked))
    assert len(report.checked) >= 90, len(report.checked)


def _llm_engine_kwargs() -> dict[str, Any]:
    """The stand-in's `_ENGINE_ARGS` (read from its source, so no import is needed)."""
    node = _top_level(stand_in_tree(), "vllm.entrypoints.llm")["_ENGINE_ARGS"]
    assert isinstance(node, ast.AnnAssign) and node.value is not None
    return ast.literal_eval(node.value)


def test_llm_kwargs_are_engine_args_fields_with_their_defaults(real: Tree) -> None:
    fields = engine_args_defaults(real)
    assert {"model", "tensor_parallel_size", "weight_transfer_config"} <= set(fields)
    for name, default in _llm_engine_kwargs().items():
        assert name in fields, f"LLM(**kwargs) takes {name!r}, which is no EngineArgs field"
        real_default, where = fields[name]
        assert default == real_default, f"EngineArgs.{name} ({where}): {real_default!r}"


def test_removed_names_are_absent(source: WheelSource) -> None:
    # rlrun's old weight-sync examples used these; vLLM 0.33 and 0.34 drive the transfer
    # through trainer_init + the LLM methods instead (entrypoints/rl/offline.py).
    pattern = re.compile(r"\b(" + "|".join(REMOVED_NAMES) + r")\b")
    hits = [f"{path}: {m.group(1)}" for path in source.py_files()
            if (m := pattern.search(source.read(path)))]
    assert not hits, hits


def test_rlruns_plugin_hook_and_the_cpu_options_exist_in_the_gpu_release(
    source: WheelSource, real: Tree
) -> None:
    """With rlrun installed, vLLM runs `rlrun.weights.register_vllm_backends` (a general plugin)
    on GPUs too: the factory call it makes must be there, and vLLM must load general plugins.
    The CPU options rlrun passes (rlrun.engines.vllm.cpu_options) are EngineArgs fields."""
    factory = ast.parse(source.read(source.module_path(
        "vllm.distributed.weight_transfer.factory")))
    cls = next(n for n in factory.body
               if isinstance(n, ast.ClassDef) and n.name == "WeightTransferEngineFactory")
    register = next(n for n in cls.body
                    if isinstance(n, ast.FunctionDef) and n.name == "register_engine")
    assert [a.arg for a in register.args.args] == ["cls", "name", "module_path_or_cls",
                                                   "class_name"]
    plugins = source.read(source.module_path("vllm.plugins"))
    assert 'DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"' in plugins
    fields = engine_args_defaults(real)
    assert {"kv_cache_memory_bytes", "enforce_eager", "enable_chunked_prefill"} <= set(fields)


# --- behaviour of the stand-in -----------------------------------------------------------------


def _drop_vllm_modules() -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def vllm() -> Iterator[ModuleType]:
    """The stand-in as `vllm`, for this module only (real vLLM, if installed, is shadowed)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(STAND_INS))
        mp.setenv(TIMEOUT_ENV, "20")
        _drop_vllm_modules()
        module = importlib.import_module("vllm")
        assert Path(str(module.__file__)).is_relative_to(STAND_INS)
        try:
            yield module
        finally:
            _drop_vllm_modules()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hf_model(path: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _next_token_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


PROMPT = [72, 101, 108, 108, 111]


def test_generate_returns_vllm_shaped_outputs(vllm: ModuleType, tiny_path: str) -> None:
    llm = vllm.LLM(tiny_path, dtype="float32", seed=1, logprobs_mode="processed_logprobs")
    params = vllm.SamplingParams(n=3, temperature=0.9, max_tokens=6, seed=11, logprobs=0)
    outputs = llm.generate([{"prompt_token_ids": PROMPT}, {"prompt_token_ids": PROMPT[:2]}],
                           params, use_tqdm=False)
    assert [o.prompt_token_ids for o in outputs] == [PROMPT, PROMPT[:2]]
    assert all(isinstance(o, vllm.RequestOutput) and o.finished for o in outputs)
    for completion in outputs[0].outputs:
        assert isinstance(completion, vllm.CompletionOutput)
        assert 1 <= len(completion.token_ids) <= 6
        assert completion.finish_reason in ("stop", "length")
        assert len(completion.logprobs) == len(completion.token_ids)
        for step, token in zip(completion.logprobs, completion.token_ids, strict=True):
            assert list(step) == [token]  # logprobs=0: the sampled token only
            assert step[token].logprob <= 0 and step[token].rank >= 1
        total = sum(s[t].logprob for s, t in zip(completion.logprobs, completion.token_ids,
                                                 strict=True))
        assert completion.cumulative_logprob == pytest.approx(total)
        assert completion.weight_versions == [
            vllm.outputs.WeightVersionSpan("default", 0, len(completion.token_ids))
        ]
    # The k-th of n samples is seeded seed + k, as vLLM's parallel sampling does.
    second = llm.generate({"prompt_token_ids": PROMPT},
                          vllm.SamplingParams(temperature=0.9, max_tokens=6, seed=12),
                          use_tqdm=False)
    assert second[0].outputs[0].token_ids == outputs[0].outputs[1].token_ids
    again = llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)
    assert [c.token_ids for c in again[0].outputs] == [c.token_ids for c in outputs[0].outputs]
    # No params: the model's generation config (here none), so vLLM's defaults.
    default = llm.generate({"prompt_token_ids": PROMPT})[0].outputs[0]
    assert len(default.token_ids) <= 16 and default.logprobs is None


def test_logprobs_modes_follow_vllm(vllm: ModuleType, tiny_path: str) -> None:
    model = _hf_model(tiny_path)
    logits = _next_token_logits(model, PROMPT)
    processed = vllm.LLM(tiny_path, dtype="float32", logprobs_mode="processed_logprobs")
    raw = vllm.LLM(tiny_path, dtype="float32")
    assert raw.model_config.logprobs_mode == "raw_logprobs"  # vLLM's default

    def first(llm: Any, temperature: float) -> tuple[int, float]:
        params = vllm.SamplingParams(temperature=temperature, max_tokens=1, seed=0, logprobs=0,
                                     ignore_eos=True)
        out = llm.generate({"prompt_token_ids": PROMPT}, params, use_tqdm=False)[0].outputs[0]
        return out.token_ids[0], out.logprobs[0][out.token_ids[0]].logprob

    token, logprob = first(processed, 0.0)
    assert token == int(logits.argmax())  # greedy, reported at temperature 1
    assert logprob == pytest.approx(float(torch.log_softmax(logits, -1)[token]), abs=1e-5)
    token, logprob = first(processed, 0.5)
    assert logprob == pytest.approx(float(torch.log_softmax(logits / 0.5, -1)[token]), abs=1e-5)
    token, logprob = first(raw, 0.5)
    assert logprob == pytest.approx(float(torch.log_softmax(logits, -1)[token]), abs=1e-5)


def test_stop_strings_eos_and_length(vllm: ModuleType, tiny_path: str) -> None:
    llm = vllm.LLM(tiny_path, dtype="float32")
    greedy = {"temperature": 0.0, "max_tokens": 24, "ignore_eos": True}
    full = llm.generate({"prompt_token_ids": PROMPT}, vllm.SamplingParams(**greedy),
                        use_tqdm=False)[0].outputs[0]
    assert full.finish_reason == "length" and len(full.token_ids) == 24
    stop = next(ch for ch in full.text[1:] if ch.isascii() and ch.isprintable())
    cut = full.text.index(stop)
    for include in (False, True):
        out = llm.generate(
            {"prompt_token_ids": PROMPT},
            vllm.SamplingParams(**greedy, stop=stop, include_stop_str_in_output=include),
            use_tqdm=False,
        )[0].outputs[0]
        assert (out.finish_reason, out.stop_reason) == ("stop", stop)
        assert out.text == full.text[: cut + len(stop) if include else cut]
        assert list(out.token_ids) == list(full.token_ids[: len(out.token_ids)])
    # A stop token id: kept in token_ids, cut from the text, reported as stop_reason.
    token = full.token_ids[3]
    out = llm.generate({"prompt_token_ids": PROMPT},
                       vllm.SamplingParams(**greedy, stop_token_ids=[token]),
                       use_tqdm=False)[0].outputs[0]
    first = list(full.token_ids).index(token)
    assert (out.finish_reason, out.stop_reason) == ("stop", token)
    assert list(out.token_ids) == list(full.token_ids[: first + 1])
    # EOS: raise its logit so greedy decoding emits it first; it stays in token_ids.
    eos = llm.get_tokenizer().eos_token_id
    model = _hf_model(tiny_path)
    seen: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    _next_token_logits(model, PROMPT)
    hook.remove()
    hidden = seen[0][0, -1]
    with torch.no_grad():  # the EOS row along the final hidden state: a logit of 50
        model.lm_head.weight[eos] = hidden * 50 / hidden.dot(hidden)
    llm.collective_rpc("reload_weights",
                       kwargs={"weights_iterator": list(model.state_dict().items())})
    out = llm.generate({"prompt_token_ids": PROMPT}, vllm.SamplingParams(temperature=0),
                       use_tqdm=False)[0].outputs[0]
    assert (out.token_ids, out.text, out.finish_reason, out.stop_reason) == ([eos], "", "stop",
                                                                             None)


def test_sampling_params_defaults_and_validation(vllm: ModuleType) -> None:
    from vllm.exceptions import VLLMValidationError

    params = vllm.SamplingParams()
    assert (params.n, params.temperature, params.max_tokens, params.stop, params.logprobs) == (
        1, 1.0, 16, [], None)
    assert vllm.SamplingParams(stop="x").stop == ["x"]
    greedy = vllm.SamplingParams(temperature=0, top_k=5, top_p=0.5)
    assert (greedy.top_k, greedy.top_p) == (0, 1.0)
    with pytest.raises(VLLMValidationError, match="temperature must be non-negative"):
        vllm.SamplingParams(temperature=-1)
    with pytest.raises(VLLMValidationError, match="max_tokens must be at least 1"):
        vllm.SamplingParams(max_tokens=0)
    with pytest.raises(NotImplementedError, match="presence_penalty"):
        vllm.SamplingParams(presence_penalty=0.5)
    with pytest.raises(TypeError):
        vllm.SamplingParams(max_new_tokens=3)


def test_llm_refuses_what_vllm_would(vllm: ModuleType, tiny_path: str) -> None:
    with pytest.raises(TypeError, match="'max_new_tokens'"):
        vllm.LLM(tiny_path, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"World size \(2\) is larger than the number of "
                                         r"available GPUs \(0\)"):
        vllm.LLM(tiny_path, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="Invalid weight transfer backend: gloo"):
        vllm.LLM(tiny_path, weight_transfer_config={"backend": "gloo"})
    llm = vllm.LLM(tiny_path, dtype="float32", max_logprobs=2)
    with pytest.raises(vllm.exceptions.VLLMValidationError, match="greater than max allowed: 2"):
        llm.generate({"prompt_token_ids": PROMPT}, vllm.SamplingParams(logprobs=3))
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        llm.sleep(level=1)


def test_weight_transfer_needs_a_config(vllm: ModuleType, tiny_path: str) -> None:
    llm = vllm.LLM(tiny_path, dtype="float32")
    calls = [
        lambda: llm.init_weight_transfer_engine({"init_info": {}}),
        llm.start_weight_update,
        lambda: llm.update_weights({"update_info": {}}),
        llm.finish_weight_update,
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="Weight transfer not configured"):
            call()


def test_weight_update_session_rules(vllm: ModuleType, tiny_path: str) -> None:
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

    llm = vllm.LLM(tiny_path, dtype="float32",
                   weight_transfer_config=vllm.config.WeightTransferConfig(backend="nccl"))
    with pytest.raises(RuntimeError, match="start_weight_update must be called before"):
        llm.update_weights({"update_info": {}})
    with pytest.raises(RuntimeError, match="without a matching start_weight_update"):
        llm.finish_weight_update()
    with pytest.raises(KeyError):
        llm.init_weight_transfer_engine({"master_address": "127.0.0.1"})  # not {"init_info": }
    with pytest.raises(ValueError, match="Invalid init_info for NCCLWeightTransferEngine"):
        llm.init_weight_transfer_engine({"init_info": {"rank_offset": 1, "world_size": 2,
                                                       "master_address": "127.0.0.1",
                                                       "master_port": 1, "bogus": 0}})
    with pytest.raises(ValueError, match="need nccl_unique_id_b64, or both master_address"):
        llm.init_weight_transfer_engine({"init_info": {"rank_offset": 1, "world_size": 2}})
    llm.start_weight_update()
    with pytest.raises(RuntimeError, match="already active. Call finish_weight_update first"):
        llm.start_weight_update()
    with pytest.raises(RuntimeError, match="during a weight update"):
        llm.generate({"prompt_token_ids": PROMPT})
    with pytest.raises(RuntimeError, match="NCCL weight transfer not initialized"):
        llm.update_weights(WeightTransferUpdateRequest(update_info={}))
    # A failed update ends the session but leaves the update incomplete, as in vLLM.
    assert llm.collective_rpc("has_incomplete_weight_update") == [True]
    with pytest.raises(RuntimeError, match="without a matching start_weight_update"):
        llm.finish_weight_update()
    llm.start_weight_update()
    llm.finish_weight_update(weight_version="v7")
    assert llm.collective_rpc("has_incomplete_weight_update") == [False]
    assert llm.get_weight_version() == "v7"
    llm.update_weight_version("v8")
    assert llm.get_weight_version() == "v8"

    ipc = vllm.LLM(tiny_path, dtype="float32", weight_transfer_config={"backend": "ipc"})
    with pytest.raises(RuntimeError, match="ipc weight transfer needs CUDA"):
        ipc.init_weight_transfer_engine({"init_info": {"packed": False}})


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as err:  # handed to the test's thread
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _chunks(sizes: list[int], budget: int) -> int:
    """How many packed chunks vLLM's greedy rule cuts `sizes` into."""
    count, total = 0, 0
    for size in sizes:
        total += size
        if total > budget:
            count, total = count + 1, 0
    return count + (total > 0)


@pytest.mark.parametrize("packed", [True, False])
def test_weight_transfer_round_trip(vllm: ModuleType, tiny_path: str, packed: bool) -> None:
    from vllm.distributed.weight_transfer.nccl_common import trainer_init
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

    budget = 40_000
    llm = vllm.LLM(tiny_path, dtype="float32", weight_transfer_config={"backend": "nccl"})
    port = _free_port()
    trainer, box = _in_thread(lambda: trainer_init(
        {"master_address": "127.0.0.1", "master_port": port, "world_size": 2}, rank=0))
    llm.init_weight_transfer_engine({"init_info": {
        "master_address": "127.0.0.1", "master_port": port, "rank_offset": 1, "world_size": 2,
        "packed": packed, "packed_buffer_size_bytes": budget}})
    trainer.join(30)
    comm = box["result"]
    sent = 0
    broadcast = comm.broadcast

    def counting(tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        nonlocal sent
        sent += 1
        broadcast(tensor, src, stream)

    comm.broadcast = counting
    source = _hf_model(tiny_path)
    # The embedding is tied to lm_head; vLLM skips lm_head.weight, so send the parameters.
    weights = list(source.named_parameters())
    info = {"names": [n for n, _ in weights],
            "dtype_names": [str(t.dtype).split(".")[-1] for _, t in weights],
            "shapes": [list(t.shape) for _, t in weights]}

    def send_round(update_info: dict[str, Any], scale: float) -> None:
        with torch.no_grad():
            for _, t in weights:
                t.mul_(scale)
        llm.start_weight_update()
        receiver, result = _in_thread(lambda: llm.update_weights({"update_info": update_info}))
        # The embedding alone exceeds the budget, which vLLM's packer warns about.
        with pytest.warns(UserWarning) if packed else contextlib.nullcontext():
            if packed:
                packed_nccl_broadcast_producer(iter(weights), comm, 0, lambda item: item[1],
                                               buffer_size_bytes=budget)
            else:
                for _, t in weights:
                    comm.broadcast(t.detach().contiguous(), src=0)
        receiver.join(30)
        assert "error" not in result, result
        llm.finish_weight_update(weight_version=f"x{scale}")

    send_round(info, 1.5)
    sizes = [t.numel() * t.element_size() for _, t in weights]
    assert sent == (_chunks(sizes, budget) if packed else len(weights))
    if packed:
        assert 1 < sent < len(weights)
    model = llm.apply_model(lambda m: m)[0]
    received = dict(model.named_parameters())
    assert all(torch.equal(received[n], t) for n, t in weights)
    # Empty name lists reuse the previous round's metadata (vLLM's rule).
    send_round({"names": [], "dtype_names": [], "shapes": []}, 0.5)
    assert all(torch.equal(received[n], t) for n, t in weights)
    out = llm.generate({"prompt_token_ids": PROMPT}, vllm.SamplingParams(max_tokens=2))
    assert out[0].outputs[0].weight_versions[0].version == "x0.5"
    llm.shutdown_weight_transfer_engine()
    comm.destroy()


def test_colliding_rank_offsets_fail_instead_of_hanging(
    vllm: ModuleType, tiny_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two TP=1 engines given the same rank_offset, as vLLM's RayVLLMWeightSyncClient does:
    # both claim group rank 1 and nobody claims rank 2. vLLM hangs; the stand-in errors.
    from vllm.distributed.weight_transfer.nccl_common import trainer_init

    monkeypatch.setenv(TIMEOUT_ENV, "3")
    engines = [vllm.LLM(tiny_path, dtype="float32", weight_transfer_config={"backend": "nccl"})
               for _ in range(2)]
    port = _free_port()
    init_info = {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1,
                 "world_size": 3}
    trainer = _in_thread(lambda: trainer_init(
        {"master_address": "127.0.0.1", "master_port": port, "world_size": 3}))
    joins = [_in_thread(lambda e=e: e.init_weight_transfer_engine({"init_info": init_info}))
             for e in engines]
    for thread, _ in [trainer, *joins]:
        thread.join(60)
    # Every party ended with an error, none is still waiting.
    assert not any(thread.is_alive() for thread, _ in [trainer, *joins])
    errors = [box.get("error") for _, box in [trainer, *joins]]
    assert all(errors), errors
    assert any("claimed twice" in str(e) for e in errors), errors


def test_sleep_and_wake_up(vllm: ModuleType, tiny_path: str, caplog: pytest.LogCaptureFixture,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    llm = vllm.LLM(tiny_path, dtype="float32", enable_sleep_mode=True,
                   weight_transfer_config={"backend": "nccl"})
    greedy = vllm.SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    def tokens() -> list[int]:
        return list(llm.generate({"prompt_token_ids": PROMPT}, greedy)[0].outputs[0].token_ids)

    before = tokens()
    llm.sleep(level=1)
    with pytest.raises(RuntimeError, match="sleeps"):
        tokens()
    assert llm.wake_up(tags=["weights"]) is False  # the KV cache still sleeps
    with caplog.at_level(logging.WARNING):
        assert llm.wake_up(tags=["weights"]) is False
    assert "Tag weights is not in sleeping tags" in caplog.text
    assert llm.wake_up(tags=["kv_cache"]) is True
    assert tokens() == before  # level 1 keeps the weights

    llm.sleep(level=2)
    llm.start_weight_update()
    with pytest.raises(RuntimeError, match="'weights' memory is asleep"):
        llm.update_weights({"update_info": {}})
    assert llm.wake_up() is True
    model = llm.apply_model(lambda m: m)[0]
    assert all(not p.any() for p in model.parameters())  # level 2 discarded them
    llm.collective_rpc("reload_weights",
                       kwargs={"weights_iterator": list(_hf_model(tiny_path).state_dict().items()),
                               "is_checkpoint_format": True})
    assert tokens() == before

    llm.sleep(level=0)
    with pytest.raises(RuntimeError, match="sleeps"):
        tokens()
    assert llm.wake_up(tags=["scheduling"]) is True
    with pytest.raises(ValueError, match="Invalid pause mode"):
        llm.sleep(mode="later")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # rlrun's engine sets this
    with pytest.raises(ValueError, match="'wait' mode can't be used in inproc-engine mode"):
        llm.sleep(mode="wait")


# --- tensor parallelism under Ray (logical GPUs) -----------------------------------------------


@pytest.fixture(scope="module")
def ray_gpus() -> Iterator[None]:
    """A local Ray with 2 CPUs and 4 logical GPUs, for placement groups with GPU bundles."""
    import ray

    ray.init(address="local", num_cpus=2, num_gpus=4, namespace="rlrun-test-vllm",
             include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _host_class() -> Any:
    """A Ray actor hosting stand-in `LLM`s, as rlrun's rollout actors host vLLM's (defined in a
    function so Ray ships it by value to workers that cannot import the tests package)."""

    class Host:
        def __init__(self, stand_ins: str, timeout_s: str) -> None:
            import os

            sys.path.insert(0, stand_ins)
            os.environ[TIMEOUT_ENV] = timeout_s
            torch.set_num_threads(1)
            self.engines: dict[str, Any] = {}

        def make(self, name: str, path: str, tp: int, bundle_indices: str | None) -> Any:
            import os

            import vllm

            os.environ.pop("VLLM_RAY_BUNDLE_INDICES", None)
            if bundle_indices is not None:
                os.environ["VLLM_RAY_BUNDLE_INDICES"] = bundle_indices
            try:
                llm = vllm.LLM(path, dtype="float32", tensor_parallel_size=tp,
                               distributed_executor_backend="ray",
                               weight_transfer_config={"backend": "nccl"})
            except (AssertionError, ValueError, RuntimeError) as err:
                return f"{type(err).__name__}: {err}"
            self.engines[name] = llm
            return llm.worker_bundle_indices

        def call(self, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
            return getattr(self.engines[name], method)(*args, **kwargs)

        def rpc_timeout(self, name: str) -> str:
            try:
                self.engines[name].collective_rpc(lambda w: time.sleep(3), timeout=0.5)
            except TimeoutError as err:
                return str(err)
            return "no timeout"

        def weights(self, name: str) -> dict[str, torch.Tensor]:
            model = self.engines[name].apply_model(lambda m: m)[0]
            return {n: p.detach().clone() for n, p in model.named_parameters()}

    return Host


def _host(pg: Any, bundle: int = 0) -> Any:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return ray.remote(_host_class()).options(
        num_cpus=1, num_gpus=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=bundle),
    ).remote(str(STAND_INS), "5")


@pytest.mark.slow
def test_tp_placement_and_weight_transfer_in_ray(vllm: ModuleType, ray_gpus: None,
                                                 tiny_path: str) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from vllm.distributed.weight_transfer.nccl_common import trainer_init

    pg = placement_group([{"GPU": 1, "CPU": 1}, {"GPU": 1}, {"GPU": 1}, {"GPU": 1}])
    ray.get(pg.ready(), timeout=60)
    host = _host(pg)
    try:
        assert ray.get(host.make.remote("a", tiny_path, 2, "3,2")) == [3, 2]
        assert ray.get(host.make.remote("b", tiny_path, 2, None)) == [0, 1]
        # Without distinct bundle indices a third engine picks bundles 0 and 1 again, whose
        # GPUs "b" holds: vLLM would wait forever, the stand-in gives up.
        assert "could not all be placed" in ray.get(host.make.remote("c", tiny_path, 2, None))
        assert "must have the same size as the world size" in ray.get(
            host.make.remote("d", tiny_path, 2, "1"))
        assert "cannot have duplicate values" in ray.get(host.make.remote("d", tiny_path, 2, "1,1"))
        # TP > 1 runs on the multi-worker executor path, which honours collective_rpc timeouts.
        assert re.fullmatch(r"RPC call to .* timed out\.", ray.get(host.rpc_timeout.remote("a")))

        # Engine "a" (TP=2) joins a group of world size 3 as ranks 1 and 2.
        port = _free_port()
        init = host.call.remote("a", "init_weight_transfer_engine", {"init_info": {
            "master_address": "127.0.0.1", "master_port": port, "rank_offset": 1,
            "world_size": 3, "packed": True, "packed_buffer_size_bytes": 1 << 16}})
        comm = trainer_init({"master_address": "127.0.0.1", "master_port": port,
                             "world_size": 3}, rank=0)
        ray.get(init, timeout=60)
        source = _hf_model(tiny_path)
        with torch.no_grad():
            for p in source.parameters():
                p.add_(0.25)
        weights = list(source.named_parameters())
        info = {"names": [n for n, _ in weights],
                "dtype_names": ["float32"] * len(weights),
                "shapes": [list(t.shape) for _, t in weights]}
        ray.get(host.call.remote("a", "start_weight_update"))
        update = host.call.remote("a", "update_weights", {"update_info": info})
        from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

        with pytest.warns(UserWarning):
            packed_nccl_broadcast_producer(iter(weights), comm, 0, lambda item: item[1],
                                           buffer_size_bytes=1 << 16)
        ray.get(update, timeout=60)
        ray.get(host.call.remote("a", "finish_weight_update", "v1"))
        received = ray.get(host.weights.remote("a"))
        assert all(torch.equal(received[n], t.detach()) for n, t in weights)
        assert ray.get(host.call.remote("a", "get_weight_version")) == "v1"
        comm.destroy()
    finally:
        ray.kill(host)
        remove_placement_group(pg)


@pytest.mark.slow
def test_tp_placement_group_checks_in_ray(vllm: ModuleType, ray_gpus: None,
                                          tiny_path: str) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    cases = [
        ([{"GPU": 2, "CPU": 1}], "Placement group bundle cannot have more than 1 GPU."),
        ([{"GPU": 1, "CPU": 1}], "exceeds the total number of available GPUs in the placement "
                                 "group. Required number of devices: 2. Total number of "
                                 "devices: 1."),
    ]
    for bundles, message in cases:
        pg = placement_group(bundles)
        ray.get(pg.ready(), timeout=60)
        host = _host(pg)
        try:
            assert message in ray.get(host.make.remote("e", tiny_path, 2, None))
        finally:
            ray.kill(host)
            remove_placement_group(pg)


def test_chunk_rule_matches_packed_tensor(vllm: ModuleType) -> None:
    from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

    tensors = [(f"t{i}", torch.zeros(n, dtype=torch.uint8)) for i, n in
               enumerate([10, 30, 5, 100, 1, 1, 60])]
    chunks = 0
    iterator = iter(tensors)
    with pytest.warns(UserWarning):
        while pack_tensors(iterator, lambda item: item[1], 40) is not None:
            chunks += 1
    assert chunks == _chunks([10, 30, 5, 100, 1, 1, 60], 40) == 3
