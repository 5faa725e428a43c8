"""The text a model sees for a problem: `data.prompt_template` filled with the problem and the
answer-format instruction its reward expects, optionally wrapped in the tokenizer's chat template.

Math problems get `data.math_instruction` (the strict extractor looks for `#### <answer>`).
Code problems get `data.code_instruction` with the problem's language; HumanEval-style problems
(with a `code_prefix`) are asked to complete the shown function in a fenced block instead.
"""

from __future__ import annotations

from typing import Any

from rlrun.config import DataConfig
from rlrun.data.errors import DataError
from rlrun.records import Problem


def _fill(template: str, key: str, **values: str) -> str:
    try:
        return template.format_map(values)
    except (KeyError, IndexError) as err:
        allowed = ", ".join("{" + name + "}" for name in values)
        raise DataError(
            f"{key}={template!r} uses a placeholder {err} that does not exist; it may use "
            f"{allowed} (write literal braces as {{{{ and }}}})"
        ) from None
    except ValueError as err:
        raise DataError(f"{key}={template!r} is not a valid template: {err}") from None


def instruction(problem: Problem, cfg: DataConfig) -> str:
    """The answer-format instruction for `problem`."""
    if problem.kind == "math":
        return cfg.math_instruction
    if problem.code_prefix:
        entry = problem.tests.entry_point if problem.tests else None
        name = f" `{entry}`" if entry else ""
        return (
            f"Complete the function{name} above. Answer with the complete function in a "
            f"```{problem.language} code block."
        )
    return _fill(cfg.code_instruction, "data.code_instruction", language=problem.language)


def _problem_text(problem: Problem) -> str:
    if isinstance(problem.prompt, str):
        return problem.prompt
    return "\n\n".join(m.get("content", "") for m in problem.prompt if m.get("role") != "system")


def _render(text: str, problem: Problem, cfg: DataConfig) -> str:
    return _fill(cfg.prompt_template, "data.prompt_template", prompt=text,
                 instruction=instruction(problem, cfg))


def render_text(problem: Problem, cfg: DataConfig) -> str:
    """The plain-text prompt: the template with {prompt} and {instruction} filled in."""
    return _render(_problem_text(problem), problem, cfg)


def chat_messages(problem: Problem, cfg: DataConfig) -> list[dict[str, str]]:
    """Chat messages for `problem`: an optional system message, then the rendered user turn.

    A problem whose prompt is already a conversation keeps its earlier turns; the template
    is applied to its last user message.
    """
    if isinstance(problem.prompt, str):
        messages = [{"role": "user", "content": render_text(problem, cfg).strip()}]
    else:
        messages = [dict(m) for m in problem.prompt]
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            raise DataError(f"problem {problem.id}: its chat prompt has no user message")
        last = messages[users[-1]]
        last["content"] = _render(last.get("content", ""), problem, cfg).strip()
    if cfg.system_prompt and not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return messages


def render_prompt(
    problem: Problem, cfg: DataConfig, tokenizer: Any = None, chat: bool = False
) -> str:
    """The text fed to the model; with `chat` and a tokenizer, the chat template is applied
    (with the generation prompt, so the model continues as the assistant)."""
    if not chat or tokenizer is None:
        return render_text(problem, cfg)
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise DataError(
            f"model.chat_template is true but the tokenizer {name!r} has no chat template; "
            "set model.chat_template=false for a base model"
        )
    return tokenizer.apply_chat_template(
        chat_messages(problem, cfg), tokenize=False, add_generation_prompt=True
    )
