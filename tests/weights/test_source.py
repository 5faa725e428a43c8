"""The weight source: names, order, dtype, and LoRA adapters merged the way PEFT merges them."""

import copy

import pytest
import torch

from rlrun.config import ModelConfig
from rlrun.models import load_causal_lm, resolve_model_path
from rlrun.weights.source import WeightSource, plain_name


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("m")))


def test_every_weight_under_its_hf_name_cast_to_the_engine_dtype(tiny):
    model = load_causal_lm(tiny)
    source = WeightSource(model, torch.bfloat16)
    got = list(source)
    assert [n for n, _ in got] == list(model.state_dict())
    assert [(m.name, m.shape) for m in source.metadata()] == [(n, tuple(t.shape)) for n, t in got]
    assert {t.dtype for _, t in got} == {torch.bfloat16}
    for (_, t), ref in zip(got, model.state_dict().values(), strict=True):
        assert torch.equal(t, ref.to(torch.bfloat16))


def test_wrapper_prefixes_are_dropped():
    assert plain_name("module._orig_mod.model.embed_tokens.weight") == "model.embed_tokens.weight"


def test_lora_adapters_arrive_merged_as_peft_merges_them(tiny):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_causal_lm(tiny), LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():  # lora_B starts at zero: give the adapters something to merge
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    source = WeightSource(model, torch.float32)
    got = dict(source)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    assert list(got) == list(expected)
    assert [m.name for m in source.metadata()] == list(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-6, atol=1e-6, msg=name)
    base = load_causal_lm(tiny).state_dict()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(got[q], base[q])  # the adapter really moved it
