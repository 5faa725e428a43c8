import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlrun import checkpoint
from rlrun.config import ModelConfig
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path
from rlrun.policy_update import warmup_schedule
from rlrun.weights.source import WeightSource


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


def save(path, model, opt, sched, state, tokenizer) -> None:
    checkpoint.save_shards(path, model, opt, rank=0)
    checkpoint.export_hf(path / "model", model, dict(WeightSource(model, torch.float32)),
                         tokenizer)
    checkpoint.save_state(path, state, sched)


def test_round_trip_restores_weights_optimizer_state_and_rng(tiny_path, tmp_path):
    model, opt, sched = trained(tiny_path)
    state = checkpoint.TrainState(step=7, version=7, data_position=56, bad_steps=1)
    torch.manual_seed(123)
    save(tmp_path, model, opt, sched, state, load_tokenizer(tiny_path))
    expected_draw = torch.rand(3)

    fresh = load_causal_lm(tiny_path)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_sched = warmup_schedule(fresh_opt, 3)
    assert checkpoint.load_shards(tmp_path, fresh, fresh_opt, fresh_sched, rank=0) == state
    assert checkpoint.load_state(tmp_path) == state
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    restored = fresh_opt.state_dict()["state"]
    assert restored[0]["step"] == 1
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(restored[0][key], opt.state_dict()["state"][0][key])
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    torch.testing.assert_close(torch.rand(3), expected_draw)


def test_the_model_directory_loads_with_plain_transformers(tiny_path, tmp_path):
    model, opt, sched = trained(tiny_path)
    save(tmp_path, model, opt, sched, checkpoint.TrainState(), load_tokenizer(tiny_path))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_only_recorded_checkpoints_count_and_old_ones_go(tiny_path, tmp_path):
    out = str(tmp_path)
    assert not checkpoint.has_checkpoints(out)
    assert checkpoint.latest_checkpoint(out) is None
    model, opt, sched = trained(tiny_path)
    tok = load_tokenizer(tiny_path)
    for step in (2, 10, 12):
        d = tmp_path / checkpoint.LEARNER_DIR / checkpoint.checkpoint_dir_name(step)
        save(d, model, opt, sched, checkpoint.TrainState(step=step), tok)
        if step != 12:  # step 12 was being written when the run died
            checkpoint.record(out, step, keep=1)
    assert checkpoint.has_checkpoints(out)
    assert checkpoint.latest_checkpoint(out) == str(tmp_path / "learner" / "step_000010")
    assert not (tmp_path / "learner" / "step_000002").exists()  # keep=1
    record = json.loads((tmp_path / "learner" / checkpoint.RECORD).read_text())
    assert record == {"checkpoints": ["step_000010"]}


def test_a_recorded_checkpoint_with_a_broken_state_is_passed_over(tiny_path, tmp_path, capsys):
    """A full disk that the file system reports late leaves a recorded checkpoint with an empty
    or cut-short state.json: resume and `rlrun eval RUN` take the one before it."""
    out = str(tmp_path)
    model, opt, sched = trained(tiny_path)
    tok = load_tokenizer(tiny_path)
    for step in (4, 6):
        d = tmp_path / checkpoint.LEARNER_DIR / checkpoint.checkpoint_dir_name(step)
        save(d, model, opt, sched, checkpoint.TrainState(step=step), tok)
        checkpoint.record(out, step, keep=2)
    newest = tmp_path / "learner" / "step_000006" / "state.json"
    for broken in ("", newest.read_text()[:20]):
        newest.write_text(broken)
        assert checkpoint.latest_checkpoint(out) == str(tmp_path / "learner" / "step_000004")
        assert "step_000006 has no readable state.json" in capsys.readouterr().err
    (tmp_path / "learner" / "step_000004" / "state.json").write_text("")
    assert checkpoint.latest_checkpoint(out) is None


def test_uri_and_local_paths_join_the_same_way():
    assert checkpoint.join("s3://bucket/run/", "learner", "step_000001") == (
        "s3://bucket/run/learner/step_000001"
    )
    assert checkpoint.join("/tmp/run", "learner") == "/tmp/run/learner"
