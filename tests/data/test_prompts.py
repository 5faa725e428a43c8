"""Prompt rendering: template, per-kind instructions, and the chat template path."""

import pytest
from transformers import ByT5Tokenizer

from rlrun import records
from rlrun.config import DataConfig
from rlrun.data import DataError
from rlrun.data.prompts import chat_messages, instruction, render_prompt
from rlrun.records import Problem, StdioTest

MATH = Problem("m", "What is 2 + 2?", "math", answer="4")
STDIO = Problem(
    "c", "Print 1.", "code", tests=records.Tests(stdio=[StdioTest("", "1")]), language="cpp"
)
HUMANEVAL = Problem(
    "h", "def f(x):\n    \"\"\"Return x.\"\"\"\n", "code",
    tests=records.Tests(
        harness="def check(candidate):\n    assert candidate(1) == 1\n", entry_point="f"
    ),
    code_prefix="def f(x):\n    \"\"\"Return x.\"\"\"\n",
)
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def chat_tokenizer():
    tokenizer = ByT5Tokenizer()
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_math_prompt_uses_the_math_instruction():
    assert render_prompt(MATH, DataConfig()) == (
        "What is 2 + 2?\nGive the final answer after '#### '.\n"
    )


def test_code_instruction_names_the_language():
    assert instruction(STDIO, DataConfig()) == "Answer with a ```cpp code block."


def test_humaneval_asks_to_complete_the_function_in_a_fenced_block():
    text = instruction(HUMANEVAL, DataConfig())
    assert "Complete the function `f`" in text and "```python code block" in text


def test_custom_template_and_braces_in_the_problem_survive():
    cfg = DataConfig(prompt_template="Q: {prompt}\n({instruction})\nA:", math_instruction="#### n")
    problem = Problem("m", "Is {x} a set?", "math", answer="yes")
    assert render_prompt(problem, cfg) == "Q: Is {x} a set?\n(#### n)\nA:"


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        (DataConfig(prompt_template="{question}"), "data.prompt_template"),
        (DataConfig(code_instruction="Use {lang}."), "data.code_instruction"),
    ],
)
def test_unknown_placeholders_name_the_key(cfg, key):
    with pytest.raises(DataError, match=key):
        render_prompt(STDIO, cfg)


def test_chat_applies_the_template_with_system_prompt_and_generation_prompt():
    cfg = DataConfig(system_prompt="Be brief.")
    text = render_prompt(MATH, cfg, tokenizer=chat_tokenizer(), chat=True)
    assert text == (
        "<system>Be brief.</system>"
        "<user>What is 2 + 2?\nGive the final answer after '#### '.</user><assistant>"
    )


def test_chat_prompt_conversation_keeps_turns_and_renders_last_user_turn():
    problem = Problem(
        "m",
        [{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"}],
        "math", answer="4",
    )
    messages = chat_messages(problem, DataConfig(system_prompt="ignored"))
    assert messages == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "2+2?\nGive the final answer after '#### '."},
    ]
    assert render_prompt(problem, DataConfig()) == (
        "2+2?\nGive the final answer after '#### '.\n"
    )


def test_chat_without_template_is_a_clear_error():
    with pytest.raises(DataError, match="model.chat_template=false"):
        render_prompt(MATH, DataConfig(), tokenizer=ByT5Tokenizer(), chat=True)


def test_chat_without_tokenizer_is_plain_text():
    assert render_prompt(MATH, DataConfig(), chat=True) == render_prompt(MATH, DataConfig())
