"""The recipes in conf/: each loads, each GPU recipe says how to launch it, and each cluster recipe
(`*_16xa10g`, `*_8xa100-40`, `*_8xa100-80`) fits its GPUs by `rlrun plan`, uses every GPU of
its cluster, and fits the nodes' CPUs. Pure config arithmetic: no Ray, no network (the planner
reads the model shapes shipped in rlrun/model_configs/)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from rlrun import plan
from rlrun.cluster import demands
from rlrun.config import Config, load_config

CONF = Path(__file__).resolve().parent.parent / "conf"
RECIPES = sorted(CONF.glob("*.yaml"))


# File-name tag -> (planner GPU type, nodes, GPUs per node, vCPUs per node).
CLUSTERS = {
    "16xa10g": ("a10g", 4, 4, 48),  # 4 x ml.g5.12xlarge
    "8xa100-40": ("a100-40", 1, 8, 96),  # 1 x ml.p4d.24xlarge
    "8xa100-80": ("a100-80", 1, 8, 96),  # 1 x ml.p4de.24xlarge
}
# The single-node recipes and the GPU types their headers name.
SMALL_GPU_RECIPES = [("gsm8k_grpo.yaml", "a10g"), ("gsm8k_grpo.yaml", "a100-80"),
                     ("codeforces_grpo.yaml", "a100-80")]
MATH_FORMATS = ("gsm8k", "math")


@functools.cache
def recipe(path: Path) -> Config:
    """The loaded recipe, once per file (the tests only read it)."""
    return load_config(path)


def cluster_of(path: Path) -> str | None:
    tag = path.stem.rsplit("_", 1)[-1]
    return tag if tag in CLUSTERS else None


CLUSTER_RECIPES = [p for p in RECIPES if cluster_of(p)]


def ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def header(path: Path) -> list[str]:
    """The comment lines a recipe opens with."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def on_gpu(cfg: Config) -> bool:
    return cfg.learner.num_gpus > 0 or cfg.rollout.num_gpus > 0


def prompt_tokens(cfg: Config) -> int:
    """The prompt length a recipe budgets for: what max_model_len leaves the completion."""
    assert cfg.rollout.max_model_len, "a cluster recipe sets rollout.max_model_len"
    return cfg.rollout.max_model_len - cfg.rollout.sampling.max_new_tokens


def gpus_asked(cfg: Config) -> float:
    if cfg.placement.mode == "colocated":  # one learner rank and one vLLM rank per GPU
        return cfg.learner.num_workers
    return (cfg.learner.num_workers * cfg.learner.num_gpus
            + cfg.rollout.num_actors * cfg.rollout.num_gpus)


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_every_recipe_loads(path):
    recipe(path)


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_gpu_recipes_open_with_their_launch_command(path):
    if not on_gpu(recipe(path)):
        pytest.skip("CPU recipe")
    own = f"conf/{path.name}"
    launch = [line for line in header(path)
              if own in line and ("rlrun train" in line or "ray job submit" in line)]
    assert launch, f"{path.name}: the header names no `rlrun train {own}` / `ray job submit` line"


def test_the_six_cluster_recipes_exist():
    names = {p.name for p in CLUSTER_RECIPES}
    for task in ("gsm8k_qwen7b", "codefu_coder7b"):
        for tag in CLUSTERS:
            assert f"{task}_{tag}.yaml" in names


@pytest.mark.parametrize("path", CLUSTER_RECIPES, ids=ids(CLUSTER_RECIPES))
def test_cluster_recipe_fits_its_gpu(path):
    cfg = recipe(path)
    gpu = CLUSTERS[cluster_of(path)][0]
    model_config = plan.shipped_config(cfg.model.path)
    assert model_config is not None, f"no shipped config for {cfg.model.path}"
    tokens = prompt_tokens(cfg)
    assert plan.check_fits(cfg, gpu, model_config, prompt_tokens=tokens) == []
    found = plan.estimate(cfg, model_config, gpu, prompt_tokens=tokens)
    assert found.fits
    # Each vLLM engine holds its share of a step's sequences at full length.
    engines = cfg.rollout.num_actors
    share = cfg.algo.prompts_per_step * cfg.algo.group_size / engines
    assert found.rollout.sequences >= share


