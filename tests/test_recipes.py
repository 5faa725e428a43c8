"""The recipes in conf/: each loads, each GPU recipe says how to launch it, and each cluster recipe
(`*_16xa10g`, `*_8xa100-40`, `*_8xa100-80`) fits its GPUs by `rlrun plan`, uses every GPU of
its cluster, and fits the nodes' CPUs. The recipes for the GSM8K user's own setups (one A10G,
and 16 completions per prompt on 8 GPUs) fit with the margins docs/gpu.md states, and
docs/cluster.md gives their SageMaker launch lines. Pure config arithmetic: no Ray, no network
(the planner reads the model shapes shipped in rlrun/model_configs/)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from rlrun import plan
from rlrun.cluster import demands
from rlrun.config import Config, load_config, to_dict

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


# The paper settings hold for the GSM8K recipes with 8 completions per prompt; the 16-completion
# one is checked against its 8-completion twin below.
GSM8K_7B = [p for p in CLUSTER_RECIPES if p.name.startswith("gsm8k_") and "_g16_" not in p.name]
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


# ---------------------------------------------------------------------------------------------
# The GSM8K user's own setups: one ml.g5.2xlarge, and 8 GPUs with 16 completions per prompt.

DOCS = CONF.parent / "docs"
ONE_A10G = CONF / "gsm8k_qwen7b_1xa10g.yaml"
G16 = CONF / "gsm8k_qwen7b_g16_8xa100-80.yaml"
# Recipe -> (planner GPU type, SageMaker instance type, nodes, GPUs per node, vCPUs per node).
USER_SETUPS = {
    ONE_A10G: ("a10g", "ml.g5.2xlarge", 1, 1, 8),
    G16: ("a100-80", "ml.p4de.24xlarge", 1, 8, 96),
}
GIB = 1024**3


def plan_cli(path: Path, gpu: str, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """`rlrun plan conf/<recipe> --gpu <gpu> --prompt-tokens <the recipe's>`, as the CLI runs it."""
    import argparse

    from rlrun.commands import plan as plan_command

    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    args = parser.parse_args([str(path), "--gpu", gpu,
                              "--prompt-tokens", str(prompt_tokens(recipe(path)))])
    capsys.readouterr()
    code = plan_command.main(args)
    return code, capsys.readouterr().out


def docs_row(path: Path) -> str:
    """The recipe's row in docs/gpu.md's table of recipes."""
    rows = [line for line in (DOCS / "gpu.md").read_text().splitlines()
            if line.startswith(f"| `{path.stem}` |")]
    assert len(rows) == 1, f"docs/gpu.md has {len(rows)} rows for {path.stem}"
    return rows[0]


def _gib1(n: float) -> str:
    return f"{n / GIB:.1f}"


def test_one_a10g_fits_with_the_margin_the_docs_state(capsys):
    cfg = recipe(ONE_A10G)
    code, out = plan_cli(ONE_A10G, "a10g", capsys)
    assert code == 0 and "overall: FITS" in out
    found = plan.estimate(cfg, plan.shipped_config(cfg.model.path), "a10g",
                          prompt_tokens=prompt_tokens(cfg))
    peak = found.colocated
    assert found.fits and peak is not None and peak.fits
    # A deliberate margin, not the 256 MiB that gpu_memory_utilization=0.9 leaves.
    assert peak.margin >= 1 * GIB
    assert plan.check_fits(cfg, "a10g", plan.shipped_config(cfg.model.path),
                           prompt_tokens=prompt_tokens(cfg)) == []
    assert f"FITS in 22.50 GiB (margin {peak.margin / GIB:.2f} GiB)" in out
    row = docs_row(ONE_A10G)
    assert (f"peak {_gib1(peak.total)} of {_gib1(peak.capacity)} GiB "
            f"(margin {_gib1(peak.margin)} GiB)") in row
    assert f"KV {found.rollout.sequences} x {found.rollout.seq_len}" in row
    assert f"train phase {_gib1(found.learner.total + plan.VLLM_ASLEEP)} GiB" in row
    # The base is offloaded to host memory: the g5.2xlarge's 32 GiB hold it.
    assert found.learner.host < 20 * GIB


def test_one_a10g_is_lora_on_an_offloaded_bf16_base():
    cfg = recipe(ONE_A10G)
    assert cfg.placement.mode == "colocated" and cfg.weights.backend == "ipc"
    assert cfg.learner.lora.rank > 0 and cfg.learner.strategy == "fsdp2"
    assert cfg.learner.cpu_offload and cfg.learner.gradient_checkpointing
    assert cfg.model.dtype == "bfloat16"  # no 4-bit base: rlrun's learner has none
    # The GSM8K settings of the cluster recipes, but for LoRA's learning rate and a smaller step.
    assert cfg.model.path == "Qwen/Qwen2.5-7B-Instruct" and cfg.model.chat_template
    assert (cfg.data.train, cfg.data.subset, cfg.data.format) == ("openai/gsm8k", "main", "gsm8k")
    assert cfg.algo.group_size == 8 and cfg.trainer.steps == 200
    assert cfg.rollout.sampling.max_new_tokens == 1024 and cfg.rollout.max_model_len == 1536
    assert cfg.reward.math_extractor == "strict" and cfg.reward.shaping.length_limit


def test_g16_is_the_8xa100_80_recipe_with_16_completions_per_prompt(capsys):
    twin = recipe(CONF / "gsm8k_qwen7b_8xa100-80.yaml")
    cfg = recipe(G16)
    assert cfg.algo.group_size == 16 and twin.algo.group_size == 8
    assert cfg.run.name != twin.run.name
    def rest(c: Config) -> dict:
        d = to_dict(c)
        del d["run"]["name"], d["algo"]["group_size"]
        d["run"].pop("output_dir")  # runs/<run.name>
        return d

    assert rest(cfg) == rest(twin)
    code, out = plan_cli(G16, "a100-80", capsys)
    assert code == 0 and "overall: FITS" in out
    found = plan.estimate(cfg, plan.shipped_config(cfg.model.path), "a100-80",
                          prompt_tokens=prompt_tokens(cfg))
    row = docs_row(G16)
    assert (f"learner {_gib1(found.learner.total)} of {_gib1(found.learner.capacity)} GiB "
            f"(margin {_gib1(found.learner.margin)} GiB)") in row
    assert f"KV {found.rollout.sequences} x {found.rollout.seq_len}" in row


@pytest.mark.parametrize("path", CLUSTER_RECIPES, ids=ids(CLUSTER_RECIPES))
def test_the_docs_row_of_each_cluster_recipe_states_its_plan(path):
    """docs/gpu.md's figures are the planner's: a change to either that moves them fails here."""
    cfg = recipe(path)
    found = plan.estimate(cfg, plan.shipped_config(cfg.model.path), CLUSTERS[cluster_of(path)][0],
                          prompt_tokens=prompt_tokens(cfg))
    row = docs_row(path)
    if found.colocated is not None:
        peak = found.colocated
        assert f"peak {_gib1(peak.total)} of {_gib1(peak.capacity)} GiB" in row
    else:
        assert f"learner {_gib1(found.learner.total)} of {_gib1(found.learner.capacity)} GiB" in row
    assert f"KV {found.rollout.sequences} x {found.rollout.seq_len}" in row


@pytest.mark.parametrize("path", list(USER_SETUPS), ids=ids(list(USER_SETUPS)))
def test_user_setup_uses_its_gpus_and_fits_the_instance_cpus(path):
    cfg = recipe(path)
    _, _, nodes, gpus, cpus = USER_SETUPS[path]
    assert gpus_asked(cfg) == nodes * gpus
    used = place_on_nodes(cfg, nodes, gpus, cpus)
    assert max(n["CPU"] for n in used) + 1 <= cpus  # and the driver


@pytest.mark.parametrize("path", list(USER_SETUPS), ids=ids(list(USER_SETUPS)))
def test_cluster_docs_launch_user_setup_on_sagemaker(path):
    _, instance, nodes, _, _ = USER_SETUPS[path]
    text = (DOCS / "cluster.md").read_text().replace("\\\n", " ")
    launches = [" ".join(line.split()) for line in text.splitlines()
                if f"rlrun sagemaker launch conf/{path.name}" in line]
    assert launches, f"docs/cluster.md has no `rlrun sagemaker launch conf/{path.name}` line"
    assert any(f"--instance-type {instance} --instance-count {nodes}" in line
               for line in launches)
