"""Judge each distinct program once: collapse identical submissions of a batch and fan back out.

In GRPO a group of G completions for one prompt often contains the same program several times.
Two submissions are identical when code, language, limits and tests are all equal; the result
of one is then the result of the other, under its own id.
"""

from __future__ import annotations

import dataclasses
import hashlib

from rlrun.records import JudgeResult, Submission


def _tests_key(sub: Submission, cache: dict[int, str]) -> str:
    # Submissions of one problem usually share one Tests object, so hash each object once.
    key = cache.get(id(sub.tests))
    if key is None:
        key = hashlib.sha256(repr(sub.tests).encode()).hexdigest()
        cache[id(sub.tests)] = key
    return key


def dedup(subs: list[Submission]) -> tuple[list[Submission], list[int]]:
    """Distinct submissions (first occurrences) and, per input, the index of its distinct one."""
    unique: list[Submission] = []
    owner: list[int] = []
    seen: dict[tuple, int] = {}
    cache: dict[int, str] = {}
    for sub in subs:
        key = (
            sub.code, sub.language, sub.time_limit_s, sub.memory_limit_mb, _tests_key(sub, cache)
        )
        if key not in seen:
            seen[key] = len(unique)
            unique.append(sub)
        owner.append(seen[key])
    return unique, owner


def expand(
    subs: list[Submission], owner: list[int], results: list[JudgeResult]
) -> list[JudgeResult]:
    """One result per input submission, in input order, each carrying that submission's id."""
    out = []
    for sub, j in zip(subs, owner, strict=True):
        res = results[j]
        if res.id != sub.id:
            verdicts = [dataclasses.replace(v) for v in res.tests]
            res = dataclasses.replace(res, id=sub.id, tests=verdicts)
        out.append(res)
    return out
