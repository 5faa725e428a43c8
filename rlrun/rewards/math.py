"""Math answer checking: extract the final answer from a completion and compare it with the gold.

Extractors (`reward.math_extractor`, docs/rewards.md): `strict`, the last `#### n` in the last
300 characters (veRL's GSM8K regex and window, so scores compare with published GSM8K runs; `$`
and a leading `+` after `####` are also accepted); `flexible`, the last number in those 300
characters; `boxed`, the content of the last `\\boxed{...}` (nested braces allowed);
`math_verify`, LaTeX equivalence through the `math-verify` package, run in a separate process
with a hard kill at the timeout and a bound on its memory.

`strict`, `flexible` and `boxed` compare numbers after `normalize_number` (commas, `$`, unit
words after the number, trailing `.`, leading `+`, `-0` == `0`, `1,000.00` == `1000`); a
non-numeric boxed answer is compared as text with whitespace removed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import resource
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from rlrun.config import CHOICES

MODES = CHOICES["reward.math_extractor"]

# veRL's gsm8k.py looks only at the tail of a completion; keeping that makes strict scores match.
CLIP_CHARS = 300

# Address space the math-verify process may take beyond what it holds once imported. An answer
# like `2^{2^{33}}` makes sympy build a number of a billion digits: about 400 MB within a 5 s
# timeout, gigabytes with a longer one, in every process that checks math. Real answers need a
# few MB; over the bound the check fails with MemoryError, a wrong answer.
VERIFY_MEMORY_BYTES = 512 << 20

# The answer after "####" has a digit ("#### ." is no answer); the two runs around the first
# digit take different characters, so a string splits one way only.
_STRICT = re.compile(r"#### *\$? *(\+?[-\u2212]?\$?[.,]*\d[0-9.,]*)")
# A number: digit groups with thousands commas or plain digits, an optional decimal part. A sign
# (a Unicode minus too) counts only when it does not follow a word or a digit (so the "-" in
# "12-3" is not a sign).
_NUMBER = re.compile(r"(?:(?<![\w.])[-+\u2212])?"
                     r"(?:\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\w.])\.\d+)")
# A number as written once its LaTeX and currency are gone: separators only between groups of
# three digits ("1,000", "1 000"), so "-2, 3" (two answers) is not the number -23.
_WRITTEN = re.compile(r"(-?)\s*(\d{1,3}(?:[,\s]\d{3})+|\d*)(?:\.(\d*))?")
_SEPARATOR = re.compile(r"[,\s]")
# LaTeX thousands separators and currency: "1{,}000", "1\\,000", "\\$5".
_LATEX_SEPARATOR = re.compile(r"\{,\}|\\[,!]")
_CURRENCY = re.compile(r"\\?\$")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


@dataclass
class Span:
    """An extracted answer and where it sits in the completion (for audits that perturb it)."""

    text: str
    start: int
    end: int


def normalize_number(text: str) -> str | None:
    """Canonical decimal form of a number written in an answer, or None when it is not one.

    "1,000.00" -> "1000", "$18." -> "18", "+5" -> "5", "-0" -> "0", "0.50" -> "0.5",
    "\u22125" (a Unicode minus) -> "-5"; "-2, 3" and "12,34" are not numbers.
    """
    s = _CURRENCY.sub("", _LATEX_SEPARATOR.sub(",", text))
    s = s.replace("\u2212", "-").strip().rstrip(".,").removeprefix("+")
    # Exact, on the digits themselves: Decimal's 28-digit context rounded two long numbers that
    # differ past their 28th digit to one value. One way to split the digits, so no backtracking.
    m = _WRITTEN.fullmatch(s)
    if m is None or not (m[2] or m[3]):
        return None
    whole, frac = _SEPARATOR.sub("", m[2]).lstrip("0") or "0", (m[3] or "").rstrip("0")
    if whole == "0" and not frac:
        return "0"
    return m[1] + whole + ("." + frac if frac else "")


def find_answer(text: str, mode: str) -> Span | None:
    """The answer the extractor `mode` reads from `text`, with its position; None if absent.

    For `math_verify` this is the boxed answer when there is one, else the last number, which
    is what an audit perturbs; `check_answer` itself hands the whole text to math-verify.
    """
    _check_mode(mode)
    offset = max(0, len(text) - CLIP_CHARS)
    tail = text[offset:]
    if mode in ("strict", "flexible"):
        pattern, group = (_STRICT, 1) if mode == "strict" else (_NUMBER, 0)
        matches = list(pattern.finditer(tail))
        if not matches:
            return None
        m = matches[-1]
        return Span(m.group(group), offset + m.start(group), offset + m.end(group))
    span = _last_boxed(text)
    return find_answer(text, "flexible") if span is None and mode == "math_verify" else span


def _last_boxed(text: str) -> Span | None:
    """The last `\\boxed{` whose brace closes. Each is scanned only up to the next one: when every
    later one is left open, an earlier one cannot close past them, so the scan is linear (it
    was quadratic in the number of unclosed `\\boxed{`)."""
    found = list(_BOXED.finditer(text))
    for k in range(len(found) - 1, -1, -1):
        start = found[k].end()
        stop = found[k + 1].start() if k + 1 < len(found) else len(text)
        depth = 1
        for i in range(start, stop):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return Span(text[start:i], start, i)
    return None


def extract_answer(text: str, mode: str) -> str | None:
    """The final answer of `text` under extractor `mode`, normalised where it is a number."""
    span = find_answer(text, mode)
    if span is None:
        return None
    number = normalize_number(_strip_units(span.text))
    return number if number is not None else span.text.strip()


# "18 dollars", "5cm", "5 \text{ cm}", "50\%"; not one letter against the number ("2x", "3i"),
# which is a term. Written so a string splits one way only (no two adjacent quantifiers over the
# same characters), or a long run of digits or spaces backtracks for minutes.
_UNITS = re.compile(r"\s*([-+\u2212]?\$?(?:[\d,]*\.\d+|[\d,]*\d)\.?)"
                    r"\s*(?:(?:\\%|%|\\text\{[^}]*\}|(?<=\s)[A-Za-z]+|[A-Za-z]{2,})\s*)?$")


def _strip_units(answer: str) -> str:
    # Keep the leading number when what follows is a unit word.
    m = _UNITS.match(answer)
    return m.group(1) if m else answer


@dataclass
class MathResult:
    """Outcome of one check: whether it is correct, what was extracted, whether it timed out."""

    correct: bool
    extracted: str | None
    timed_out: bool = False


def check_answer(text: str, gold: str, mode: str, timeout_s: float = 5.0) -> MathResult:
    """Check `text` against the gold answer under extractor `mode`."""
    _check_mode(mode)
    if mode == "math_verify":
        return _VERIFIER.check(text, gold, timeout_s)
    extracted = extract_answer(text, mode)
    if extracted is None:
        return MathResult(False, None)
    gold_number = normalize_number(_strip_units(gold))
    if gold_number is None:  # a text answer: compared with whitespace removed
        return MathResult(re.sub(r"\s+", "", extracted) == re.sub(r"\s+", "", gold), extracted)
    return MathResult(extracted == gold_number, extracted)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(
            f"reward.math_extractor={mode!r} is not an extractor: choose one of {', '.join(MODES)}"
        )


def _verify_loop(conn: Connection) -> None:
    """Child process: answer (text, gold) requests with (correct, extracted) until EOF."""
    from math_verify import parse, verify

    # Timeouts are the parent's job (a hard kill), so math-verify's signal alarms are off and
    # its warning about that is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    with open("/proc/self/statm") as f:
        limit = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + VERIFY_MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            text, gold = conn.recv()
        except EOFError:
            return
        try:
            gold_parsed = parse(gold if "$" in gold else f"${gold}$", parsing_timeout=None)
            pred = parse(text, parsing_timeout=None)
            ok = bool(gold_parsed and pred and verify(gold_parsed, pred, timeout_seconds=None))
            extracted = str(pred[-1]) if pred else None
            conn.send((ok, extracted))
        except Exception as err:  # a parser crash or MemoryError is a wrong answer, not a hang
            conn.send((False, f"error: {type(err).__name__}"))


class _Verifier:
    """One math-verify child process, killed and restarted when a check overruns its timeout.

    Requests are serialised with a lock, so threads may share it; each process has its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        if self._proc is None or not self._proc.is_alive():
            # spawn, not fork: the caller may be a Ray worker with threads holding locks.
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_verify_loop, args=(child,), daemon=True)
            self._proc.start()
            child.close()
            self._conn = parent
            # Wait for the import so the first check's timeout does not count start-up.
            parent.send(("1", "1"))
            parent.recv()
        assert self._conn is not None
        return self._conn

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
        self._proc = None
        self._conn = None

    def check(self, text: str, gold: str, timeout_s: float) -> MathResult:
        with self._lock:
            conn = self._start()
            conn.send((text, gold))
            if not conn.poll(timeout_s):
                self._kill()
                return MathResult(False, None, timed_out=True)
            try:
                ok, extracted = conn.recv()
            except EOFError:
                self._kill()
                return MathResult(False, "error: verifier process died")
            return MathResult(ok, extracted)


_VERIFIER = _Verifier()  # its process starts at the first math_verify check