@pytest.mark.parametrize("path", CLUSTER_RECIPES, ids=ids(CLUSTER_RECIPES))
def test_cluster_recipe_uses_every_gpu_of_its_cluster(path):
    cfg = recipe(path)
    _, nodes, per_node, _ = CLUSTERS[cluster_of(path)]
    assert gpus_asked(cfg) == nodes * per_node


def place_on_nodes(cfg: Config, nodes: int, gpus: int, cpus: int) -> list[dict[str, float]]:
    """Where Ray would put each bundle: PACK groups (rollout, learner, or the colocated one)
    first-fit node by node, sandbox bundles (SPREAD) round-robin over the nodes. Returns what
    each node holds; fails if a bundle has nowhere to go or a tensor-parallel engine straddles
    nodes."""
    used = [{"CPU": 0.0, "GPU": 0.0} for _ in range(nodes)]

    def room(n: int, bundle: dict[str, float]) -> bool:
        return (used[n]["CPU"] + bundle.get("CPU", 0) <= cpus
                and used[n]["GPU"] + bundle.get("GPU", 0) <= gpus)

    for demand in demands(cfg, needs_sandbox=cfg.data.format not in MATH_FORMATS):
        where = []
        for i, bundle in enumerate(demand.bundles()):
            first = i % nodes if demand.role == "sandbox" else 0
            order = [(first + k) % nodes for k in range(nodes)]
            node = next((n for n in order if room(n, bundle)), None)
            assert node is not None, f"{demand.role} bundle {bundle} fits on no node"
            for key in ("CPU", "GPU"):
                used[node][key] += bundle.get(key, 0)
            where.append(node)
        per_actor = demand.bundles_per_actor
        for i in range(0, len(where), per_actor):
            assert len(set(where[i:i + per_actor])) == 1, f"a {demand.role} actor straddles nodes"
    return used


@pytest.mark.parametrize("path", CLUSTER_RECIPES, ids=ids(CLUSTER_RECIPES))
def test_cluster_recipe_fits_the_nodes_cpus(path):
    cfg = recipe(path)
    _, nodes, gpus, cpus = CLUSTERS[cluster_of(path)]
    used = place_on_nodes(cfg, nodes, gpus, cpus)
    # The driver (`--entrypoint-num-cpus 1`) runs on the head, whichever node that is.
    assert max(n["CPU"] for n in used) + 1 <= cpus


@pytest.mark.parametrize(("name", "gpu"), SMALL_GPU_RECIPES)
def test_small_gpu_recipes_fit_the_gpu_they_name(name, gpu):
    path = CONF / name
    cfg = recipe(path)
    assert plan.check_fits(cfg, gpu, plan.shipped_config(cfg.model.path)) == []
    assert re.search(rf"\b{gpu.split('-')[0].upper()}", "\n".join(header(path)))


GSM8K_7B = [p for p in CLUSTER_RECIPES if p.name.startswith("gsm8k_")]
CODEFU_7B = [p for p in CLUSTER_RECIPES if p.name.startswith("codefu_")]


@pytest.mark.parametrize("path", GSM8K_7B, ids=ids(GSM8K_7B))
def test_gsm8k_7b_recipes_keep_the_paper_settings(path):
    cfg = recipe(path)
    assert cfg.model.path == "Qwen/Qwen2.5-7B-Instruct" and cfg.model.chat_template
    assert (cfg.model.dtype, cfg.learner.master_dtype) == ("bfloat16", "float32")
    assert (cfg.data.train, cfg.data.subset, cfg.data.format) == ("openai/gsm8k", "main", "gsm8k")
    assert cfg.algo.group_size == 8 and cfg.learner.lr == 1e-6
    assert cfg.rollout.sampling.max_new_tokens == 1024 and cfg.rollout.max_model_len == 1536
    assert cfg.reward.math_extractor == "strict" and cfg.reward.shaping.length_limit


@pytest.mark.parametrize("path", CODEFU_7B, ids=ids(CODEFU_7B))
def test_codefu_recipes_score_like_codefu(path):
    cfg = recipe(path)
    assert cfg.model.path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert cfg.data.format == "codeforces" and "C++" in cfg.data.code_instruction
    assert cfg.algo.group_size == 8
    assert (cfg.reward.code_scoring, cfg.reward.no_code_reward,
            cfg.reward.compile_error_reward) == ("fraction", -1.0, -0.5)
    # A pass fraction needs every test run, not a stop at the first failure.
    assert not cfg.sandbox.stop_on_first_failure
    assert cfg.sandbox.workers_per_actor <= cfg.sandbox.num_cpus
