"""Seeded toy tasks for the CPU demos and the tests: tiny arithmetic, multi-step arithmetic
chains, tiny stdin/stdout programs and repair tasks only feedback can settle, short and regular
enough that a 2-layer byte-level model learns them in minutes.

Generation is deterministic in (n, seed), and the first k problems are the same for every
n >= k, so ids such as `toy-arith-17` name the same problem across runs.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

from rlrun.data.errors import DataError
from rlrun.records import Problem, StdioTest, Tests

_NAMES = (
    "Ann", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jon", "Kim", "Lou",
    "Max", "Ned", "Ola", "Pam", "Raj", "Sue", "Tom", "Uma",
)
_ITEMS = (
    "apples", "books", "cards", "coins", "cups", "eggs", "hats", "keys", "nuts", "pens",
    "rocks", "shells", "socks", "stamps", "toys", "balls",
)
# Word problems: the numbers sit in changing sentences, so a held-out problem is a new wording of
# arithmetic the model can still do, not a fact it could only have memorised. The words between
# and after the numbers are fixed within a template (names have three letters), so a 2-layer
# model can learn where to read the operands, within the demo's few hundred warm-start steps.
_ADD = (
    "{name} has some {items}: {a} in a bag and {b} in a box. How many are there in all?",
    "{name} collects {items}. First {a}, then {b} more. How many does {name} have now?",
    "What is {a} + {b}?",
)
_SUB = (
    "{name} has some {items}: {a} of them, and gives away {b}. How many are left?",
    "{name} counts {items}. There were {a}, and {b} got lost. How many remain?",
    "What is {a} - {b}?",
)


def arithmetic_problems(n: int, seed: int, max_operand: int = 9) -> list[Problem]:
    """`n` word problems like "Ann collects hats. First 3, then 4 more. ..." (answer "7", reference
    "3 + 4 = 7\n#### 7"); subtractions never go below zero."""
    rng = random.Random(f"toy-arith:{seed}")
    problems = []
    for i in range(n):
        op = rng.choice("+-")
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        if op == "-" and b > a:
            a, b = b, a
        value = a + b if op == "+" else a - b
        template = rng.choice(_ADD if op == "+" else _SUB)
        prompt = template.format(name=rng.choice(_NAMES), items=rng.choice(_ITEMS), a=a, b=b)
        problems.append(
            Problem(
                id=f"toy-arith-{i}",
                prompt=prompt,
                kind="math",
                answer=str(value),
                reference=f"{a} {op} {b} = {value}\n#### {value}",
                meta={"source": "toy:arithmetic", "op": op},
            )
        )
    return problems


def step_problems(n: int, seed: int, min_steps: int = 2, max_steps: int = 4,
                  max_value: int = 9) -> list[Problem]:
    """`n` chains like "Start at 7, then - 5, then + 3. What is the result?" (answer "5",
    reference "7 - 5 = 2\n2 + 3 = 5\n#### 5"). Every value stays in 0..max_value, so each step
    is `toy:arithmetic` and a chain is right only when all its steps are: where a final-answer
    reward says least about which step went wrong (`reward.step_rewards`)."""
    rng = random.Random(f"toy-steps:{seed}")
    problems = []
    for i in range(n):
        value = rng.randint(0, max_value)
        start, ops, lines = value, [], []
        for _ in range(rng.randint(min_steps, max_steps)):
            # The next value is uniform over the others, so no answer is a good guess.
            result = rng.choice([v for v in range(max_value + 1) if v != value])
            op, b = ("+", result - value) if result > value else ("-", value - result)
            ops.append(f"{op} {b}")
            lines.append(f"{value} {op} {b} = {result}")
            value = result
        problems.append(
            Problem(
                id=f"toy-steps-{i}",
                prompt=f"Start at {start}, then " + ", then ".join(ops)
                + ". What is the result?",
                kind="math",
                answer=str(value),
                reference="\n".join(lines) + f"\n#### {value}",
                meta={"source": "toy:steps", "steps": len(ops)},
            )
        )
    return problems


# (name, statement, expected output from the two integers, reference program)
_PAIR_TASKS: list[tuple[str, str, Callable[[int, int], int], str]] = [
    ("sum", "Read two integers from one line and print their sum.", lambda a, b: a + b,
     "a, b = map(int, input().split()); print(a + b)"),
    ("difference", "Read two integers a and b from one line and print a - b.",
     lambda a, b: a - b, "a, b = map(int, input().split()); print(a - b)"),
    ("product", "Read two integers from one line and print their product.",
     lambda a, b: a * b, "a, b = map(int, input().split()); print(a * b)"),
    ("max", "Read two integers from one line and print the larger one.", max,
     "print(max(map(int, input().split())))"),
]
# (name, statement, expected output from the line, reference program)
_LINE_TASKS: list[tuple[str, str, Callable[[str], str], str]] = [
    ("reverse", "Read a line and print it reversed.", lambda s: s[::-1],
     "print(input()[::-1])"),
    ("upper", "Read a line and print it in upper case.", str.upper,
     "print(input().upper())"),
]
_TEMPLATES = len(_PAIR_TASKS) + len(_LINE_TASKS) + 1


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 7)))


def code_problems(n: int, seed: int) -> list[Problem]:
    """`n` tiny stdin/stdout tasks with 3-4 tests each and a one-line Python reference.

    Each statement fixes its program: none asks for a number copied out of the statement (say,
    "print n * 7"), which the demo's 2-layer model cannot yet do when its warm-start stops.
    """
    rng = random.Random(f"toy-code:{seed}")
    problems = []
    for i in range(n):
        pick = rng.randrange(_TEMPLATES)
        cases = rng.randint(3, 4)
        if pick < len(_PAIR_TASKS):
            name, statement, fn, reference = _PAIR_TASKS[pick]
            pairs = [(rng.randint(0, 50), rng.randint(0, 50)) for _ in range(cases)]
            tests = [StdioTest(f"{a} {b}\n", str(fn(a, b))) for a, b in pairs]
        elif pick < len(_PAIR_TASKS) + len(_LINE_TASKS):
            name, statement, line_fn, reference = _LINE_TASKS[pick - len(_PAIR_TASKS)]
            words = [_word(rng) for _ in range(cases)]
            tests = [StdioTest(f"{w}\n", line_fn(w)) for w in words]
        else:
            name, statement = "square", "Read an integer n and print n * n."
            reference = "n = int(input()); print(n * n)"
            values = [rng.randint(0, 50) for _ in range(cases)]
            tests = [StdioTest(f"{v}\n", str(v * v)) for v in values]
        problems.append(_code_problem(rng, "code", i, statement, tests, reference, name))
    return problems


def _code_problem(rng: random.Random, kind: str, i: int, statement: str, tests: list[StdioTest],
                  reference: str, template: str) -> Problem:
    """Problem `i` of `toy:<kind>`, its statement asked by one of `_NAMES` (drawn from `rng`)."""
    return Problem(
        id=f"toy-{kind}-{i}",
        prompt=f"{rng.choice(_NAMES)} asks: {statement}",
        kind="code",
        tests=Tests(stdio=tests),
        language="python",
        time_limit_s=2.0,
        reference=reference,
        meta={"source": f"toy:{kind}", "template": template},
    )


# (name, expected output from the line, reference program): the repair tasks' hidden changes
_REPAIR_CHANGES: list[tuple[str, Callable[[str], str], str]] = [
    ("upper", str.upper, "print(input().upper())"),
    ("reverse", lambda s: s[::-1], "print(input()[::-1])"),
    ("double", lambda s: s + s, "s = input(); print(s + s)"),
]
_REPAIR_STATEMENT = "Read a line and print it changed the way the tests show."


def repair_problems(n: int, seed: int) -> list[Problem]:
    """`n` tasks whose statement does not say what to do: "Read a line and print it changed
    the way the tests show." Each hides one of three changes (upper case, reversed, written
    twice) behind four tests. A first attempt can only guess (one in three); the failed test a
    code-repair environment shows (`env.name: code_repair`, one visible test) says which change
    it is, so a model that reads the feedback can always fix its program on the second turn.
    """
    rng = random.Random(f"toy-repair:{seed}")
    problems = []
    for i in range(n):
        name, change, reference = rng.choice(_REPAIR_CHANGES)
        words = [_word(rng) for _ in range(4)]
        tests = [StdioTest(f"{w}\n", change(w)) for w in words]
        problems.append(_code_problem(rng, "repair", i, _REPAIR_STATEMENT, tests, reference, name))
    return problems


def mixed_problems(n: int, seed: int) -> list[Problem]:
    """Arithmetic and code problems, alternating."""
    maths, codes = arithmetic_problems((n + 1) // 2, seed), code_problems(n // 2, seed)
    return [p for pair in zip(maths, codes, strict=False) for p in pair] + maths[len(codes):]


TOY_KINDS: dict[str, Callable[[int, int], list[Problem]]] = {
    "arithmetic": arithmetic_problems, "steps": step_problems, "code": code_problems,
    "repair": repair_problems, "mixed": mixed_problems,
}


def toy_problems(kind: str, n: int, seed: int) -> list[Problem]:
    """`toy:<kind>` datasets, generated by `TOY_KINDS[kind]`."""
    if kind not in TOY_KINDS:
        raise DataError(f"unknown toy dataset toy:{kind}; use one of "
                        + ", ".join(f"toy:{k}" for k in TOY_KINDS))
    return TOY_KINDS[kind](n, seed)
