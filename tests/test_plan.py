"""The memory planner (`rlrun.plan`, `rlrun plan`): hand-checked numbers for Qwen2.5-7B against
an audit of its GPU memory under vLLM (weights, KV cache bytes per token, KV cache sizes), the
fit verdicts, the suggested overrides really fitting, and the command line. Arithmetic on model
configs: no weights, no Ray."""

from __future__ import annotations

import json

import pytest

from rlrun.cli import main
from rlrun.config import load_config
from rlrun.models import ModelLoadError
from rlrun.plan import (
    GIB,
    LEARNER_OVERHEAD,
    ModelShape,
    check_fits,
    estimate,
    format_plan,
    gpu_from_name,
    load_model_config,
    shipped_config,
    suggest,
)

Q7B = "Qwen/Qwen2.5-7B-Instruct"
# A 7B GPU run: bf16 compute, fp32 masters (the default), 512-token prompts + 1024 new tokens.
GPU_7B = [
    f"model.path={Q7B}", "model.dtype=bfloat16", "rollout.engine=vllm", "rollout.num_gpus=1",
    "learner.num_gpus=1", "rollout.sampling.max_new_tokens=1024", "learner.micro_batch_size=2",
]


# Eight GPUs, each holding one learner rank and one vLLM engine.
COLOCATED_8 = ["placement.mode=colocated", "learner.num_workers=8", "rollout.num_actors=8",
               "learner.num_gpus=0.5", "rollout.num_gpus=0.5"]


def plan_7b(gpu: str | None, *overrides: str):
    cfg = load_config(None, [*GPU_7B, *overrides])
    return estimate(cfg, shipped_config(Q7B), gpu)


def shape_7b() -> ModelShape:
    return ModelShape.from_config(shipped_config(Q7B))


# --- the model's numbers ---------------------------------------------------------------------


def test_qwen7b_weights_and_kv_match_the_audit():
    shape = shape_7b()
    assert shape.params == 7_615_616_512  # the model card's 7.61 B
    assert shape.params * 2 / 1e9 == pytest.approx(15.2, abs=0.05)  # bf16 weights, GB
    assert shape.params * 2 / GIB == pytest.approx(14.2, abs=0.05)
    assert shape.kv_bytes_per_token(2, tp=1) == 56 * 1024
    assert shape.kv_bytes_per_token(2, tp=2) == 28 * 1024
    # 4 KV heads over 8 GPUs: vLLM replicates, so a GPU never holds less than one head.
    assert shape.kv_bytes_per_token(2, tp=8) == 14 * 1024


