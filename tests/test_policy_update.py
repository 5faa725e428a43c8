import dataclasses
import math

import pytest
import torch

from rlrun import batching
from rlrun.config import ModelConfig, load_config
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path
from rlrun.policy_update import collate, response_logprobs, train_on_shard, warmup_schedule


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("models")))


def shard(advantages: list[float], cfg) -> batching.Shard:
    samples = [
        batching.TrainSample([40 + i, 41, 42], [50 + i, 51, 52 + i][: 2 + i % 2], [0.0] * 3, a)
        for i, a in enumerate(advantages)
    ]
    return batching.make_shards(
        samples, step=0, world_size=1, epochs=cfg.algo.epochs, mini_batches=cfg.algo.mini_batches,
        max_len=8, seed=0,
    )[0]


def setup(path: str, cfg):
    model = load_causal_lm(path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learner.lr)
    return model, optimizer, warmup_schedule(optimizer, cfg.learner.warmup_steps)


def test_logprobs_pick_the_response_tokens(tiny_path):
    model = load_causal_lm(tiny_path)
    sample = batching.TrainSample([40, 41, 42], [50, 51], [0.0, 0.0], 1.0)
    batch = collate([sample], pad_id=0)
    logp, _ = response_logprobs(model, batch, temperature=1.0)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[40, 41, 42, 50, 51]])).logits[0]
    expected = torch.log_softmax(logits, -1)[[2, 3], [50, 51]]
    torch.testing.assert_close(logp[0].detach(), expected)


