"""Memory planner: per-GPU bytes of each role of a config, whether they fit, and what would.

Arithmetic on the model's transformers config (no weights, no Ray) with the learner's own
constants (`rlrun.policy_update`), so `rlrun train` can call `check_fits` before asking Ray for
GPUs.

Notation: P parameters, L decoder layers, h hidden size, I MLP width, a query heads, k KV heads,
d head dim, V vocabulary, N learner ranks, T tokens in one micro-batch, s tokens per sequence,
m bytes per element of the master dtype (`learner.master_dtype`), c of the compute dtype
(`model.dtype`), r the LoRA rank.

Learner, per rank (what one GPU holds at the peak of a forward/backward):
- full fine-tuning: weights P*m, gradients P*m, AdamW's two moments 2*P*m, each divided by N
  under fsdp2 and moved to host memory by `learner.cpu_offload` (FSDP2's CPUOffloadPolicy;
  refused under ddp). ddp with N > 1 adds its all-reduce buckets, P*m (torch's default
  `gradient_as_bucket_view=False` keeps a second copy of every gradient).
- working copy in c: ddp with m != c keeps P*c of autocast casts alive until backward; fsdp2
  holds the all-gathered root module (embeddings, lm_head) and two decoder layers (current and
  prefetched), and the unsharded gradients of the root and one layer before reduce-scatter:
  (root + 2 layers) * c + (root + 1 layer) * c (no gradients under LoRA: the base is frozen).
- LoRA (rank r > 0): the frozen base in c, sharded/offloaded like the weights, and 4*4 bytes
  per adapter parameter (weights, gradients, two moments, fp32 whatever the master dtype:
  PEFT's autocast_adapter_dtype); a target linear [d_in, d_out] adds r*(d_in + d_out) per layer.
- reference model, only when `algo.kl_coef > 0`: weights in c, sharded and offloaded like the
  policy; free with LoRA (the base with the adapters switched off).
- activations of one micro-batch, after Korthikanti et al., "Reducing Activation Recomputation
  in Large Transformer Models" (MLSys 2023, arXiv:2205.05198, sec. 4.1: s*b*h*(34 + 5*a*s/h)
  bytes for a 16-bit GPT layer), re-counted for a Llama/Qwen decoder (RMSNorm, GQA, SwiGLU, no
  dropout, a fused sdpa/flash kernel that saves no [s, s] scores). Bytes per token per layer:
      A = c*(2h + a*d + 2*k*d + a*d + 4I) + 2*(4h + c*h)
  (the norm outputs feeding q/k/v and gate/up; q, k, v; the attention output feeding o_proj;
  SwiGLU's gate, up, silu(gate) and their product; per RMSNorm, HF's fp32 upcast of its input
  and the normalised value). Qwen3's per-head q/k RMSNorm adds (4 + c)*(a*d + k*d);
  `learner.attention=eager` adds the scores, b*a*s^2*(4 + c) per layer. A micro-batch keeps
  L*T*A, or with `learner.gradient_checkpointing` (one checkpoint per decoder layer, as HF's
  `gradient_checkpointing_enable`) each layer's input L*T*h*c plus one recomputed layer T*A.
  The final norm adds T*(4h + 2*c*h); adapter activations (under 1%) are left out.
  T is `learner.max_tokens_per_micro_batch` when set, else n = micro_batch_size sequences (at
  most one rank's share of an update) of s tokens; in shared-prompt rows
  (`learner.shared_prompt_forward` with sdpa or eager) the worst mix of the step's prompts
  (`Layout.micro_batch`). s = `--prompt-tokens` (default 512: a config does not record prompt
  lengths) + `rollout.sampling.max_new_tokens` (with a multi-turn environment, `env.max_tokens`),
  capped at `rollout.max_model_len`.
- the output layer, as `rlrun.policy_update.response_logprobs` takes the log-probs of the n*r
  response positions in chunks of C = 2^24 // V positions (`_LOGPROB_CHUNK_ELEMENTS`). When the
  micro-batch's logits in the output layer's weight dtype (m, or c under LoRA) take at most
  256 MB (`_FULL_LOGITS_BYTES`) the model computes the full logits, T*V*c, kept for backward,
  which writes their gradient in place; one chunk's backward (`_ChunkedLogprobs.backward`)
  holds ~7 [C, V] tensors, C*V*(4c + 12) (chunk, per-sample pick, previous sample gradient and
  chunk gradient in c; log_softmax's output and two gradients in fp32; in fp32 compute the
  previous pick and the divided input replace the fp32 copies: 7 x 4 bytes either way). Above it
  (`_selective_head`) each chunk's [C, V] logits are recomputed in backward, C*V*(c + 12), next
  to the output layer's weight gradient summed over the earlier chunks. That gradient [V, h]
  (in c; autocast copies it to m) is summed out of place, 3*V*h*c alive at once (1 on the full
  path); a tied embedding adds its own [V, h] gradient at the end of backward, 3*V*h*m (untied:
  V*h*m). Under fsdp2 these are unsharded, in c, less the root gradients the working copy
  counts; LoRA makes none. The unchunked figure, n*r*V*(c + 12) (the gathered [N, L, V] copy,
  its fp32 upcast, log_softmax and gradient) next to 2*T*V*c of logits and their gradient, is
  reported to show what chunking saves.
- AdamW's step: torch's CUDA default (foreach) makes sqrt(exp_avg_sq) of every trained
  parameter at once, P*m (/ N under fsdp2); on CPU and under cpu_offload the single-tensor
  implementation makes two copies of one parameter at a time.
- phases: weights, gradients, optimizer state, working copy and reference live throughout. The
  peak is the largest of: the log-prob chunks' backward (activations + logits + chunk), the
  output layer's backward (activations + logits + its weight gradient), the end of backward
  (the embedding's gradient, activations freed) and the optimizer step; the other phases' items
  are shown, marked, not added. Gradients count whole in every phase, as in the last
  micro-batch of an update (an upper bound with one micro-batch). `benchmarks/plan_accuracy.py`
  compares the learner total with a measured CPU peak (docs/benchmarks.md).
- a fixed 2 GiB on a GPU: CUDA context and cuBLAS workspaces (~0.5 GiB), NCCL buffers
  (~0.5 GiB), caching-allocator fragmentation (~1 GiB, about 5% of a GPU); nothing on CPU.

Rollout, per GPU (vLLM): weights P*c/TP. vLLM's budget, `gpu_memory_utilization` x memory,
pays for the weights and ~1.5 GiB of CUDA context, NCCL and profiling-run activations (the
figure that reproduces the audit's A10G and A100-80 KV sizes for Qwen2.5-7B); the rest is KV
cache at 2*L*max(k/TP, 1)*d*c bytes per token (KV heads are replicated past TP = k). vLLM
refuses to start when the weights exceed the budget or the cache cannot hold
`rollout.max_model_len` tokens (default: max_position_embeddings). The hf engine keeps the
whole weights and a KV cache for `rollout.batch_size` sequences.

Colocated (`placement.mode=colocated`): one learner rank and one vLLM worker per GPU, vLLM
asleep while the learner trains (level 1 moves its weights to host memory, level 2 discards
them; both free weights and KV cache and keep ~1 GiB of context and graph pools). The peak is
the larger of training (learner peak + vLLM asleep) and generation (what the learner keeps
between steps: weights, optimizer state, reference, 2 GiB overhead; + vLLM's whole budget).

"Usable" GPU memory is the total CUDA reports (under the nominal size: ECC and driver
reservations): see `GPUS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import operator
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun.config import Config, ConfigError, ModelConfig, response_limit
from rlrun.errors import InputError

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# The learner's constants (rlrun.policy_update), the model helpers (rlrun.models) and
# transformers are imported where they are used: they bring torch, and `rlrun plan --help` or a
# typo in its arguments should answer without it, as every command does (rlrun.cli).

GIB = 1024**3
MIB = 1024**2

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Fixed overheads; see the module docstring for why these numbers.
LEARNER_OVERHEAD = 2 * GIB
VLLM_OVERHEAD = int(1.5 * GIB)
VLLM_ASLEEP = 1 * GIB
DEFAULT_PROMPT_TOKENS = 512
# Bytes per logit of the three fp32 temporaries of a log-prob chunk: the upcast (divided by the
# temperature), log_softmax, and a gradient.
_FP32_TEMPORARIES = 3 * 4

SUGGEST_LORA_RANK = 16


@dataclass(frozen=True)
class Gpu:
    name: str
    label: str
    usable_gib: float  # what torch.cuda / vLLM see as total memory
    why: str

    @property
    def capacity(self) -> float:
        """Usable bytes."""
        return self.usable_gib * GIB


GPUS: dict[str, Gpu] = {
    "a10g": Gpu("a10g", "NVIDIA A10G 24 GB", 22.5, "23,028 MiB per nvidia-smi (audit: ~22.5 GiB)"),
    "a100-40": Gpu("a100-40", "NVIDIA A100 40 GB", 39.4, "torch reports 39.39 GiB"),
    "a100-80": Gpu("a100-80", "NVIDIA A100 80 GB", 79.2, "torch reports 79.15 GiB"),
    "h100": Gpu("h100", "NVIDIA H100 80 GB", 79.1, "torch reports ~79.1 GiB (HBM3, 81,559 MiB)"),
    "h200": Gpu("h200", "NVIDIA H200 141 GB", 139.8, "torch reports ~139.8 GiB (143,771 MiB)"),
}


def gpu_from_name(name: str, memory_mib: float | None = None) -> str | None:
    """The `GPUS` key for a device name as nvidia-smi or Ray's accelerator_type spell it
    ("NVIDIA A10G", "A100-80G", "H100"); None when unknown. A100 needs memory (or 40/80 in the
    name) to tell the two sizes apart."""
    key = name.upper().replace("NVIDIA", "").strip()
    if key.lower() in GPUS:
        return key.lower()
    for model in ("A10G", "H200", "H100"):
        if model in key:
            return model.lower()
    if "A100" in key:
        if "80" in key.replace("A100", "") or (memory_mib is not None and memory_mib > 50_000):
            return "a100-80"
        if "40" in key.replace("A100", "") or memory_mib is not None:
            return "a100-40"
    return None


def detect_gpu() -> str | None:
    """The GPU type of this machine: $RLRUN_GPU, else nvidia-smi's first device; None if
    neither says (a CPU-only driver node cannot know what its workers have)."""
    env = os.environ.get("RLRUN_GPU")
    if env:
        return env.lower() if env.lower() in GPUS else gpu_from_name(env)
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip().splitlines()
        name, mem = out[0].rsplit(",", 1)
        return gpu_from_name(name, float(mem))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gpu_spec(gpu: str) -> Gpu:
    """The `GPUS` entry for `gpu`, or a one-line ConfigError listing the known names."""
    spec = GPUS.get(gpu.lower())
    if spec is None:
        raise ConfigError(f"--gpu {gpu!r} is not a known GPU type: choose one of {', '.join(GPUS)}")
    return spec


# ---------------------------------------------------------------------------------------------
# The model's shape


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers the planner needs, read from a transformers config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_positions: int
    qkv_bias: bool = False  # Qwen2: bias on q/k/v
    qk_norm: bool = False  # Qwen3: RMSNorm on each head's q and k
    source: str = ""  # where the config came from, for the report

    @classmethod
    def from_config(cls, config: PretrainedConfig | dict[str, Any], source: str = ""
                    ) -> ModelShape:
        """From a transformers config, or a `config.json` dict (which names its model_type);
        a multimodal model's text part."""
        from transformers import AutoConfig

        if isinstance(config, dict):
            config = AutoConfig.for_model(**config)
        text = config.get_text_config()
        try:
            heads = text.num_attention_heads
            return cls(
                hidden=text.hidden_size,
                intermediate=text.intermediate_size,
                layers=text.num_hidden_layers,
                heads=heads,
                kv_heads=getattr(text, "num_key_value_heads", None) or heads,
                head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
                vocab=text.vocab_size,
                # Absent means untied in the Llama/Qwen2 config classes; untied is also the
                # larger estimate.
                tied=getattr(text, "tie_word_embeddings", False),
                max_positions=text.max_position_embeddings,
                # Qwen2 has q/k/v biases without declaring them.
                qkv_bias=getattr(text, "attention_bias", config.model_type == "qwen2"),
                qk_norm=config.model_type in ("qwen3", "qwen3_moe"),
                source=source,
            )
        except AttributeError as err:
            raise ConfigError(
                f"model config from {source or 'config.json'} lacks {err.name!r} (the planner "
                "needs hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                "vocab_size and max_position_embeddings)"
            ) from None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """[d_in, d_out] of each linear of one decoder layer, by its HF module name."""
        h, i = self.hidden, self.intermediate
        return {
            "q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
            "o_proj": (self.q_dim, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }

    @property
    def layer_params(self) -> int:
        n = sum(a * b for a, b in self.linear_shapes().values())
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            n += 2 * self.head_dim
        return n + 2 * self.hidden  # two RMSNorm weights

    @property
    def root_params(self) -> int:
        """Everything outside the decoder layers: embeddings, final norm, untied lm_head."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    def lora_params(self, rank: int, targets: list[str]) -> int:
        shapes = self.linear_shapes()
        per_layer = sum(rank * sum(shapes[t]) for t in targets if t in shapes)
        return self.layers * per_layer

    def kv_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """KV cache bytes of one token on one GPU: 2 (K and V) x L x KV heads x d x bytes / TP,
        KV heads replicated (never fewer than one per GPU) when TP exceeds them."""
        return int(2 * self.layers * max(self.kv_heads / tp, 1) * self.head_dim * dtype_bytes)

    def activation_bytes_per_token_layer(self, c: int) -> int:
        """A in the module docstring: bytes one layer saves for backward per token."""
        h = self.hidden
        linear_inputs = 2 * h + self.q_dim + 2 * self.kv_dim + self.q_dim + 4 * self.intermediate
        qk_norms = (4 + c) * (self.q_dim + self.kv_dim) if self.qk_norm else 0
        return c * linear_inputs + 2 * (4 * h + c * h) + qk_norms

    def describe(self) -> str:
        return (f"{_count(self.params)} params, {self.layers} layers, hidden {self.hidden}, "
                f"{self.heads} heads / {self.kv_heads} KV x {self.head_dim}, vocab {self.vocab}, "
                f"{'tied' if self.tied else 'untied'} embeddings")


def _count(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def _decimal(n: float) -> str:
    """Bytes in decimal units, as model cards quote weights."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.2f} MB"


def shipped_config(repo: str) -> dict[str, Any] | None:
    """The architecture fields shipped in `rlrun/model_configs/` for a hub id, if any."""
    name = repo.replace("/", "__") + ".json"
    entry = resources.files("rlrun").joinpath("model_configs", name)
    if not entry.is_file():
        return None
    return json.loads(entry.read_text())


def load_model_config(model: ModelConfig) -> tuple[PretrainedConfig | dict[str, Any], str]:
    """`(the model's config, where it came from)` for `model.path`: the tiny model's, a local
    directory's or the hub's (cache first; `rlrun.models`), else the copy shipped for the
    recipes' models."""
    from rlrun.models import TINY, ModelLoadError, pretrained_config, tiny_config

    if model.path == TINY:
        return tiny_config(model.tiny), "model.tiny"
    try:
        config = pretrained_config(model.path)
    except ModelLoadError:
        shipped = shipped_config(model.path)
        if shipped is None:
            raise
        return shipped, "shipped copy (hub not reachable)"
    local = Path(model.path).expanduser()
    return config, str(local / "config.json") if local.is_dir() else f"hub {model.path}"


# ---------------------------------------------------------------------------------------------
# Layout: a config and the prompt length the plan assumes, with what the planner derives from
# them; the search varies its config keys


@dataclass(frozen=True)
class Layout:
    cfg: Config
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS  # a config does not record prompt lengths

    def changed(self, changes: dict[str, Any]) -> Layout:
        """This layout with dotted config keys set ("learner.lora.rank": 16)."""
        cfg = self.cfg
        for key, value in changes.items():
            cfg = _set(cfg, key, value)
        return dataclasses.replace(self, cfg=cfg)

    @property
    def colocated(self) -> bool:
        return self.cfg.placement.mode == "colocated"

    @property
    def batch(self) -> int:
        """Samples of a step: prompts_per_step * group_size."""
        return self.cfg.algo.prompts_per_step * self.cfg.algo.group_size

    @property
    def samples_per_rank_update(self) -> int:
        """A micro-batch never holds more than one rank's share of an update."""
        return max(1, self.batch // (self.cfg.algo.mini_batches * self.cfg.learner.num_workers))

    @property
    def shared_prompts(self) -> bool:
        """Whether completions of one prompt share a row (`rlrun.policy_update.shares_prompts`:
        an attention kernel that takes the block mask)."""
        from rlrun.policy_update import _BLOCK_MASK_ATTENTION

        learner = self.cfg.learner
        return learner.shared_prompt_forward and learner.attention in _BLOCK_MASK_ATTENTION

    @property
    def seq_len(self) -> int:
        s = self.prompt_tokens + response_limit(self.cfg)
        max_len = self.cfg.rollout.max_model_len
        return min(s, max_len) if max_len else s

    def micro_batch(self) -> tuple[int, int, int, int]:
        """(model positions, rows, row length, sequences) of the largest micro-batch.

        Plain rows: n sequences of s tokens. Shared-prompt rows (`TensorBatch`) hold a prompt
        once and then its responses, up to J = (p + 2r) // r of them (a row is capped at 2s),
        and every row is padded to the longest. The shuffled mini-batches put any mix of the
        step's prompts in a micro-batch, so the count is the worst mix: over j, the most
        samples of one prompt in it (at most group_size), the rows are ceil(j / J) for that
        prompt plus as many as the other n - j samples can make from the other prompts
        (one per prompt, and one more per J further samples of a prompt), each p + min(j, J)*r
        long. With enough prompts that is n - 1 rows of p + 2r for j = 2, more than n*s; with
        few prompts a row shares them and it is less. `learner.max_tokens_per_micro_batch`
        caps the plain tokens of a micro-batch (n = cap // s sequences in shared rows).
        """
        s, group = self.seq_len, self.cfg.algo.group_size
        cap = self.cfg.learner.max_tokens_per_micro_batch
        n = max(1, cap // s) if cap else min(self.cfg.learner.micro_batch_size,
                                             self.samples_per_rank_update)
        plain = (cap, max(1, math.ceil(cap / s)), s, n) if cap else (n * s, n, s, n)
        if not self.shared_prompts:
            return plain
        p = min(self.prompt_tokens, s - 1)
        r = s - p
        per_row = max(1, (p + 2 * r) // r)
        others = max(1, min(self.batch // max(1, group), n)) - 1  # other prompts
        best: tuple[int, int, int, int] | None = None
        for j in range(1, min(group, n) + 1):
            rest = n - j
            if rest > others * j:
                continue  # the other prompts cannot hold the rest with at most j each
            if rest <= others:
                rows = rest
            else:
                rows = others + min((rest - others) // per_row, others * ((j - 1) // per_row))
            rows += math.ceil(j / per_row)
            length = p + min(j, per_row) * r
            if best is None or rows * length > best[0]:
                best = (rows * length, rows, length, n)
        return best or plain

    @property
    def response_tokens(self) -> int:
        """Response positions of one sequence: max_new_tokens (a multi-turn trajectory's
        env.max_tokens), less what max_model_len cuts."""
        return max(1, self.seq_len - min(self.prompt_tokens, self.seq_len - 1))


def _set(node: Any, key: str, value: Any) -> Any:
    """A copy of `node` (a config or a section of one) with the dotted `key` set to `value`;
    the sections off its path are shared, not copied."""
    name, _, rest = key.partition(".")
    return dataclasses.replace(node, **{name: _set(getattr(node, name), rest, value) if rest
                                        else value})


# The config keys the search varies, in the order a suggestion lists them.
_SEARCHED = (
    "learner.strategy", "learner.num_workers", "learner.cpu_offload",
    "learner.gradient_checkpointing", "learner.lora.rank", "learner.micro_batch_size",
    "learner.max_tokens_per_micro_batch", "rollout.tensor_parallel_size",
    "rollout.gpu_memory_utilization", "rollout.max_model_len", "rollout.num_actors",
)


# ---------------------------------------------------------------------------------------------
# Plans


@dataclass
class Item:
    """One line of a role's memory: what, how many bytes, and on the GPU or in host memory."""

    name: str
    nbytes: float
    host: bool = False  # lives in host memory (cpu_offload): not part of the GPU total
    detail: str = ""
    info: bool = False  # shown for explanation only (colocated phases): not part of any total


@dataclass
class RolePlan:
    role: str
    items: list[Item]
    capacity: float | None  # bytes this role may use on one GPU; None: not checked (CPU)
    what: str = ""  # e.g. "per rank: fsdp2 over 8 ranks"
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each; empty when it fits

    @property
    def total(self) -> float:
        return sum(i.nbytes for i in self.items if not (i.host or i.info))

    @property
    def host(self) -> float:
        return sum(i.nbytes for i in self.items if i.host and not i.info)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else not self.problems

    @property
    def margin(self) -> float | None:
        return None if self.capacity is None else self.capacity - self.total

    def item(self, name: str) -> Item:
        return next(i for i in self.items if i.name.startswith(name))


@dataclass
class LearnerPlan(RolePlan):
    resident: float = 0.0  # GPU bytes kept between steps (colocated: while vLLM is awake)
    tokens: int = 0  # tokens in one micro-batch
    unchunked_logprob_bytes: float = 0.0

    @property
    def states(self) -> float:
        """Weights + gradients + optimizer state, wherever they live."""
        return sum(i.nbytes for i in self.items if i.name.startswith(_STATE_ITEMS))


_STATE_ITEMS = ("weights", "gradients", "optimizer", "frozen base", "adapters")


@dataclass
class RolloutPlan(RolePlan):
    weights: float = 0.0
    kv_tokens: int | None = None
    sequences: int | None = None
    seq_len: int = 0
    budget: float | None = None


@dataclass
class Plan:
    """What `estimate` found: the model, the GPU, and each role's bytes and verdict."""

    shape: ModelShape
    gpu: Gpu | None
    layout: Layout
    learner: LearnerPlan
    rollout: RolloutPlan
    colocated: RolePlan | None = None

    @property
    def roles(self) -> list[RolePlan]:
        return [r for r in (self.learner, self.rollout, self.colocated) if r is not None]

    @property
    def fits(self) -> bool | None:
        verdicts = [r.fits for r in self.roles if r.fits is not None]
        return None if not verdicts else all(verdicts)


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _learner(shape: ModelShape, lay: Layout, gpu: Gpu | None, chunked: bool) -> LearnerPlan:
    learner = lay.cfg.learner
    master, compute = learner.master_dtype, lay.cfg.model.dtype
    m, c = DTYPE_BYTES[master], DTYPE_BYTES[compute]
    fsdp = learner.strategy == "fsdp2"
    shards = learner.num_workers if fsdp else 1
    offload = fsdp and learner.cpu_offload
    on_gpu = gpu is not None or learner.num_gpus > 0
    rank = learner.lora.rank
    p = shape.params
    trained = shape.lora_params(rank, learner.lora.target_modules) if rank else p
    notes: list[str] = []
    per = f" / {shards} ranks" if shards > 1 else ""
    items = [
        Item("frozen base", p * c / shards, offload, f"{compute}{per}"),
        Item("adapters", 4 * trained * 4 / shards, offload,
             f"{trained / 1e6:.1f} M params x (weights, grads, 2 AdamW moments) in float32"),
    ] if rank else [
        Item("weights", p * m / shards, offload, f"{master} master{per}"),
        Item("gradients", p * m / shards, offload, f"{master}{per}"),
        Item("optimizer", 2 * p * m / shards, offload,
             f"AdamW exp_avg + exp_avg_sq, {master}{per}"),
    ]
    if not fsdp and learner.num_workers > 1:
        items.append(Item("DDP buckets", trained * (4 if rank else m), False,
                          "all-reduce buckets (gradient_as_bucket_view=False)"))
    if fsdp:
        root, layer = shape.root_params, shape.layer_params
        grads = 0 if rank else root + layer
        items.append(Item("working copy", (root + 2 * layer + grads) * c, False,
                          "FSDP2 all-gathered root + 2 layers"
                          + ("" if rank else " and their unsharded grads") + f", {compute}"))
    elif master != compute and not rank:
        items.append(Item("working copy", p * c, False,
                          f"autocast {compute} casts of every weight, kept for backward"))
    if learner.cpu_offload and not fsdp:
        notes.append("learner.cpu_offload only applies under learner.strategy=fsdp2: ignored")
    if gpu is not None and learner.num_gpus == 0:
        notes.append(f"learner.num_gpus=0 runs the learner on CPU; checked as if on an {gpu.name}")
    if lay.cfg.algo.kl_coef > 0 and not rank:
        items.append(Item("reference model", p * c / shards, offload,
                          f"{compute}{per} (algo.kl_coef > 0)"))
    elif lay.cfg.algo.kl_coef > 0:
        notes.append("reference model: the base with adapters off (no extra memory)")

    tokens, rows, row_len, sequences = lay.micro_batch()
    per_layer = shape.activation_bytes_per_token_layer(c)
    final_norm = tokens * (4 * shape.hidden + 2 * c * shape.hidden)
    if learner.gradient_checkpointing:
        act = shape.layers * tokens * shape.hidden * c + tokens * per_layer + final_norm
        how = "checkpointed per layer"
    else:
        act = shape.layers * tokens * per_layer + final_norm
        how = "no checkpointing"
    if learner.attention == "eager":
        scores = rows * shape.heads * row_len * row_len * (4 + c)
        act += scores * (1 if learner.gradient_checkpointing else shape.layers)
        how += ", eager attention scores"
    shared = (f", shared-prompt rows at worst ({sequences} sequences)"
              if row_len != lay.seq_len else "")
    response = sequences * lay.response_tokens
    unchunked = response * shape.vocab * (c + _FP32_TEMPORARIES)
    phased: Phased = [
        (Item("activations", act, False, f"{rows} x {row_len} = {tokens} tokens{shared}, {how}"),
         _BACKWARD)]
    phased += _logit_items(shape, lay, tokens, response, unchunked, chunked)
    phased += _update_items(shape, lay, trained, shards, offload, on_gpu)
    counted, peak = _peak_phase(phased)
    items += counted
    notes.append(f"peak in the {peak} phase: items marked 'not at the peak' are in the other "
                 "phases, shown but not added")
    if on_gpu:
        items.append(Item("CUDA context + fragmentation", LEARNER_OVERHEAD, False,
                          "fixed: context, NCCL buffers, allocator slack"))
    resident = sum(i.nbytes for i in items if not i.host and i.name in
                   ("frozen base", "adapters", "weights", "optimizer", "reference model",
                    "CUDA context + fragmentation"))
    what = (f"per rank: {learner.strategy} x {learner.num_workers}, master {master}, compute "
            f"{compute}" + (", cpu_offload" if offload else "")
            + (f", LoRA r={rank}" if rank else ""))
    plan = LearnerPlan("learner", items, None if gpu is None else gpu.capacity, what,
                       notes, resident=resident, tokens=tokens, unchunked_logprob_bytes=unchunked)
    if gpu is not None and plan.total > gpu.capacity:
        plan.problems.append(
            f"learner needs {_gib(plan.total)} per GPU, more than the {_gib(gpu.capacity)} of "
            f"an {gpu.name}: shard it (learner.strategy=fsdp2), offload, checkpoint activations, "
            "use LoRA or a smaller learner.micro_batch_size")
    return plan


Phased = list[tuple[Item, tuple[str, ...]]]
_BACKWARD = ("log-prob backward", "output-layer backward")


def _logit_items(shape: ModelShape, lay: Layout, tokens: int, response: int, unchunked: float,
                 chunked: bool) -> Phased:
    """The output layer's share of a micro-batch (module docstring: the output layer): logits,
    log-prob chunks and the gradients of the output layer's and the embedding's weights, each
    with the phases it is alive in."""
    from rlrun.policy_update import _FULL_LOGITS_BYTES, _LOGPROB_CHUNK_ELEMENTS

    master, cdt = lay.cfg.learner.master_dtype, lay.cfg.model.dtype
    m, c = DTYPE_BYTES[master], DTYPE_BYTES[cdt]
    fsdp = lay.cfg.learner.strategy == "fsdp2"
    v, vh = shape.vocab, shape.vocab * shape.hidden
    lora = lay.cfg.learner.lora.rank > 0
    full_bytes = tokens * v * (c if lora else m)
    full = full_bytes <= _FULL_LOGITS_BYTES or not chunked
    n = min(max(1, _LOGPROB_CHUNK_ELEMENTS // v), response)  # positions per chunk
    # FSDP2's working copy already counts the root's unsharded gradients once.
    counted = shape.root_params * c if fsdp else 0

    def beyond(nbytes: float) -> float:
        return 0 if lora else max(0, nbytes - counted)

    cast = vh * m if c != m and not fsdp else 0
    head_grad = beyond(vh * c + cast if full else max(3 * vh * c, vh * c + cast))
    end_grad = beyond((3 if shape.tied else 1) * vh * (c if fsdp else m))
    one_pass = f"; one pass over [N, L, V] would take {_size(unchunked)}"
    if not chunked:
        logits = Item("logits", 2 * tokens * v * c, False,
                      f"lm_head output [{tokens}, {v}] {cdt}, kept for backward, + its gradient")
        logprobs = Item("log-probs", unchunked, False,
                        f"unchunked [{response}, {v}]: gathered copy + fp32 + log_softmax")
    elif full:
        logits = Item("logits", tokens * v * c, False,
                      f"full-logits path ({_size(full_bytes)} <= {_size(_FULL_LOGITS_BYTES)}): "
                      f"lm_head output [{tokens}, {v}] {cdt}, kept for backward, which writes "
                      "its gradient in place")
        logprobs = Item("log-probs", n * v * (4 * c + _FP32_TEMPORARIES), False,
                        f"backward of one [{n}, {v}] chunk: 4 copies in {cdt}, 3 in float32"
                        + one_pass)
    else:
        logits = Item("logits", 0, False,
                      f"selective output layer ({_size(full_bytes)} of logits > "
                      f"{_size(_FULL_LOGITS_BYTES)}): no [R, T, V] tensor, the output layer "
                      f"runs on the {response} response positions in chunks, recomputed in "
                      "backward")
        so_far = beyond(vh * c) if response > n else 0
        logprobs = Item("log-probs", n * v * (c + _FP32_TEMPORARIES) + so_far, False,
                        f"recomputed [{n}, {v}] chunk in backward: logits in {cdt}, 3 in float32, "
                        "the output layer's gradient so far" + one_pass)
    return [
        (logits, _BACKWARD),
        (logprobs, ("log-prob backward",)),
        (Item("output-layer gradient", head_grad, False,
              f"[{v}, {shape.hidden}] weight gradient" + (
                  " of each chunk, summed out of place (3 alive)" if not full else
                  ", made while the logits are alive") + (f", cast to {master}" if cast else "")),
         ("output-layer backward",)),
        (Item("embedding gradient", end_grad, False,
              f"[{v}, {shape.hidden}] " + ("tied: the output layer's gradient + the "
                                           "embedding's + their sum" if shape.tied else
                                           "dense embedding gradient") + " at the end of "
              "backward, activations freed"),
         ("end of backward",)),
    ]


def _update_items(shape: ModelShape, lay: Layout, trained: int, shards: int, offload: bool,
                  on_gpu: bool) -> Phased:
    """AdamW's temporaries in `optimizer.step()` (module docstring: AdamW's step); the
    single-tensor implementation's two copies are sqrt, then divided by the bias correction."""
    lora = lay.cfg.learner.lora
    if lora.rank > 0:
        shapes = shape.linear_shapes()
        largest = lora.rank * max((max(shapes[t]) for t in lora.target_modules if t in shapes),
                                  default=0)
        nbytes = 4
    else:
        h = shape.hidden
        largest = max(shape.vocab * h, shape.intermediate * h, shape.q_dim * h)
        nbytes = DTYPE_BYTES[lay.cfg.learner.master_dtype]
    if on_gpu and not offload:
        return [(Item("AdamW step", trained * nbytes / shards, False,
                      "foreach sqrt(exp_avg_sq) of every parameter (torch's CUDA default)"),
                 ("optimizer step",))]
    # Offloaded, it is in host memory only while the step runs: shown, not added to its figure.
    detail = ("single-tensor on the host: 2 copies of the largest parameter shard" if offload
              else "single-tensor: 2 copies of the largest parameter")
    item = Item("AdamW step", 2 * largest * nbytes / shards, offload, detail, info=offload)
    return [(item, () if offload else ("optimizer step",))]


def _peak_phase(phased: Phased) -> tuple[list[Item], str]:
    """The items of the phase with the most bytes, counted; the other phases' items kept for
    the report as `info` (not part of the total). Items with no phase are always counted."""
    sums: dict[str, float] = {}
    for item, phases in phased:
        for phase in phases:
            sums[phase] = sums.get(phase, 0.0) + (0.0 if item.host else item.nbytes)
    peak = max(sums, key=lambda p: sums[p])  # first of equals: dicts keep insertion order
    out = []
    for item, phases in phased:
        if not phases or peak in phases or item.host:
            out.append(item)
        else:
            out.append(dataclasses.replace(item, info=True,
                                           detail=f"{item.detail} (not at the peak: "
                                                  f"{' / '.join(phases)})"))
    return out, peak


def _rollout(shape: ModelShape, lay: Layout, gpu: Gpu | None) -> RolloutPlan:
    rollout, dtype = lay.cfg.rollout, lay.cfg.model.dtype
    c = DTYPE_BYTES[dtype]
    seq = lay.seq_len
    if rollout.engine != "vllm":
        weights = shape.params * c
        kv_token = shape.kv_bytes_per_token(c, 1)
        kv = rollout.batch_size * seq * kv_token
        items = [Item("weights", weights, False, f"{dtype}, hf engine (unsharded)"),
                 Item("KV cache", kv, False,
                      f"{rollout.batch_size} sequences x {seq} tokens x {kv_token} B")]
        if gpu is not None or rollout.num_gpus > 0:
            items.append(Item("CUDA context + fragmentation", LEARNER_OVERHEAD, False,
                              "fixed, as for the learner"))
        plan = RolloutPlan("rollout", items, None if gpu is None else gpu.capacity,
                           "per engine: hf (transformers generate)", weights=weights, seq_len=seq)
        if gpu is not None and rollout.num_gpus == 0:
            plan.notes.append(f"rollout.num_gpus=0 generates on CPU; checked as if on an "
                              f"{gpu.name}")
        if gpu is not None and plan.total > gpu.capacity:
            plan.problems.append(f"rollout (hf engine) needs {_gib(plan.total)}, more than the "
                                 f"{_gib(gpu.capacity)} of an {gpu.name}")
        return plan
    tp, util = rollout.tensor_parallel_size, rollout.gpu_memory_utilization
    weights = shape.params * c / tp
    kv_token = shape.kv_bytes_per_token(c, tp)
    what = f"per GPU: vLLM TP={tp}, gpu_memory_utilization={util:g}"
    items = [Item("weights", weights, False, f"{dtype} / TP {tp}"),
             Item("vLLM overhead", VLLM_OVERHEAD, False,
                  "fixed: context, NCCL, profiling-run activations")]
    notes: list[str] = []
    if shape.heads % tp:
        notes.append(f"TP={tp} does not divide the {shape.heads} attention heads: vLLM refuses it")
    if gpu is None:
        return RolloutPlan("rollout", items, None, what, notes, weights=weights, seq_len=seq)
    budget = util * gpu.capacity
    kv = max(0.0, budget - weights - VLLM_OVERHEAD)
    kv_tokens = int(kv // kv_token)
    max_len = rollout.max_model_len or shape.max_positions
    items.append(Item("KV cache", kv, False,
                      f"{kv_tokens:,} tokens x {kv_token / 1024:g} KiB = {kv_tokens // seq:,} "
                      f"sequences of {seq}"))
    plan = RolloutPlan("rollout", items, budget, what, notes, weights=weights, kv_tokens=kv_tokens,
                       sequences=kv_tokens // seq, seq_len=seq, budget=budget)
    if shape.heads % tp:
        plan.problems.append(f"rollout.tensor_parallel_size={tp} must divide the model's "
                             f"{shape.heads} attention heads")
    if weights > budget:
        plan.problems.append(
            f"rollout weights ({_gib(weights)} per GPU) exceed gpu_memory_utilization x memory "
            f"({util:g} x {gpu.usable_gib:g} = {_gib(budget)}): raise "
            "rollout.gpu_memory_utilization or rollout.tensor_parallel_size")
    elif kv_tokens < max_len:
        limit = (f"rollout.max_model_len={max_len}" if rollout.max_model_len else
                 f"the model's {max_len} positions (rollout.max_model_len unset)")
        plan.problems.append(
            f"rollout KV cache holds {kv_tokens:,} tokens, fewer than {limit}: vLLM will not "
            f"start; set rollout.max_model_len={seq} or give vLLM more memory")
    return plan


def _colocated(learner: LearnerPlan, rollout: RolloutPlan, lay: Layout,
               gpu: Gpu | None) -> RolePlan:
    util = lay.cfg.rollout.gpu_memory_utilization
    train = Item("train phase", learner.total + VLLM_ASLEEP, info=True,
                 detail=f"learner {_gib(learner.total)} + vLLM asleep {_gib(VLLM_ASLEEP)}")
    generate = Item("generate phase", 0.0, info=True)
    if gpu is not None:
        generate = Item("generate phase", learner.resident + util * gpu.capacity, info=True,
                        detail=f"learner resident {_gib(learner.resident)} + vLLM {util:g} x "
                        f"{gpu.usable_gib:g} GiB")
    # Shown as a single peak line: the two phases never overlap.
    peak = max(train.nbytes, generate.nbytes)
    items = [Item("peak", peak, detail="the larger phase below"), train, generate]
    plan = RolePlan("colocated", items, None if gpu is None else gpu.capacity,
                    "per GPU: one learner rank + one vLLM worker; sleep level 1 (weights to "
                    "host) or 2 (discarded) frees the same GPU memory")
    plan.notes.append(f"sleep level 1 keeps {_gib(rollout.weights)} of vLLM weights per GPU in "
                      "host memory while the learner trains; level 2 keeps none")
    workers = lay.cfg.learner.num_workers
    gpus_rollout = lay.cfg.rollout.num_actors * lay.cfg.rollout.tensor_parallel_size
    if gpus_rollout != workers:
        plan.notes.append(f"rollout.num_actors x tensor_parallel_size = {gpus_rollout} GPUs, "
                          f"learner.num_workers = {workers}: colocation pairs one of each "
                          "per GPU")
    if gpu is not None and peak > gpu.capacity:
        phase = "train" if train.nbytes >= generate.nbytes else "generate"
        fix = ("lower rollout.gpu_memory_utilization or shrink what the learner keeps between "
               "steps" if phase == "generate" else "shrink the learner")
        plan.problems.append(f"colocated {phase} phase needs {_gib(peak)} per GPU, more than the "
                             f"{_gib(gpu.capacity)} of an {gpu.name}: {fix}")
    return plan


def _estimate(shape: ModelShape, lay: Layout, gpu: Gpu | None, chunked: bool = True) -> Plan:
    learner = _learner(shape, lay, gpu, chunked)
    rollout = _rollout(shape, lay, gpu)
    colocated = _colocated(learner, rollout, lay, gpu) if lay.colocated else None
    return Plan(shape, gpu, lay, learner, rollout, colocated)


def estimate(
    cfg: Config,
    model_config: PretrainedConfig | dict[str, Any],
    gpu: str | None,
    *,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    chunked_logprobs: bool = True,
    source: str = "",
) -> Plan:
    """Per-GPU bytes of each role of `cfg` for the model `model_config` describes (a
    transformers config or a config.json dict) on `gpu` (a `GPUS` key). `gpu=None` reports
    bytes only, with no verdict: a CPU run, whose learner part is comparable with a measured CPU
    peak (`chunked_logprobs=False` counts a learner that materialises the full [N, L, V]
    log_softmax instead)."""
    spec = None if gpu is None else gpu_spec(gpu)
    shape = ModelShape.from_config(model_config, source)
    return _estimate(shape, Layout(cfg, prompt_tokens), spec, chunked_logprobs)


# ---------------------------------------------------------------------------------------------
# Suggestions: the nearest layout that fits


@dataclass
class Suggestion:
    """Overrides that make a config fit, with the plan they give."""

    overrides: dict[str, Any]
    plan: Plan

    @property
    def line(self) -> str:
        return " ".join(f"{k}={_format_value(v)}" for k, v in self.overrides.items())


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    return f"{v:g}" if isinstance(v, float) else str(v)


# How far a change moves from the user's layout (lower is nearer). Roughly its price in speed or
# in what is trained: halving the micro-batch only slows kernels a little; checkpointing costs
# ~30% more compute; each doubling of GPUs is real money; CPU offload makes every step wait on
# PCIe and a CPU optimizer; LoRA changes what is trained.
_COST = {
    "halve": 0.5, "gradient_checkpointing": 1.0, "fsdp2": 1.0, "double_gpus": 1.0,
    "cpu_offload": 3.0, "lora": 4.0, "tp_double": 1.0, "util": 0.5, "max_model_len": 0.5,
}
_WORKERS = (2, 4, 8, 16)
_TPS = (1, 2, 4, 8)


def _learner_options(base: Layout) -> list[tuple[float, Layout]]:
    learner = base.cfg.learner
    out: list[tuple[float, Layout]] = []
    strategies = [learner.strategy] + (["fsdp2"] if learner.strategy != "fsdp2" else [])
    for strategy in strategies:
        workers = [learner.num_workers]
        if strategy == "fsdp2":
            workers += [n for n in _WORKERS if n > learner.num_workers
                        and base.batch % (base.cfg.algo.mini_batches * n) == 0]
        offloads = [learner.cpu_offload] + ([True] if strategy == "fsdp2"
                                            and not learner.cpu_offload else [])
        ckpts = [learner.gradient_checkpointing] + ([] if learner.gradient_checkpointing
                                                    else [True])
        loras = [learner.lora.rank] + ([] if learner.lora.rank else [SUGGEST_LORA_RANK])
        for n, offload, ckpt, lora in itertools.product(workers, offloads, ckpts, loras):
            lay = base.changed({
                "learner.strategy": strategy, "learner.num_workers": n,
                "learner.cpu_offload": offload, "learner.gradient_checkpointing": ckpt,
                "learner.lora.rank": lora,
            })
            cost = ((strategy != learner.strategy) * _COST["fsdp2"]
                    + math.log2(n / learner.num_workers) * _COST["double_gpus"]
                    + (offload != learner.cpu_offload) * _COST["cpu_offload"]
                    + (ckpt != learner.gradient_checkpointing) * _COST["gradient_checkpointing"]
                    + (lora != learner.lora.rank) * _COST["lora"])
            for k, halved in enumerate(_halvings(lay)):
                out.append((cost + k * _COST["halve"], halved))
    return out


def _halvings(lay: Layout) -> list[Layout]:
    """`lay` and its micro-batch halved again and again, down to one sequence."""
    out = [lay]
    while True:
        learner = lay.cfg.learner
        cap = learner.max_tokens_per_micro_batch
        rows = min(learner.micro_batch_size, lay.samples_per_rank_update)
        if cap and cap // 2 >= lay.seq_len:
            lay = lay.changed({"learner.max_tokens_per_micro_batch": cap // 2})
        elif not cap and rows > 1:
            lay = lay.changed({"learner.micro_batch_size": rows // 2})
        else:
            return out
        out.append(lay)


def _rollout_options(base: Layout, shape: ModelShape) -> list[tuple[float, Layout]]:
    rollout = base.cfg.rollout
    if rollout.engine != "vllm":
        return [(0.0, base)]
    tp, util, max_len = (rollout.tensor_parallel_size, rollout.gpu_memory_utilization,
                         rollout.max_model_len)
    tps = [t for t in _TPS if t >= tp and shape.heads % t == 0]
    utils = [util]
    if base.colocated:
        utils += [u for u in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9) if u != util]
    elif util < 0.9:
        utils.append(0.9)
    lens = [max_len]
    if max_len is None or max_len > base.seq_len:
        lens.append(base.seq_len)
    out: list[tuple[float, Layout]] = []
    for new_tp, new_util, new_len in itertools.product(tps or [tp], utils, lens):
        lay = base.changed({"rollout.tensor_parallel_size": new_tp,
                            "rollout.gpu_memory_utilization": new_util,
                            "rollout.max_model_len": new_len})
        cost = (math.log2(new_tp / tp) * _COST["tp_double"]
                + (new_util != util) * _COST["util"]
                + (new_len != max_len) * _COST["max_model_len"])
        out.append((cost, lay))
    return out


def _merge(learner: Layout, rollout: Layout) -> Layout | None:
    """The learner's knobs from one layout and the rollout's from another; None when colocation
    cannot pair them (every GPU holds one learner rank and one vLLM rank, so
    rollout.num_actors x tensor_parallel_size must equal learner.num_workers)."""
    tp = rollout.cfg.rollout.tensor_parallel_size
    changes: dict[str, Any] = {
        "rollout.tensor_parallel_size": tp,
        "rollout.gpu_memory_utilization": rollout.cfg.rollout.gpu_memory_utilization,
        "rollout.max_model_len": rollout.cfg.rollout.max_model_len,
    }
    if learner.colocated and learner.cfg.rollout.engine == "vllm":
        workers = learner.cfg.learner.num_workers
        if workers % tp:
            return None
        changes["rollout.num_actors"] = workers // tp
    return learner.changed(changes)


def _overrides(base: Layout, new: Layout) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _SEARCHED:
        value = operator.attrgetter(key)(new.cfg)
        if value != operator.attrgetter(key)(base.cfg):
            out[key] = value
    tp = new.cfg.rollout.tensor_parallel_size
    if tp != base.cfg.rollout.tensor_parallel_size and not base.colocated:
        out["rollout.num_gpus"] = tp  # one GPU per TP worker
    return out


def _best(options: list[tuple[float, Layout]],
          score: Callable[[Layout], float | None]) -> Layout | None:
    """The cheapest option whose `score` is not None (it fits); among equally cheap ones, the
    highest score (the most room)."""
    best: tuple[float, float, Layout] | None = None
    for cost, lay in sorted(options, key=lambda o: o[0]):
        if best is not None and cost > best[0]:
            break  # sorted by cost: nothing later is nearer
        value = score(lay)
        if value is not None and (best is None or value > best[1]):
            best = (cost, value, lay)
    return None if best is None else best[2]


def suggest(
    cfg: Config,
    model_config: PretrainedConfig | dict[str, Any],
    gpu: str,
    *,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    chunked_logprobs: bool = True,
) -> Suggestion | None:
    """The nearest layout on `gpu` that fits (fsdp2 ranks, cpu_offload, gradient checkpointing,
    LoRA rank 16, TP 1/2/4/8, gpu_memory_utilization, max_model_len, micro-batch halving), as
    overrides; None when `cfg` already fits or nothing in that space does."""
    spec = gpu_spec(gpu)
    shape = ModelShape.from_config(model_config)
    base = Layout(cfg, prompt_tokens)

    def plan_of(lay: Layout) -> Plan:
        return _estimate(shape, lay, spec, chunked_logprobs)

    if plan_of(base).fits:
        return None

    def learner_room(lay: Layout) -> float | None:
        p = _learner(shape, lay, spec, chunked_logprobs)
        return None if p.problems else p.margin

    def rollout_room(lay: Layout) -> float | None:
        p = _rollout(shape, lay, spec)
        if p.problems:
            return None
        return float(p.kv_tokens) if p.kv_tokens is not None else p.margin

    def colocated_room(lay: Layout) -> float | None:
        p = plan_of(lay)
        return p.colocated.margin if p.fits and p.colocated is not None else None

    learner_opts = _learner_options(base)
    rollout_opts = _rollout_options(base, shape)
    if not base.colocated:
        # The roles use different GPUs: each takes its own nearest fix.
        best_l = _best(learner_opts, learner_room)
        best_r = _best(rollout_opts, rollout_room)
        chosen = None if best_l is None or best_r is None else _merge(best_l, best_r)
    else:
        # The roles share GPUs: search pairs, cheapest first, each role fitting on its own.
        fit_l = [(c, lay) for c, lay in learner_opts if learner_room(lay) is not None]
        fit_r = [(c, lay) for c, lay in rollout_opts if rollout_room(lay) is not None]
        pairs = [(cl + cr, lay) for (cl, ll), (cr, lr) in itertools.product(fit_l, fit_r)
                 if (lay := _merge(ll, lr)) is not None]
        chosen = _best(pairs, colocated_room)
    return None if chosen is None else Suggestion(_overrides(base, chosen), plan_of(chosen))


def check_fits(
    cfg: Config,
    gpu: str | None = None,
    model_config: PretrainedConfig | dict[str, Any] | None = None,
    *,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
) -> list[str]:
    """Problems that would stop `cfg` on its GPUs, one line each naming what to change; empty
    when it fits or when no GPU type is known (CPU runs, or no $RLRUN_GPU / nvidia-smi here).
    For `rlrun train` to call before asking Ray for GPUs."""
    if cfg.learner.num_gpus == 0 and cfg.rollout.num_gpus == 0:
        return []
    gpu = gpu or detect_gpu()
    if gpu is None:
        return []
    if model_config is None:
        try:
            model_config, _ = load_model_config(cfg.model)
        except InputError:
            # The driver may not see the model (no network, weights only on the workers): the
            # model loaders report a bad model.path with more context than the planner can.
            return []
    plan = estimate(cfg, model_config, gpu, prompt_tokens=prompt_tokens)
    # Only the roles that run on GPUs in this config (`estimate` checks every role on `gpu`).
    on_gpu = {"learner": cfg.learner.num_gpus > 0, "rollout": cfg.rollout.num_gpus > 0,
              "colocated": True}
    problems = [p for role in plan.roles if on_gpu[role.role] for p in role.problems]
    if not problems:
        return []
    fix = suggest(cfg, model_config, gpu, prompt_tokens=prompt_tokens)
    tail = (f"; nearest layout that fits on {gpu}: add {fix.line}" if fix else
            f"; nothing in the searched layouts fits on {gpu}: use a larger GPU or a smaller model")
    return [p + tail for p in problems]


# ---------------------------------------------------------------------------------------------
# Report


def _size(n: float) -> str:
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    if abs(n) >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def _verdict(role: RolePlan) -> str:
    if role.fits is None:
        return "(no GPU type: bytes only)"
    assert role.capacity is not None and role.margin is not None
    if role.fits and isinstance(role, RolloutPlan) and role.kv_tokens is not None:
        # vLLM fills its whole budget with KV cache: the room is in sequences, not bytes.
        return (f"FITS in its {_size(role.capacity)} budget: KV cache for "
                f"{role.kv_tokens:,} tokens = {role.sequences:,} full sequences")
    if role.fits:
        return f"FITS in {_size(role.capacity)} (margin {_size(role.margin)})"
    short = f"short by {_size(-role.margin)}" if role.margin < 0 else role.problems[0]
    return f"DOES NOT FIT in {_size(role.capacity)} ({short})"


def _role_table(role: RolePlan, width: int = 30) -> list[str]:
    lines = [f"{role.role} ({role.what})"]
    for item in role.items:
        where = " [host]" if item.host else ""
        lines.append(f"  {item.name + where:<{width}} {_size(item.nbytes):>11}  {item.detail}")
    label = "total per GPU" if role.capacity is not None else "total"
    lines.append(f"  {label:<{width}} {_size(role.total):>11}  {_verdict(role)}")
    if role.host:
        lines.append(f"  {'host memory':<{width}} {_size(role.host):>11}  per rank (cpu_offload)")
    lines += [f"  problem: {p}" for p in role.problems]
    lines += [f"  note: {n}" for n in role.notes]
    return lines


def format_plan(plan: Plan, suggestion: Suggestion | None = None) -> str:
    """The plan as a table per role, the verdicts, and the override line of a suggestion."""
    lay, shape = plan.layout, plan.shape
    dtype, rollout = lay.cfg.model.dtype, lay.cfg.rollout
    gpu = (f"{plan.gpu.label} ({plan.gpu.usable_gib:g} GiB usable: {plan.gpu.why})"
           if plan.gpu else "no GPU type given (pass --gpu to check fit)")
    head = [
        f"model: {shape.describe()}" + (f" [{shape.source}]" if shape.source else ""),
        f"  weights: {_decimal(shape.params * 2)} in 16-bit, {_decimal(shape.params * 4)} "
        f"in fp32; KV {shape.kv_bytes_per_token(DTYPE_BYTES[dtype]) / 1024:g} KiB "
        f"per token at TP 1 in {dtype}",
        f"gpu: {gpu}",
        f"placement: {'colocated' if lay.colocated else 'split'}; learner "
        f"{lay.cfg.learner.num_workers} rank(s), rollout {rollout.num_actors} engine(s) x TP "
        f"{rollout.tensor_parallel_size}; sequences {lay.prompt_tokens} prompt + "
        f"{response_limit(lay.cfg)} new tokens (--prompt-tokens, "
        + ("env.max_tokens: a whole multi-turn trajectory)" if lay.cfg.env.name
           else "rollout.sampling.max_new_tokens)"),
        "",
    ]
    body: list[str] = []
    for role in plan.roles:
        body += _role_table(role) + [""]
    verdict = {True: "FITS", False: "DOES NOT FIT", None: "bytes only (no GPU type)"}[plan.fits]
    tail = [f"overall: {verdict}"]
    if plan.fits is False:
        if suggestion is None:
            tail.append("no layout in the searched space fits: use a larger GPU or a smaller "
                        "model")
        else:
            after = "; ".join(f"{r.role} {_size(r.total)}: {_verdict(r)}"
                              for r in suggestion.plan.roles)
            tail += [f"nearest layout that fits: add  {suggestion.line}",
                     f"  with it: {after}"]
    return "\n".join(head + body + tail)