@pytest.mark.parametrize("repo,billions", [
    ("Qwen/Qwen2.5-0.5B-Instruct", 0.49), ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
    ("Qwen/Qwen2.5-14B-Instruct", 14.77), ("Qwen/Qwen2.5-Coder-7B-Instruct", 7.62),
    ("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1.54),
])
def test_shipped_configs_give_the_published_parameter_counts(repo, billions):
    assert ModelShape.from_config(shipped_config(repo)).params / 1e9 == pytest.approx(
        billions, abs=0.01)


def test_activation_formula_per_token_per_layer():
    # c*(2h + q + 2kv + q + 4I) + 2*(4h + c*h), bf16: 2*(7168 + 3584 + 1024 + 3584 + 75776)
    # + 2*(14336 + 7168).
    assert shape_7b().activation_bytes_per_token_layer(2) == 182_272 + 43_008


def test_tiny_model_config_matches_build_tiny_model():
    cfg = load_config("conf/demo.yaml")
    config, source = load_model_config(cfg.model)
    shape = ModelShape.from_config(config, source)
    assert (shape.vocab, shape.tied, shape.qk_norm, shape.qkv_bias) == (259, True, True, False)
    assert (shape.hidden, shape.layers, shape.heads, shape.kv_heads) == (64, 2, 4, 4)


# --- learner ---------------------------------------------------------------------------------


def test_7b_ddp_fp32_masters_does_not_fit_on_a10g_and_the_suggestion_does():
    plan = plan_7b("a10g")
    assert plan.learner.states / 1e9 == pytest.approx(121.8, abs=0.5)  # 16 B/param
    assert plan.fits is False and plan.learner.fits is False
    assert "learner.strategy=fsdp2" in plan.learner.problems[0]
    fix = suggest(load_config(None, GPU_7B), shipped_config(Q7B), "a10g")
    assert fix is not None and fix.plan.fits
    # The printed override line, applied to the config, really fits.
    assert plan_7b("a10g", *fix.line.split()).fits is True


def test_fsdp2_over_8_ranks_with_offload_and_checkpointing_fits_on_a10g():
    plan = plan_7b("a10g", "learner.strategy=fsdp2", "learner.num_workers=8",
                   "learner.cpu_offload=true", "learner.gradient_checkpointing=true")
    assert plan.learner.fits is True
    # The sharded states live in host memory: 16 B/param over 8 ranks.
    assert plan.learner.host / 1e9 == pytest.approx(121.8 / 8, abs=0.1)
    sharded = plan_7b("a10g", "learner.strategy=fsdp2", "learner.num_workers=8")
    assert sharded.learner.item("weights").nbytes == pytest.approx(plan.learner.host / 4)
    assert not sharded.learner.item("weights").host


def test_lora_fits_on_a10g_and_its_reference_costs_nothing():
    plan = plan_7b("a10g", "learner.lora.rank=16", "learner.gradient_checkpointing=true",
                   "algo.kl_coef=0.05")
    assert plan.learner.fits is True
    base = plan.learner.item("frozen base").nbytes
    assert base / 1e9 == pytest.approx(15.2, abs=0.05)  # bf16, not fp32
    assert not any(i.name == "reference model" for i in plan.learner.items)
    full = plan_7b("a10g", "algo.kl_coef=0.05", "learner.strategy=fsdp2", "learner.num_workers=4")
    assert full.learner.item("reference model").nbytes == pytest.approx(base / 4)


def test_checkpointing_and_micro_batch_shrink_activations():
    plain = plan_7b(None).learner.item("activations").nbytes
    ckpt = plan_7b(None, "learner.gradient_checkpointing=true").learner.item("activations").nbytes
    half = plan_7b(None, "learner.micro_batch_size=1").learner.item("activations").nbytes
    assert ckpt < plain / 5
    assert half == pytest.approx(plain / 2)
    capped = plan_7b(None, "learner.max_tokens_per_micro_batch=1536")
    assert capped.learner.tokens == 1536


def test_chunked_logprobs_are_reported_next_to_the_unchunked_cost():
    cfg = load_config(None, GPU_7B)
    chunked = estimate(cfg, shipped_config(Q7B), "a10g")
    full = estimate(cfg, shipped_config(Q7B), "a10g", chunked_logprobs=False)
    tokens, vocab, hidden, response = chunked.learner.tokens, 152_064, 3584, 2 * 1024
    assert tokens == 2 * 1536
    assert chunked.learner.unchunked_logprob_bytes == response * vocab * (2 + 12)
    assert full.learner.item("log-probs").nbytes == chunked.learner.unchunked_logprob_bytes
    # The one-pass learner keeps the bf16 lm_head output and a gradient of its size.
    assert full.learner.item("logits").nbytes == 2 * tokens * vocab * 2
    # 3072 x 152k logits are 1.7 GiB in the fp32 master dtype, over 256 MB: the selective output
    # layer, no logits; one recomputed chunk of 2**24 elements (110 positions) in bf16 + 3 fp32,
    # next to the bf16 [V, H] gradient of the chunks before it.
    assert chunked.learner.item("logits").nbytes == 0
    assert chunked.learner.item("log-probs").nbytes == 110 * vocab * (2 + 12) + vocab * hidden * 2
    assert "one pass over [N, L, V] would take" in format_plan(chunked)


# A Qwen3 small enough to count by hand: V = 2**16, so a chunk of 2**24 elements is 256 positions.
SMALL = {
    "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 65_536,
    "tie_word_embeddings": True,
}
# 64 prompt + 128 response tokens; plain rows, so a micro-batch of n is n x 192 positions.
SMALL_RUN = ["rollout.sampling.max_new_tokens=128", "learner.shared_prompt_forward=false"]


def plan_small(*overrides: str):
    return estimate(load_config(None, [*SMALL_RUN, *overrides]), SMALL, None,
                    prompt_tokens=64).learner


def test_full_logits_path_keeps_one_copy_of_the_logits():
    learner = plan_small("learner.micro_batch_size=2")
    # 384 x 65536 fp32 logits = 96 MiB, under 256 MB: the model computes them whole.
    assert learner.tokens == 384
    assert learner.item("logits").nbytes == 384 * 65_536 * 4 == 100_663_296
    assert "full-logits path" in learner.item("logits").detail
    # Backward of one chunk of the 256 response positions: 4 copies in fp32 + 3 fp32 temporaries.
    assert learner.item("log-probs").nbytes == 256 * 65_536 * (4 * 4 + 12) == 469_762_048
    # The output layer's [V, H] gradient comes after the chunk is freed; the tied embedding's
    # end-of-backward sum (3 x [V, H]) once the activations are gone.
    assert learner.item("output-layer gradient").nbytes == 65_536 * 128 * 4 == 33_554_432
    assert learner.item("embedding gradient").nbytes == 3 * 33_554_432
    # The log-prob backward is the peak: its items are counted, the other phases' shown only.
    assert learner.item("output-layer gradient").info
    assert learner.item("embedding gradient").info
    assert not learner.item("log-probs").info and not learner.item("activations").info
    states = 4 * 4 * ModelShape.from_config(SMALL).params
    assert learner.total == pytest.approx(
        states + learner.item("activations").nbytes + 100_663_296 + 469_762_048)


def test_selective_path_has_no_logits_and_sums_the_head_gradient():
    learner = plan_small("learner.micro_batch_size=8")
    # 1536 x 65536 fp32 logits = 384 MiB, over 256 MB: the output layer runs on the response
    # positions only, 256 at a time.
    assert learner.tokens == 1536
    assert learner.item("logits").nbytes == 0
    assert "selective output layer" in learner.item("logits").detail
    # A recomputed chunk (fp32 logits + 3 fp32 temporaries) next to the gradient so far.
    assert learner.item("log-probs").nbytes == 256 * 65_536 * (4 + 12) + 33_554_432
    # Each chunk's [V, H] gradient summed out of place: buffer + part + sum. At hidden 128 that
    # is less than a chunk's temporaries: the log-prob backward is the peak.
    assert learner.item("output-layer gradient").nbytes == 3 * 33_554_432
    assert learner.item("output-layer gradient").info and not learner.item("log-probs").info


def test_the_path_is_chosen_on_the_master_dtype_and_autocast_adds_a_cast():
    # bf16 compute over fp32 masters: the same 1536 positions are 192 MiB of bf16 logits, but
    # response_logprobs sizes them in the output layer's (fp32) weight dtype: 384 MiB, selective.
    learner = plan_small("learner.micro_batch_size=8", "model.dtype=bfloat16")
    assert learner.item("logits").nbytes == 0
    vh = 65_536 * 128
    # bf16 parts summed (3 x 2 bytes), or the bf16 sum next to its fp32 cast (2 + 4): 6 either way.
    assert learner.item("output-layer gradient").nbytes == 6 * vh
    # Under LoRA the base (and its output layer) is frozen: no weight gradients; the path is
    # chosen on the bf16 base: 192 MiB, full logits.
    lora = plan_small("learner.micro_batch_size=8", "model.dtype=bfloat16", "learner.lora.rank=8")
    assert lora.item("logits").nbytes == 1536 * 65_536 * 2
    assert lora.item("output-layer gradient").nbytes == 0
    assert lora.item("embedding gradient").nbytes == 0


def test_the_log_prob_path_is_the_learners_own(monkeypatch):
    """The planner reads response_logprobs' threshold and chunk size where the learner keeps
    them, so the two cannot drift apart."""
    from rlrun import policy_update

    monkeypatch.setattr(policy_update, "_FULL_LOGITS_BYTES", 0)
    monkeypatch.setattr(policy_update, "_LOGPROB_CHUNK_ELEMENTS", 64 * 65_536)
    learner = plan_small("learner.micro_batch_size=2")
    assert learner.item("logits").nbytes == 0
    assert "recomputed [64, 65536] chunk" in learner.item("log-probs").detail


def test_shared_prompt_rows_count_the_worst_padding():
    shared = ["rollout.sampling.max_new_tokens=128", "learner.micro_batch_size=4"]
    cfg = load_config(None, shared)
    # Rows of a prompt (64) + up to 2 responses (128 each) are 320 long, and every row is padded
    # to the longest: 3 rows (one shared, two single) of 320 beat 4 plain rows of 192.
    assert estimate(cfg, SMALL, None, prompt_tokens=64).learner.tokens == 3 * 320
    for off in (["learner.shared_prompt_forward=false"],
                ["learner.attention=flash_attention_2", "learner.num_gpus=1"]):
        cfg = load_config(None, [*shared, *off])
        assert estimate(cfg, SMALL, None, prompt_tokens=64).learner.tokens == 4 * 192
    # One prompt a step: its 4 completions fill 2 rows of 2.
    cfg = load_config(None, [*shared, "algo.prompts_per_step=1"])
    assert estimate(cfg, SMALL, None, prompt_tokens=64).learner.tokens == 2 * 320
    # 64 sequences of 16 prompts x 8, 512 + 96 tokens: up to 7 responses a row (1184 positions).
    # Worst: one prompt with all 8 (2 rows), 5 more with 8 and 10 with 1-7 (15 + 5 rows): 22 rows
    # of 1184, fewer positions than 64 plain rows of 608.
    cfg = load_config(None, ["learner.micro_batch_size=64", "rollout.sampling.max_new_tokens=96"])
    assert estimate(cfg, SMALL, None, prompt_tokens=512).learner.tokens == 22 * 1184 < 64 * 608


def test_qwen3_qk_norms_add_to_the_activations():
    shape = ModelShape.from_config(SMALL)
    # fp32: 4*(2h + q + 2kv + q + 4I) + 2*(4h + 4h) + (4 + 4)*(q + kv), h = q = kv = 128, I = 256.
    assert shape.activation_bytes_per_token_layer(4) == 4 * 1792 + 2048 + 2048


def test_the_optimizer_step_is_its_own_phase():
    # One response token a sequence: AdamW's temporaries outweigh the backward. On a GPU torch's
    # foreach AdamW makes sqrt(exp_avg_sq) of every parameter; on CPU two copies of the largest.
    untied = {**SMALL, "tie_word_embeddings": False}
    params = ModelShape.from_config(untied).params
    run = [*SMALL_RUN, "learner.micro_batch_size=1", "rollout.sampling.max_new_tokens=1"]
    cpu = estimate(load_config(None, run), untied, None, prompt_tokens=64).learner
    assert cpu.item("AdamW step").nbytes == 2 * 65_536 * 128 * 4
    gpu = estimate(load_config(None, run), untied, "a10g", prompt_tokens=64).learner
    assert gpu.item("AdamW step").nbytes == params * 4
    for learner, step in ((cpu, 2 * 65_536 * 128 * 4), (gpu, params * 4)):
        assert not learner.item("AdamW step").info and learner.item("activations").info
        overhead = LEARNER_OVERHEAD if learner is gpu else 0
        assert learner.total == pytest.approx(4 * params * 4 + step + overhead)


def test_a_cpu_run_reports_bytes_without_a_verdict_or_cuda_overhead():
    cfg = load_config("conf/demo.yaml")
    config, _ = load_model_config(cfg.model)
    plan = estimate(cfg, config, None)
    assert plan.fits is None and plan.learner.capacity is None
    assert not any(i.name.startswith("CUDA") for i in plan.learner.items)
    on_gpu = estimate(cfg, config, "a10g")
    assert on_gpu.learner.total == pytest.approx(plan.learner.total + LEARNER_OVERHEAD)


# --- rollout ---------------------------------------------------------------------------------


def test_vllm_tp1_at_half_memory_fails_on_a10g_and_tp2_at_09_fits():
    plan = plan_7b("a10g", "rollout.gpu_memory_utilization=0.5")
    rollout = plan.rollout
    assert rollout.weights / GIB == pytest.approx(14.2, abs=0.05)
    assert rollout.budget / GIB == pytest.approx(11.25)
    assert rollout.fits is False
    assert "rollout.gpu_memory_utilization" in rollout.problems[0]
    tp2 = plan_7b("a10g", "rollout.tensor_parallel_size=2", "rollout.num_gpus=2",
                  "rollout.gpu_memory_utilization=0.9").rollout
    assert tp2.fits is True
    assert tp2.weights / GIB == pytest.approx(7.1, abs=0.05)
    assert tp2.kv_tokens == pytest.approx(430_000, rel=0.05)  # audit: ~430k tokens per pair


def test_vllm_tp1_at_09_on_a10g_is_tight_but_works():
    rollout = plan_7b("a10g", "rollout.gpu_memory_utilization=0.9").rollout
    assert rollout.fits is True
    assert rollout.item("KV cache").nbytes / GIB == pytest.approx(4.5, abs=0.1)
    assert rollout.kv_tokens == pytest.approx(84_000, rel=0.03)
    assert rollout.sequences == pytest.approx(55, abs=1)  # 1.5k-token sequences


def test_vllm_needs_room_for_max_model_len_and_the_fix_sets_it():
    # 0.75 x 22.5 leaves ~1.2 GiB of KV: ~22k tokens, under the model's 32768 positions.
    plan = plan_7b("a10g", "rollout.gpu_memory_utilization=0.75")
    assert plan.rollout.fits is False
    assert "rollout.max_model_len=1536" in plan.rollout.problems[0]
    assert plan_7b("a10g", "rollout.gpu_memory_utilization=0.75",
                   "rollout.max_model_len=1536").rollout.fits is True


def test_tp_must_divide_the_heads():
    plan = plan_7b("h100", "rollout.tensor_parallel_size=8", "rollout.num_gpus=8")
    assert plan.rollout.fits is False
    assert "28 attention heads" in plan.rollout.problems[0]


# --- colocated -------------------------------------------------------------------------------


def test_colocated_peak_is_the_larger_phase():
    plan = plan_7b("a100-40", *COLOCATED_8, "learner.strategy=fsdp2",
                   "learner.gradient_checkpointing=true")
    col = plan.colocated
    assert col is not None and col.fits is True
    train, generate = col.item("train phase").nbytes, col.item("generate phase").nbytes
    assert train == pytest.approx(plan.learner.total + 1 * GIB)
    assert generate == pytest.approx(plan.learner.resident + 0.5 * 39.4 * GIB)
    assert col.total == max(train, generate)
    # The learner keeps its weights and optimizer between steps, not its gradients.
    assert plan.learner.resident < plan.learner.total - plan.learner.item("gradients").nbytes


def test_colocated_suggestion_fits_as_a_whole():
    assert plan_7b("a100-40", *COLOCATED_8).fits is False
    fix = suggest(load_config(None, [*GPU_7B, *COLOCATED_8]), shipped_config(Q7B), "a100-40")
    assert fix is not None
    # load_config also checks the colocated pairing (num_actors x TP == num_workers).
    assert plan_7b("a100-40", *COLOCATED_8, *fix.line.split()).fits is True


# --- check_fits, GPU names, model configs ----------------------------------------------------


def test_check_fits_skips_cpu_runs_and_unknown_gpus(monkeypatch):
    monkeypatch.setattr("rlrun.plan.detect_gpu", lambda: None)
    assert check_fits(load_config("conf/demo.yaml")) == []
    assert check_fits(load_config(None, GPU_7B), model_config=shipped_config(Q7B)) == []


def test_check_fits_names_what_to_change():
    problems = check_fits(load_config(None, GPU_7B), "a10g", shipped_config(Q7B))
    assert problems and all("\n" not in p for p in problems)
    assert all("nearest layout that fits on a10g: add " in p for p in problems)
    fine = [*GPU_7B, "rollout.gpu_memory_utilization=0.9", "learner.lora.rank=16",
            "learner.gradient_checkpointing=true"]
    assert check_fits(load_config(None, fine), "a10g", shipped_config(Q7B)) == []


@pytest.mark.parametrize("name,memory,key", [
    ("NVIDIA A10G", 23028, "a10g"), ("A100-80G", None, "a100-80"),
    ("NVIDIA A100-SXM4-40GB", 40960, "a100-40"), ("NVIDIA A100-SXM4-80GB", 81920, "a100-80"),
    ("NVIDIA H100 80GB HBM3", 81559, "h100"), ("NVIDIA H200", 143771, "h200"),
    ("Tesla T4", 15360, None),
])
def test_gpu_names(name, memory, key):
    assert gpu_from_name(name, memory) == key


def test_a_local_model_directory_is_read(tmp_path):
    config = dict(shipped_config(Q7B), num_hidden_layers=2)
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = load_config(None, [f"model.path={tmp_path}"])
    loaded, source = load_model_config(cfg.model)
    assert loaded.num_hidden_layers == 2 and source == str(tmp_path / "config.json")


def test_an_unknown_hub_id_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(None, ["model.path=nobody/no-such-model-xyz"])
    with pytest.raises(ModelLoadError) as err:
        load_model_config(cfg.model)
    assert "model.path='nobody/no-such-model-xyz'" in str(err.value)
    assert "\n" not in str(err.value)


# --- the command line ------------------------------------------------------------------------


def test_cli_on_the_demo_prints_a_table(monkeypatch, capsys):
    monkeypatch.setattr("rlrun.commands.plan.detect_gpu", lambda: None)
    assert main(["plan", "conf/demo.yaml"]) == 0
    out = capsys.readouterr().out
    assert "learner (per rank" in out and "rollout (per engine: hf" in out
    assert "activations" in out and "bytes only" in out


def test_cli_on_a_hub_recipe_offline_uses_the_shipped_config(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["plan", "conf/gsm8k_grpo.yaml", "--gpu", "a100-80"]) == 0
    out = capsys.readouterr().out
    assert "hidden 896" in out and "vocab 151936" in out
    assert "rollout (per GPU: vLLM TP=1" in out and "overall: FITS" in out


def test_cli_suggestion_line_fits_when_run_again(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["plan", *GPU_7B, "--gpu", "a10g"]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    line = next(x for x in out.splitlines() if x.startswith("nearest layout that fits: add"))
    fix = line.split("add", 1)[1].split()
    assert main(["plan", *GPU_7B, *fix, "--gpu", "a10g"]) == 0
    assert "overall: FITS" in capsys.readouterr().out


def test_cli_bad_gpu_is_one_line(capsys):
    assert main(["plan", "conf/demo.yaml", "--gpu", "v100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--gpu 'v100'" in err and "a10g" in err


def test_check_fits_ignores_roles_that_run_on_cpu():
    cpu_learner = [*GPU_7B, "learner.num_gpus=0"]
    problems = check_fits(load_config(None, cpu_learner), "a10g", shipped_config(Q7B))
    assert problems and all(p.startswith("rollout") for p in problems)
