import pytest
import torch
from transformers import AutoModelForCausalLM

from rlrun import checkpoint
from rlrun.config import ModelConfig
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path
from rlrun.policy_update import warmup_schedule


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("models")))


def trained(path: str):
    model = load_causal_lm(path)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = warmup_schedule(opt, 3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def test_round_trip_restores_weights_optimizer_state_and_rng(tiny_path, tmp_path):
    model, opt, sched = trained(tiny_path)
    state = checkpoint.TrainState(step=7, version=7, data_position=56, bad_steps=1)
    torch.manual_seed(123)
    checkpoint.save(tmp_path, model, load_tokenizer(tiny_path), opt, sched, state)
    expected_draw = torch.rand(3)

    fresh = load_causal_lm(tiny_path)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_sched = warmup_schedule(fresh_opt, 3)
    assert checkpoint.load_into(tmp_path, fresh, fresh_opt, fresh_sched) == state
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert fresh_opt.state_dict()["state"][0]["step"] == 1
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    torch.testing.assert_close(torch.rand(3), expected_draw)


def test_the_model_directory_loads_with_plain_transformers(tiny_path, tmp_path):
    model, opt, sched = trained(tiny_path)
    checkpoint.save(tmp_path, model, load_tokenizer(tiny_path), opt, sched, checkpoint.TrainState())
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_latest_and_has_checkpoints(tiny_path, tmp_path):
    assert not checkpoint.has_checkpoints(str(tmp_path))
    assert checkpoint.latest_checkpoint(str(tmp_path)) is None
    model, opt, sched = trained(tiny_path)
    tok = load_tokenizer(tiny_path)
    for step in (2, 10):
        d = tmp_path / checkpoint.LEARNER_DIR / checkpoint.checkpoint_dir_name(step)
        checkpoint.save(d, model, tok, opt, sched, checkpoint.TrainState(step=step))
    (tmp_path / checkpoint.LEARNER_DIR / checkpoint.SNAPSHOT).write_text("{}")
    assert checkpoint.has_checkpoints(str(tmp_path))
    assert checkpoint.latest_checkpoint(str(tmp_path)).name == "step_000010"
