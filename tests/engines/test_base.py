"""Sampling parameters, prompt encoding, weight-name checks and engine selection."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlrun.config import RolloutConfig, SamplingConfig
from rlrun.engines import SamplingParams, WeightsMismatchError, make_engine
from rlrun.engines.base import check_weight_names, encode_prompts
from rlrun.models import load_tokenizer


def test_from_config_copies_the_knobs() -> None:
    cfg = SamplingConfig(
        temperature=0.5, top_p=0.8, top_k=7, max_new_tokens=9, stop=["\n\n"],
        include_stop_str=True,
    )
    params = SamplingParams.from_config(cfg, n=4, seed=11)
    assert params == SamplingParams(0.5, 0.8, 7, 9, ["\n\n"], True, n=4, seed=11)
    assert params.stop is not cfg.stop


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"n": 0}, "n=0"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_impossible_sampling_params_are_refused(kwargs: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        SamplingParams(**kwargs)


def test_prompts_do_not_end_with_the_eos_the_byte_tokenizer_appends(tiny_path: str) -> None:
    tokenizer = load_tokenizer(tiny_path)
    assert tokenizer("ab")["input_ids"][-1] == tokenizer.eos_token_id  # what is being undone
    assert encode_prompts(tokenizer, ["ab", "a\nb"]) == [[100, 101], [100, 13, 101]]


def test_weight_name_check_lists_a_few_offenders_and_counts_the_rest() -> None:
    expected = {f"w{i}": (2,) for i in range(8)}
    with pytest.raises(WeightsMismatchError) as info:
        check_weight_names(expected, {"w0": torch.zeros(2)}, version=4)
    message = str(info.value)
    assert "version 4" in message and "missing 7" in message and "and 2 more" in message
    check_weight_names(expected, {k: torch.zeros(2) for k in expected}, version=4)


def test_unknown_engine_names_the_config_key() -> None:
    with pytest.raises(ValueError, match="rollout.engine='tgi'"):
        make_engine("tgi", "unused", RolloutConfig(), "float32")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_engine_without_vllm_says_how_to_install_it() -> None:
    with pytest.raises(ImportError, match=r"pip install 'rlrun\[vllm\]'"):
        make_engine("vllm", "unused", RolloutConfig(engine="vllm", num_gpus=1), "bfloat16")
