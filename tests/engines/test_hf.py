"""The transformers engine's own pieces: token sampling filters, the stop-string rule, batching."""

from __future__ import annotations

import math

import pytest
import torch

from rlrun.config import RolloutConfig
from rlrun.engines import SamplingParams, make_engine
from rlrun.engines.base import first_stop
from rlrun.engines.hf import sample_tokens

# One row, four tokens with probabilities 0.4, 0.3, 0.2, 0.1 at temperature 1.
PROBS = torch.tensor([0.4, 0.3, 0.2, 0.1])


def draw(sampling: SamplingParams, rows: int = 2000) -> tuple[torch.Tensor, torch.Tensor]:
    logits = PROBS.log().repeat(rows, 1)  # [rows, 4]
    return sample_tokens(logits, sampling, torch.Generator().manual_seed(0))


def test_top_p_keeps_the_smallest_set_reaching_the_mass() -> None:
    # Mass before each token: 0, 0.4, 0.7, 0.9 -> top_p=0.5 keeps tokens 0 and 1.
    tokens, _ = draw(SamplingParams(top_p=0.5))
    assert set(tokens.tolist()) == {0, 1}
    tokens, _ = draw(SamplingParams(top_p=1e-6))
    assert set(tokens.tolist()) == {0}


def test_top_k_keeps_the_k_most_likely() -> None:
    tokens, _ = draw(SamplingParams(top_k=3))
    assert set(tokens.tolist()) == {0, 1, 2}


def test_filters_shape_the_draw_but_not_the_reported_logprob() -> None:
    sampling = SamplingParams(temperature=2.0, top_k=2, top_p=0.9)
    tokens, logprobs = draw(sampling)
    full = torch.log_softmax(PROBS.log() / 2.0, dim=-1)  # no renormalisation over the kept 2
    torch.testing.assert_close(logprobs, full[tokens])


def test_temperature_one_draws_the_model_distribution() -> None:
    tokens, logprobs = draw(SamplingParams(), rows=20000)
    freq = torch.bincount(tokens, minlength=4) / tokens.numel()
    torch.testing.assert_close(freq, PROBS, atol=0.02, rtol=0)
    torch.testing.assert_close(logprobs, PROBS.log()[tokens])


def test_greedy_reports_temperature_one_logprobs() -> None:
    tokens, logprobs = draw(SamplingParams(temperature=0.0), rows=3)
    assert tokens.tolist() == [0, 0, 0]
    assert logprobs.tolist() == pytest.approx([math.log(0.4)] * 3)


@pytest.mark.parametrize(
    ("text", "stops", "cut"),
    [
        ("hello world", ["o w"], 4),
        ("hello world", ["zz", "wor", "llo"], 2),  # "llo" ends first
        ("abcxyz", ["yz", "xyz"], 4),  # both end together: the first listed wins, as in vLLM
        ("abc", ["d"], None),
    ],
)
def test_first_stop(text: str, stops: list[str], cut: int | None) -> None:
    assert first_stop(text, stops) == cut


@pytest.mark.parametrize(
    ("text", "stops", "cut"),
    [
        ("hello world", ["o w"], 7),
        ("abcxyz", ["yz", "xyz"], 6),
        ("abc", ["d"], None),
    ],
)
def test_first_stop_keeping_the_stop_string(text: str, stops: list[str], cut: int | None) -> None:
    assert first_stop(text, stops, include=True) == cut


def test_results_do_not_depend_on_how_rows_are_batched(tiny_path: str) -> None:
    prompts = ["a", "a much longer prompt than the others\n", "mid length", "```py\n"]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8, n=2)
    small = make_engine("hf", tiny_path, RolloutConfig(batch_size=3), "float32")
    large = make_engine("hf", tiny_path, RolloutConfig(batch_size=64), "float32")
    a, b = small.generate(prompts, greedy), large.generate(prompts, greedy)
    assert [[c.response_ids for c in g] for g in a] == [[c.response_ids for c in g] for g in b]
    for ga, gb in zip(a, b, strict=True):
        for ca, cb in zip(ga, gb, strict=True):
            assert ca.behaviour_logprobs == pytest.approx(cb.behaviour_logprobs, abs=1e-5)


def test_load_weights_accepts_bfloat16_from_the_learner(tiny_path: str) -> None:
    engine = make_engine("hf", tiny_path, RolloutConfig(), "float32")
    rounded = {k: v.to(torch.bfloat16) for k, v in engine.model.state_dict().items()}
    engine.load_weights(3, rounded)
    assert engine.version == 3
    for name, tensor in engine.model.state_dict().items():
        assert tensor.dtype == torch.float32
        torch.testing.assert_close(tensor, rounded[name].float(), atol=0, rtol=0)