def test_a_step_changes_the_weights_and_reports_metrics(tiny_path):
    cfg = load_config(None, ["learner.lr=1e-2", "algo.is_correction=none", "algo.mini_batches=2"])
    model, opt, sched = setup(tiny_path, cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pad = load_tokenizer(tiny_path).pad_token_id
    metrics = train_on_shard(model, opt, sched, shard([1.0, -1.0, 0.5, -0.5], cfg), cfg, pad)
    assert metrics["train/bad_steps"] == 0
    assert math.isfinite(metrics["optim/grad_norm"]) and metrics["optim/grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # Entropy is reported without an entropy term in the loss (algo.entropy_coef=0).
    assert 0 < metrics["loss/entropy"] <= math.log(model.config.vocab_size)


def test_a_non_finite_update_is_skipped_and_counted(tiny_path):
    cfg = load_config(None, ["algo.is_correction=none"])
    model, opt, sched = setup(tiny_path, cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pad = load_tokenizer(tiny_path).pad_token_id
    metrics = train_on_shard(model, opt, sched, shard([math.nan, 1.0], cfg), cfg, pad)
    assert metrics["train/bad_steps"] == 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_warmup_is_linear_then_flat():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_schedule(opt, 4)
    lrs = []
    for _ in range(6):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_single_update_takes_pi_old_from_its_own_forward_pass(tiny_path):
    """One update per batch reuses its forward pass as pi_old; the step equals the textbook one
    where pi_old comes from a separate no-grad pass."""
    from rlrun.algo import grpo_loss

    cfg = load_config(None, ["learner.lr=1e-2", "algo.is_correction=none"])
    pad = load_tokenizer(tiny_path).pad_token_id
    work = shard([1.0, -1.0, 0.5, -0.5], cfg)
    assert len(work) == 1
    model, opt, sched = setup(tiny_path, cfg)
    train_on_shard(model, opt, sched, work, cfg, pad)

    ref, ref_opt, _ = setup(tiny_path, cfg)
    update = work[0]
    batch = collate(update.samples, pad)
    with torch.no_grad():
        old, _ = response_logprobs(ref, batch, temperature=1.0)
    ref.train()
    logp, _ = response_logprobs(ref, batch, temperature=1.0)
    loss, _ = grpo_loss(logp, old, batch.advantages, batch.mask, cfg.algo, update.norm)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(ref.parameters()), cfg.learner.grad_clip)
    ref_opt.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_fixed_logprobs_run_each_sample_once_across_epochs(tiny_path):
    """pi_old (and the reference) go through the model once per distinct sample; every later
    epoch's micro-batches get the same rows a separate forward pass would give them."""
    from rlrun.policy_update import _fixed_logprobs, _stack_rows

    cfg = load_config(None, ["algo.epochs=3", "algo.mini_batches=2",
                             "learner.micro_batch_size=2"])
    work = shard([1.0, -1.0, 0.5, -0.5, 0.25, -0.25], cfg)
    assert len(work) == 6
    model = load_causal_lm(tiny_path)
    pad = load_tokenizer(tiny_path).pad_token_id
    calls = []
    hook = model.register_forward_hook(lambda mod, args, out: calls.append(1))
    fixed = _fixed_logprobs(model, work, cfg, pad, "cpu")
    hook.remove()
    assert len(calls) == 3  # 6 distinct samples in micro-batches of 2
    for update in work:
        for i in range(0, len(update.samples), 2):
            samples = update.samples[i : i + 2]
            with torch.no_grad():
                own, _ = response_logprobs(model, collate(samples, pad), 1.0)
            torch.testing.assert_close(_stack_rows(fixed, samples, "cpu"), own)


def test_first_update_gives_pi_old_of_its_samples(tiny_path):
    """The no-grad pi_old pass skips the first update's samples (that update's own forward pass
    is pi_old for them); the step equals the textbook one, where a no-grad pass over every
    micro-batch fixes pi_old before any update."""
    from rlrun.algo import grpo_loss

    cfg = load_config(None, ["learner.lr=1e-2", "algo.epochs=2", "algo.mini_batches=2",
                             "learner.micro_batch_size=2", "learner.grad_clip=0"])
    pad = load_tokenizer(tiny_path).pad_token_id
    work = shard([1.0, -1.0, 0.5, -0.5, 0.25, -0.75, 2.0, -2.0], cfg)
    model, opt, sched = setup(tiny_path, cfg)
    rows = []
    hook = model.register_forward_hook(
        lambda mod, args, out: rows.append(None) if not torch.is_grad_enabled() else None
    )
    train_on_shard(model, opt, sched, work, cfg, pad)
    hook.remove()
    assert len(rows) == 2  # the second mini-batch's 4 samples, in micro-batches of 2

    ref, ref_opt, ref_sched = setup(tiny_path, cfg)
    ref.train()
    micro = [[collate(u.samples[i : i + 2], pad) for i in range(0, len(u.samples), 2)]
             for u in work]
    with torch.no_grad():
        old = [[response_logprobs(ref, b, 1.0)[0] for b in batches] for batches in micro]
    for u, update in enumerate(work):
        ref_opt.zero_grad()
        for m, batch in enumerate(micro[u]):
            logp, _ = response_logprobs(ref, batch, temperature=1.0)
            loss, _ = grpo_loss(logp, old[u][m], batch.advantages, batch.mask, cfg.algo,
                                update.norm, behaviour_logprobs=batch.behaviour_logprobs)
            loss.backward()
        ref_opt.step()
        ref_sched.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def groups_of(prompts: list[list[int]], lengths: list[list[int]]) -> list[batching.TrainSample]:
    """Samples answering `prompts[g]` with responses of `lengths[g]` tokens, interleaved so
    that responses to one prompt are not next to each other."""
    samples = []
    for g, (prompt, lens) in enumerate(zip(prompts, lengths, strict=True)):
        for k, n in enumerate(lens):
            response = [(60 + 7 * g + 3 * k + j) % 250 + 3 for j in range(n)]
            samples.append(batching.TrainSample(prompt, response, [0.0] * n, 0.5 - k % 2))
    return samples[::2] + samples[1::2]


SHARED = groups_of(
    [[40, 41, 42, 43, 44], [70, 71], [90, 91, 92, 93, 94, 95, 96, 97]],
    [[3, 1, 6, 2], [9, 9, 9, 9, 9], [2, 0, 4]],
)


def test_shared_prompt_rows_hold_each_prompt_once(tiny_path):
    batch = collate(SHARED, pad_id=0, share_prompts=True)
    plain = collate(SHARED, pad_id=0)
    assert plain.input_ids.shape[0] == len(SHARED)
    # A row holds at most twice the longest plain row (8 + 4 tokens): two of prompt 1's
    # 9-token responses fit in one, so its five take three rows; the other prompts take one each.
    assert batch.input_ids.shape[0] == 5
    assert batch.attention_mask.shape == (5, 1, batch.input_ids.shape[1], batch.input_ids.shape[1])
    torch.testing.assert_close(batch.response_ids, plain.response_ids)
    torch.testing.assert_close(batch.mask, plain.mask)


def test_shared_prompt_rows_give_the_plain_log_probs_and_gradients(tiny_path):
    model = load_causal_lm(tiny_path)
    plain, _ = response_logprobs(model, collate(SHARED, pad_id=0), temperature=0.7)
    shared, _ = response_logprobs(
        model, collate(SHARED, pad_id=0, share_prompts=True), temperature=0.7
    )
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-5)
    params = list(model.parameters())
    weights = torch.linspace(-1, 1, plain.numel()).view_as(plain)
    plain_grads = torch.autograd.grad((plain * weights).sum(), params)
    shared_grads = torch.autograd.grad((shared * weights).sum(), params)
    for a, b in zip(shared_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("share", [True, False])
def test_shared_prompt_forward_takes_the_same_step(tiny_path, share):
    cfg = load_config(None, ["learner.lr=1e-2", "algo.mini_batches=2", "algo.epochs=2",
                             "learner.micro_batch_size=4"])
    pad = load_tokenizer(tiny_path).pad_token_id
    work = batching.make_shards(
        SHARED, step=0, world_size=1, epochs=2, mini_batches=2, max_len=9, seed=0,
    )[0]
    start = load_causal_lm(tiny_path).state_dict()
    models = []
    for flag in (share, False):
        cfg.learner.shared_prompt_forward = flag
        model, opt, sched = setup(tiny_path, cfg)
        train_on_shard(model, opt, sched, work, cfg, pad)
        models.append(model)
    moved = max((v - start[k]).abs().max().item() for k, v in models[1].state_dict().items())
    assert moved > 1e-2  # four Adam updates at lr 1e-2: the tolerance below is far under a step
    for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_attention_without_block_masks_falls_back_to_plain_rows(tiny_path):
    from rlrun.policy_update import shares_prompts

    cfg = load_config(None, [])
    model = load_causal_lm(tiny_path)
    assert shares_prompts(model, cfg)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.warns(UserWarning, match="learner.shared_prompt_forward=false"):
        assert not shares_prompts(model, cfg)
    cfg.learner.shared_prompt_forward = False
    assert not shares_prompts(model, cfg)


def test_collate_makes_token_advantages_only_when_a_sample_has_them():
    plain = [batching.TrainSample([1], [5, 6], [0.0] * 2, 0.5),
             batching.TrainSample([1], [7], [0.0], -1.0)]
    assert collate(plain, pad_id=0).token_advantages is None
    stepped = [plain[0], batching.TrainSample([1], [7], [0.0], -1.0, token_advantages=[-1.5])]
    batch = collate(stepped, pad_id=0)
    # a sample without its own repeats its advantage; padding is 0
    assert batch.token_advantages.tolist() == [[0.5, 0.5], [-1.5, 0.0]]
    assert batch.advantages.tolist() == [0.5, -1.0]


def test_token_advantages_equal_to_the_advantage_train_exactly_as_without(tiny_path):
    cfg = load_config(None, ["learner.lr=1e-2", "algo.is_correction=none"])
    pad = load_tokenizer(tiny_path).pad_token_id
    states = []
    for with_tokens in (False, True):
        torch.manual_seed(0)
        model, opt, sched = setup(tiny_path, cfg)
        work = shard([1.0, -1.0, 0.5, -0.5], cfg)
        for update in work:
            for s in update.samples:
                s.token_advantages = [s.advantage] * len(s.response_ids) if with_tokens else None
        train_on_shard(model, opt, sched, work, cfg, pad)
        states.append(model.state_dict())
    for k, v in states[0].items():
        torch.testing.assert_close(states[1][k], v, rtol=0, atol=1e-7)


def trajectories() -> tuple[list[batching.TrainSample], list[batching.TrainSample]]:
    """Four two-turn trajectories (a model turn, an observation, a model turn; two per
    prompt), and the same as eight single-turn samples: each turn answering everything before
    it. Observation tokens have behaviour log-prob 0 and absurd step advantages."""
    gen = torch.Generator().manual_seed(1)
    whole, turns = [], []
    for i in range(4):
        prompt = [40 + i // 2, 41, 42]
        first, observation, second = ([int(t) for t in torch.randint(3, 250, (n,), generator=gen)]
                                      for n in (3 + i % 2, 2 + i % 3, 2 + i // 2))
        advantage = [1.0, -0.5, 0.75, -1.25][i]
        behaviour = [(-5.5 + 0.5 * torch.randn(len(t), generator=gen)).tolist()
                     for t in (first, second)]
        steps = [(advantage + 0.3 * torch.randn(len(t), generator=gen)).tolist()
                 for t in (first, second)]
        whole.append(batching.TrainSample(
            prompt, first + observation + second,
            behaviour[0] + [0.0] * len(observation) + behaviour[1], advantage,
            token_advantages=steps[0] + [50.0] * len(observation) + steps[1],
            env_mask=[1] * len(first) + [0] * len(observation) + [1] * len(second)))
        turns += [batching.TrainSample(prompt, first, behaviour[0], advantage,
                                       token_advantages=steps[0]),
                  batching.TrainSample(prompt + first + observation, second, behaviour[1],
                                       advantage, token_advantages=steps[1])]
    return whole, turns


@pytest.mark.parametrize("share", [True, False])
def test_a_trajectory_trains_as_its_turns_would(tiny_path, share):
    """Under token_mean with per-token ratios each model token's loss depends only on its own
    log-probs and the global count of model tokens, so a trajectory with its observations
    masked is the same objective as its turns trained as separate samples, each with the
    context before it as its prompt: the same update and the same loss metrics. Observation
    tokens leaking into the loss, the token count or the entropy quantile would break it."""
    cfg = load_config(None, [
        "algo.loss_agg=token_mean", "algo.epochs=2", "algo.kl_coef=0.1", "algo.entropy_coef=0.01",
        "algo.entropy_mask_quantile=0.5", "algo.is_correction=token", "learner.grad_clip=0",
        "learner.micro_batch_size=3", f"learner.shared_prompt_forward={str(share).lower()}",
    ])
    pad = load_tokenizer(tiny_path).pad_token_id
    start = load_causal_lm(tiny_path).state_dict()
    states, metrics = [], []
    for samples in trajectories():
        work = batching.make_shards(samples, step=0, world_size=1, epochs=2, mini_batches=1,
                                    max_len=16, seed=0)[0]
        model = load_causal_lm(tiny_path)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics.append(train_on_shard(model, opt, warmup_schedule(opt, 0), work, cfg, pad,
                                      ref_model=load_causal_lm(tiny_path)))
        states.append(model.state_dict())
    assert metrics[0]["loss/clip_frac"] > 0  # the second epoch's ratios move off 1
    for key, value in metrics[1].items():
        if key.startswith("loss/"):
            assert metrics[0][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    moved = max((v - start[k]).abs().max().item() for k, v in states[1].items())
    assert moved > 1e-3
    # With lr=1 a weight moves by up to `moved` (about 5): float32 rounding of steps that size
    # differs with the order of the sums (an AVX-512 CPU gives 1.2e-5 where others gave under
    # 1e-6), so the bound scales with the step. A leaked observation token moves weights by
    # as much as the step itself.
    for key, value in states[1].items():
        torch.testing.assert_close(states[0][key], value, rtol=1e-4, atol=1e-5 * moved, msg=key)


LOSS_MODES = {
    "gspo_sequence_is_off_policy": [
        "algo.ratio_level=sequence", "algo.loss_agg=seq_mean_token_mean",
        "algo.is_correction=sequence", "algo.off_policy_mask_threshold=0.01", "algo.kl_coef=0.1",
        "algo.entropy_coef=0.01"],
    "vespo_entropy_mask_dr_grpo": [
        "algo.policy_loss=vespo", "algo.entropy_mask_quantile=0.5", "algo.entropy_coef=0.01",
        "algo.loss_agg=seq_mean_token_sum_norm"],
    "cispo_token_is_luspo": [
        "algo.policy_loss=cispo", "algo.is_correction=token", "algo.kl_coef=0.1",
        "algo.loss_agg=seq_mean_token_sum"],
}


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_observation_tokens_get_no_gradient(tiny_path, mode, share):
    """The logits that predict an observation token get exactly zero gradient, whatever the
    loss; those of the model's tokens do get one (the ones the entropy mask keeps)."""
    cfg = load_config(None, [*LOSS_MODES[mode], "learner.micro_batch_size=8",
                             f"learner.shared_prompt_forward={str(share).lower()}"])
    pad = load_tokenizer(tiny_path).pad_token_id
    samples, _ = trajectories()
    [update] = batching.make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                                    max_len=16, seed=0)[0]
    model = load_causal_lm(tiny_path)
    grads = []

    def keep_logits_grad(module, args, output):
        if torch.is_grad_enabled():
            output.logits.register_hook(lambda g: grads.append(g.clone()))

    model.register_forward_hook(keep_logits_grad)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    train_on_shard(model, opt, warmup_schedule(opt, 0), [update], cfg, pad,
                   ref_model=load_causal_lm(tiny_path) if cfg.algo.kl_coef else None)
    [grad] = grads  # [R, T, V]: the one micro-batch's forward with gradient
    batch = collate(update.samples, pad, share_prompts=share)
    env = torch.full(batch.response_ids.shape, -1)  # [N, L]: -1 on padding
    for i, s in enumerate(update.samples):
        env[i, : len(s.env_mask)] = torch.tensor(s.env_mask)
    predicting = grad[batch.rows.unsqueeze(-1).expand_as(env), batch.response_index]  # [N, L, V]
    assert predicting[env == 0].abs().sum() == 0
    assert predicting[env == 1].abs().sum() > 0


def test_an_empty_env_mask_trains_bit_for_bit_as_an_all_ones_one(tiny_path):
    cfg = load_config(None, ["algo.epochs=2", "algo.mini_batches=2", "algo.kl_coef=0.1",
                             "algo.entropy_coef=0.01", "algo.entropy_mask_quantile=0.5",
                             "learner.micro_batch_size=2"])
    pad = load_tokenizer(tiny_path).pad_token_id
    _, samples = trajectories()
    states, metrics = [], []
    for ones in (False, True):
        work = batching.make_shards(
            [dataclasses.replace(s, engine=0, env_mask=[1] * len(s.response_ids) if ones else [])
             for s in samples],
            step=0, world_size=1, epochs=2, mini_batches=2, max_len=16, seed=0)[0]
        model, opt, sched = setup(tiny_path, cfg)
        metrics.append(train_on_shard(model, opt, sched, work, cfg, pad,
                                      ref_model=load_causal_lm(tiny_path)))
        states.append(model.state_dict())
    assert metrics[0] == metrics[1]
    assert "sync/logprob_gap_max/0" in metrics[0]
    for key, value in states[1].items():
        assert torch.equal(states[0][key], value), key
