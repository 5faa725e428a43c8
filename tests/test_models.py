"""The tiny model (deterministic, cached, loadable by the Auto classes) and the load checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, ByT5Tokenizer, ViTConfig

from rlrun.config import ModelConfig, TinyModelConfig
from rlrun.models import (
    ModelLoadError,
    load_causal_lm,
    load_tokenizer,
    local_model,
    pretrained_config,
    resolve_model_path,
    state_dict_shapes,
    tiny_config,
)

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(tmp_path: Path, seed: int = 0, **fields) -> str:
    cfg = ModelConfig(tiny=TinyModelConfig(**{**SMALL.__dict__, **fields}))
    return resolve_model_path(cfg, str(tmp_path), seed=seed)


def weights(path: str) -> dict[str, torch.Tensor]:
    return load_causal_lm(path).state_dict()


def test_tiny_is_built_once_and_reused(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    stamp = (Path(path) / "model.safetensors").stat().st_mtime_ns
    assert tiny(tmp_path) == path
    assert (Path(path) / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [Path(path).name]  # no scratch left behind


def test_same_config_and_seed_give_the_same_weights(tmp_path: Path) -> None:
    a, b = weights(tiny(tmp_path / "a")), weights(tiny(tmp_path / "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other = weights(tiny(tmp_path / "c", seed=1))
    assert not torch.equal(a["model.layers.0.mlp.up_proj.weight"],
                           other["model.layers.0.mlp.up_proj.weight"])


def test_the_config_selects_the_directory_and_shapes(tmp_path: Path) -> None:
    narrow, wide = tiny(tmp_path), tiny(tmp_path, hidden_size=48, num_heads=3)
    assert narrow != wide
    model = AutoModelForCausalLM.from_pretrained(wide)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (48, 1)


def test_tiny_loads_back_with_the_auto_classes(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert isinstance(tokenizer, ByT5Tokenizer)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert state_dict_shapes(path) == {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_tiny_config_is_the_config_the_tiny_model_is_saved_with(tmp_path: Path) -> None:
    """`rlrun plan` sizes the tiny model from `tiny_config` without building it."""
    saved, planned = pretrained_config(tiny(tmp_path)), tiny_config(SMALL)
    for name in ("model_type", "vocab_size", "hidden_size", "intermediate_size", "head_dim",
                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "tie_word_embeddings", "max_position_embeddings", "attention_bias"):
        assert getattr(saved, name) == getattr(planned, name), name


def test_byte_tokenizer_round_trips_any_text(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tiny(tmp_path))
    text = "def f(x):\n\treturn `x` * 2  # ü, 数学, 🙂\n```python\nprint(1)\n```\n#### 42"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text
    assert tokenizer.padding_side == "left"


def test_tiny_refuses_a_separate_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="model.tokenizer='gpt2'.*model.path=tiny"):
        resolve_model_path(ModelConfig(tokenizer="gpt2"), str(tmp_path))


def test_tiny_heads_must_divide_the_width(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="model.tiny.hidden_size=30.*model.tiny.num_heads=4"):
        tiny(tmp_path, hidden_size=30, num_heads=4)


def test_a_real_directory_is_returned_unchanged(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    assert resolve_model_path(ModelConfig(path=path), str(tmp_path / "cache")) == path


def test_missing_local_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model.path='\./nope'.*does not exist"):
        resolve_model_path(ModelConfig(path="./nope"), str(tmp_path))


def test_directory_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="model.path=.*cannot load the config"):
        resolve_model_path(ModelConfig(path=str(tmp_path)), str(tmp_path))


def test_not_a_causal_lm(tmp_path: Path) -> None:
    ViTConfig().save_pretrained(tmp_path / "vit")
    with pytest.raises(ModelLoadError, match="'vit' model.*not a causal language model"):
        resolve_model_path(ModelConfig(path=str(tmp_path / "vit")), str(tmp_path))


def test_config_without_weights(tmp_path: Path) -> None:
    source = Path(tiny(tmp_path / "cache"))
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_bytes((source / "config.json").read_bytes())
    with pytest.raises(ModelLoadError, match="has a config but no weights"):
        resolve_model_path(ModelConfig(path=str(bare)), str(tmp_path))


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_weights_fail_before_anything_loads_them(tmp_path: Path, keep: float) -> None:
    """A weights file cut short (a full disk, an interrupted copy) is caught by the check that
    runs before Ray, not by every actor that later loads it."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny(tmp_path / "cache"), copy)
    weights = copy / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(int(weights.stat().st_size * keep))
    with pytest.raises(ModelLoadError, match="weights file model.safetensors is unreadable"):
        resolve_model_path(ModelConfig(path=str(copy)), str(tmp_path))


def test_missing_tokenizer_names_model_tokenizer(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    with pytest.raises(ModelLoadError, match=r"model.tokenizer='/no/such/tok'.*does not exist"):
        resolve_model_path(ModelConfig(path=path, tokenizer="/no/such/tok"), str(tmp_path))


def test_hub_id_offline_is_not_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="rlrun-test/absent.*HF_HUB_OFFLINE"):
        resolve_model_path(ModelConfig(path="rlrun-test/absent"), str(tmp_path))


def test_hub_id_with_an_unreachable_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(ModelLoadError, match=r"rlrun-test/absent.*127.0.0.1:9.*cannot be reached"):
        resolve_model_path(ModelConfig(path="rlrun-test/absent"), str(tmp_path))


def test_load_causal_lm_dtype(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    assert load_causal_lm(path, "bfloat16").dtype == torch.bfloat16
    assert not load_causal_lm(path).training
    with pytest.raises(ModelLoadError, match="model.dtype='fp8'"):
        load_causal_lm(path, "fp8")


def test_a_model_at_a_uri_is_fetched_once_per_content_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLRUN_CACHE", str(tmp_path / "cache"))
    built = Path(resolve_model_path(ModelConfig(tiny=SMALL), str(tmp_path / "build")))
    uri = built.as_uri()  # file://...: any URI pyarrow reads, as s3:// is on a cluster
    local = local_model(uri)
    assert Path(local).parent == tmp_path / "cache" and local != str(built)
    assert local_model(uri) == local  # fetched once
    assert local_model(str(built)) == str(built)  # a path stays a path
    assert load_causal_lm(uri).config.hidden_size == 32 and load_tokenizer(uri) is not None
    (built / "config.json").write_text((built / "config.json").read_text() + "\n")
    assert local_model(uri) != local  # rewritten at the same URI: fetched again
    with pytest.raises(ModelLoadError, match="cannot be listed"):
        local_model((tmp_path / "missing").as_uri())
    (tmp_path / "empty").mkdir()  # what S3 shows for a prefix nothing was written to
    with pytest.raises(ModelLoadError, match="nothing is stored there"):
        local_model((tmp_path / "empty").as_uri())
