"""Assert-style harnesses (HumanEval `check(candidate)`, MBPP asserts, LeetCode functional),
rewritten so that only positive evidence can make them pass.

The harness runs in a process of its own that never runs program code (executor.run_harness);
the program's functions and objects are handles there, served by the program's process. Each
`assert` becomes a call that reports a value to the judge over the harness process's result
pipe; the judge, not the sandbox, decides whether it held:

- `assert X == <literal>` (or `<literal> == X`) reports X only. The literal is removed from the
  code the sandbox runs and kept here, so the expected value never enters the sandbox.
- `assert X == Y` reports the pair and the judge compares the two decoded values.
- any other `assert E` reports E, with every operand of a comparison, arithmetic or boolean
  operator inside E first copied into fresh plain data; the judge requires the decoded value
  to be truthy.

Assert messages are dropped (they could call the candidate or print expected values). Values
are sent in the exact-type plain encoding of `executor.encode_plain`, so an object that is not
plain data fails its check. A harness passes only if every reported check held, every
"required" check (one not under an `if`/`while`/`try`/`match` or in a helper function) reported
at least once, and the harness process reported that the harness returned normally.

`names` lists the globals the harness uses but does not define (the function MBPP's asserts
call, LeetCode's `Solution`): the harness process asks the program's process for those.
`with_prompt_definitions` adds the prompt's own helpers (HumanEval's `encode_cyclic`, `poly`)
to a harness, so that those come from the dataset, not from the program.
"""

from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass, field
from typing import Any

SITE = "__rlrun_site"
PLAIN = "__rlrun_plain"
_NO_LITERAL = object()
_CONDITIONAL = (ast.If, ast.While, ast.Try, ast.TryStar, ast.Match, ast.IfExp, ast.Lambda,
                ast.BoolOp, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Site:
    """One rewritten assert: how the judge checks the value the child reports for it."""

    index: int
    kind: str  # eq_literal | eq_pair | truthy
    line: int
    required: bool
    expected: Any = None


@dataclass
class PreparedHarness:
    """A harness ready to send to the executor, and what the judge keeps back."""

    source: str
    sites: list[Site] = field(default_factory=list)
    call_check: bool = False
    # Globals the harness uses but does not define: the program's (its function, for MBPP).
    names: list[str] = field(default_factory=list)


class HarnessError(ValueError):
    """The harness text does not parse."""


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_LITERAL


def _plain(node: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(id=PLAIN, ctx=ast.Load()), args=[node], keywords=[])


class _WrapOperands(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        node.left = _plain(node.left)
        node.comparators = [_plain(c) for c in node.comparators]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        node.left, node.right = _plain(node.left), _plain(node.right)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        node.operand = _plain(node.operand)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        node.values = [_plain(v) for v in node.values]
        return node


class _Rewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.sites: list[Site] = []
        self.stack: list[ast.AST] = []

    def _required(self) -> bool:
        for i, node in enumerate(self.stack):
            if isinstance(node, _CONDITIONAL):
                return False
            if isinstance(node, ast.FunctionDef) and not (i == 1 and node.name == "check"):
                return False
        return True

    def visit(self, node: ast.AST) -> Any:
        self.stack.append(node)
        try:
            return super().visit(node)
        finally:
            self.stack.pop()

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        index, required = len(self.sites), self._required()
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left, right = test.left, test.comparators[0]
            for value_node, lit_node in ((left, right), (right, left)):
                lit = _literal(lit_node)
                if lit is not _NO_LITERAL:
                    self.sites.append(Site(index, "eq_literal", node.lineno, required, lit))
                    return self._report(node, index, value_node)
            self.sites.append(Site(index, "eq_pair", node.lineno, required))
            return self._report(node, index, ast.Tuple(elts=[left, right], ctx=ast.Load()))
        self.sites.append(Site(index, "truthy", node.lineno, required))
        return self._report(node, index, _plain(_WrapOperands().visit(test)))

    @staticmethod
    def _report(node: ast.Assert, index: int, value: ast.expr) -> ast.stmt:
        call = ast.Call(func=ast.Name(id=SITE, ctx=ast.Load()),
                        args=[ast.Constant(index), value], keywords=[])
        return ast.copy_location(ast.Expr(call), node)


def _calls_check_at_top(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "check":
                return True
    return False


def _program_names(source: str) -> list[str]:
    """Global names `source` reads but never binds at its top level, built-ins and dunders
    aside: what the harness can only get from the program."""
    top = symtable.symtable(source, "<harness>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    names: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        names.update(s.get_name() for s in table.get_symbols()
                     if s.is_global() or (table is top and s.is_referenced()))
        tables += table.get_children()
    return sorted(n for n in names - bound
                  if n not in builtins.__dict__ and not n.startswith("__"))


def _is_stub(stmt: ast.stmt) -> bool:
    """A function the completion is meant to write: its body is a docstring, `pass` or `...`."""
    if not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr)
                                           and isinstance(s.value, ast.Constant))
               for s in stmt.body)


def with_prompt_definitions(harness: str, prefix: str, entry_point: str | None) -> str:
    """`harness` followed by what the prompt `prefix` defines besides the function to write
    (HumanEval's helpers such as `encode_cyclic` or `poly`, and its imports), so the harness
    checks against the prompt's own helpers, not whatever a program redefines under their
    names. Only for a harness whose `check` is called after it has run (HumanEval's), so the
    line numbers of its checks stay as written; otherwise, or if the prefix does not parse on
    its own, `harness` unchanged."""
    try:
        tree, prompt = ast.parse(harness), ast.parse(prefix)
    except SyntaxError:
        return harness
    defines_check = any(isinstance(s, ast.FunctionDef) and s.name == "check" for s in tree.body)
    if not defines_check or _calls_check_at_top(tree):
        return harness
    kept = [s for s in prompt.body if not _is_stub(s)
            and not (isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                     and s.name == entry_point)
            and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not kept:
        return harness
    return harness.rstrip("\n") + "\n\n\n" + ast.unparse(ast.Module(kept, [])) + "\n"


def prepare_harness(harness: str, entry_point: str | None) -> PreparedHarness:
    """Rewrite `harness` for the sandbox; raises HarnessError if it does not parse."""
    try:
        tree = ast.parse(harness)
    except SyntaxError as e:
        raise HarnessError(f"the test harness does not parse: {e.msg} (line {e.lineno})") from e
    rewriter = _Rewriter()
    tree = rewriter.visit(tree)
    ast.fix_missing_locations(tree)
    defines_check = any(isinstance(s, ast.FunctionDef) and s.name == "check" for s in tree.body)
    call_check = bool(entry_point) and defines_check and not _calls_check_at_top(tree)
    source = ast.unparse(tree)
    return PreparedHarness(source, rewriter.sites, call_check, _program_names(source))
