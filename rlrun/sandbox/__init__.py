"""The code sandbox: warm, isolated executors and a judge that compares outside them.

Public API: `Judge(backend, workers, cfg)` with `judge(subs) -> list[JudgeResult]` and
`close()`, and `make_submission(problem, code, cfg, language, sub_id)`. Modules:
executor.py (the standalone zygote script), backends.py (how it is launched: process, bwrap,
docker), judge.py (slots, retries, verdicts), compare.py (stdout and typed value comparison),
harness.py (assert rewriting), cpp.py (compile cache), dedup.py (identical submissions judged
once). The threat model is docs/sandbox.md.
"""

from rlrun.sandbox.backends import SandboxUnavailable, docker_argv, make_launch
from rlrun.sandbox.judge import ExecutorFailure, Judge, make_submission

__all__ = ["ExecutorFailure", "Judge", "SandboxUnavailable", "docker_argv", "make_launch",
           "make_submission"]
