#!/usr/bin/env bash
# Check a built training image on a machine without a GPU (infra/docker/build_training_image.sh
# runs this after building; it also runs alone). Every container runs with --network none, so
# nothing is downloaded: what the image needs must be in it.
#
#   versions    torch, vllm, transformers, trl, ray, peft as constraints-gpu.txt pins them, and
#               which flash-attention is present
#   pip-check   `pip check`: every installed distribution's requirements are met
#   imports     torch and vLLM, the vLLM modules rlrun calls (engine, platform, weight-transfer
#               factory and NCCL engine), and rlrun's vLLM engine, weight-transfer and learner
#               modules, with no GPU (torch.cuda.is_available() is False)
#   paths       python, ray and rlrun are the environment's, also in a login shell (KubeRay's
#               `bash -lc` ray start)
#   recipes     `rlrun config show` and `rlrun plan` for every recipe in the image's conf/ (GPU
#               recipes with --gpu for the GPU their name or header gives; each must FIT)
#   sm-no-gpu   the SageMaker entrypoint as SageMaker starts it (`train`, recipe in the job's
#               hyperparameters, a simulated resource config) for the one-A10G recipe on a
#               ml.g5.2xlarge whose GPU is missing: it must fail with one line naming the host
#               and the missing GPU, in /opt/ml/output/failure
#   sm-cpu-node the same recipe on a CPU instance type: the trainer must refuse it in one line
#               for want of a GPU (its model, data and CPU counts overridden with what a
#               machine without network and with 2 cores has; its GPU layout unchanged)
#   sm-demo     the CPU demo (math and code problems, the code judged by the sandbox's process
#               backend), a few steps, through the same entrypoint: exit 0, and the final model
#               in /opt/ml/model. The process backend needs namespaces, which an unprivileged
#               container is refused (`unshare: Operation not permitted`), so this container
#               gets CAP_SYS_ADMIN and no seccomp profile
#   sm-demo-arithmetic  the demo on its arithmetic problems only (no sandbox), in a container
#               with Docker's default privileges, as a SageMaker job's is: exit 0 and the model
#
# Usage: bash infra/docker/check_training_image.sh [IMAGE] [CHECK...]
#   IMAGE defaults to rlrun:<version in pyproject.toml>; CHECKs default to all of the above.
# Prints one PASS or FAIL line per check and exits 1 if any failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo/pyproject.toml" | head -n 1)"
image="${1:-${RLRUN_TRAINING_IMAGE:-rlrun:${version:-latest}}}"
shift || true
all=(versions pip-check imports paths recipes sm-no-gpu sm-cpu-node sm-demo sm-demo-arithmetic)
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=("${all[@]}")
work="$(mktemp -d /tmp/rlrun-image-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT
failed=()

say() { echo "check_training_image: $*"; }
pass() { say "PASS $1: $2"; }
fail() { say "FAIL $1: $2"; failed+=("$1"); }

docker image inspect "$image" >/dev/null 2>&1 || { say "no image $image; build it first"; exit 1; }

# A container of the image: no network, Ray's shared memory, no GPU.
in_image() {
    docker run --rm --network none --shm-size=2g -e HF_HUB_OFFLINE=1 --entrypoint "$1" \
        "$image" "${@:2}"
}

check_versions() {
    local out
    if out="$(in_image python -c '
import importlib.metadata as md, re, sys
pins = {}
for line in open("/opt/rlrun/infra/docker/constraints-gpu.txt"):
    m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
    if m:
        pins[m.group(1).lower()] = m.group(2)
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
names = ["torch", "vllm", "transformers", "trl", "ray", "peft", "flash-attn", "flash_attn_3",
         "flashinfer-python", "triton", "xformers", "accelerate", "datasets", "numpy"]
found = {n: version(n) for n in names}
shown = [f"{n} {v}" if v else f"{n} absent" for n, v in found.items()]
print(f"python {sys.version.split()[0]}; " + ", ".join(shown))
wrong = [f"{n} {found[n]} (pinned {pins[n]})" for n in pins if n in found and found[n] != pins[n]]
wrong += [f"{n} {version(n)} (pinned {v})" for n, v in pins.items() if n not in found and version(n) != v]
if wrong:
    print("not as pinned: " + "; ".join(wrong))
    sys.exit(1)
' 2>&1)"; then pass versions "$out"; else fail versions "$out"; fi
}

check_pip_check() {
    local out
    if out="$(in_image python -m pip check 2>&1)"; then pass pip-check "$out"; else fail pip-check "$out"; fi
}

check_imports() {
    local out
    if out="$(in_image python -c '
import torch
assert not torch.cuda.is_available(), "a GPU is visible"
import vllm
from vllm import LLM, SamplingParams
from vllm.config import WeightTransferConfig
from vllm.platforms import current_platform
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.distributed.weight_transfer.nccl_common import trainer_init
import rlrun.engines.vllm, rlrun.weights, rlrun.weights.collective, rlrun.weights.ipc
import rlrun.weights.vllm_gloo, rlrun.policy_model, rlrun.policy_update
import actors.learner, actors.rollout, actors.weight_sync
rlrun.weights.register_vllm_backends()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, no GPU visible), vllm {vllm.__version__} "
      f"(platform {type(current_platform).__name__}); rlrun.engines.vllm, rlrun.weights.{{collective,ipc,vllm_gloo}}, "
      "rlrun.policy_model, rlrun.policy_update, actors.{learner,rollout,weight_sync} import")
' 2>&1)"; then pass imports "$(tail -n 1 <<<"$out")"; else fail imports "$(tail -n 5 <<<"$out")"; fi
}

check_paths() {
    local out want="/opt/venv/bin/python /opt/venv/bin/ray /opt/venv/bin/rlrun"
    out="$(in_image /bin/bash -lc 'command -v python ray rlrun' 2>&1 | tr '\n' ' ')"
    if [ "${out% }" = "$want" ]; then
        pass paths "a login shell finds $want"
    else
        fail paths "a login shell finds: ${out:-nothing} (want $want)"
    fi
}

check_recipes() {
    local out
    if out="$(in_image python -c '
import pathlib, re, subprocess, sys
from rlrun.config import load_config
TAGS = {"a10g": "a10g", "a100-40": "a100-40", "a100-80": "a100-80"}
# Recipes without a cluster tag: the GPU their header opens with.
HEADER_GPU = {"gsm8k_grpo": "a10g", "codeforces_grpo": "a100-80"}
NO_GPU, SPACE = "no GPU", " "
bad, done = [], []
for path in sorted(pathlib.Path("/opt/rlrun/conf").glob("*.yaml")):
    rel = f"conf/{path.name}"
    show = subprocess.run(["rlrun", "config", "show", rel], capture_output=True, text=True)
    if show.returncode != 0:
        bad.append(f"config show {rel}: {(show.stderr or show.stdout).strip().splitlines()[-1:]}")
        continue
    cfg = load_config(rel)
    gpu = None
    if cfg.learner.num_gpus > 0 or cfg.rollout.num_gpus > 0:
        tag = re.search(r"_\d+x(a10g|a100-40|a100-80)$", path.stem)
        gpu = TAGS[tag.group(1)] if tag else HEADER_GPU.get(path.stem)
    cmd = ["rlrun", "plan", rel]
    if gpu:
        cmd += ["--gpu", gpu]
    if cfg.rollout.max_model_len:
        cmd += ["--prompt-tokens", str(cfg.rollout.max_model_len - cfg.rollout.sampling.max_new_tokens)]
    plan = subprocess.run(cmd, capture_output=True, text=True)
    verdict = [l for l in plan.stdout.splitlines() if l.startswith("overall:")]
    if plan.returncode != 0 or (gpu and verdict != ["overall: FITS"]):
        bad.append(f"{SPACE.join(cmd)}: exit {plan.returncode}, {verdict or plan.stderr.strip()[-200:]}")
    else:
        done.append(f"{path.stem} ({gpu or NO_GPU})")
if bad:
    print("; ".join(bad))
    sys.exit(1)
print(f"config show and plan for {len(done)} recipes: " + ", ".join(done))
' 2>&1)"; then pass recipes "$out"; else fail recipes "$out"; fi
}

# A SageMaker job's /opt/ml for one host: resourceconfig.json for `type`, and the hyperparameters
# `rlrun sagemaker launch` writes (the recipe, and the overrides as a JSON list).
sm_root() {
    local root="$1" type="$2" config="$3" overrides="$4"
    mkdir -p "$root/input/config"
    cat >"$root/input/config/resourceconfig.json" <<EOF
{"current_host": "algo-1", "current_instance_type": "$type", "current_group_name": "homogeneousCluster",
 "hosts": ["algo-1"], "instance_groups": [{"instance_group_name": "homogeneousCluster",
 "instance_type": "$type", "hosts": ["algo-1"]}], "network_interface_name": "lo"}
EOF
    python3 - "$root/input/config/hyperparameters.json" "$config" "$overrides" <<'EOF'
import json, sys
path, config, overrides = sys.argv[1:]
json.dump({"config": config, "overrides": json.dumps(overrides.split())}, open(path, "w"))
EOF
}

# The image as SageMaker runs it: `docker run IMAGE train`, /opt/ml mounted, host name algo-1
# (with no network, the name is the loopback address); further docker options after the first two.
sm_run() {
    local root="$1" timeout_s="$2"
    timeout "$timeout_s" docker run --rm --network none --shm-size=2g --hostname algo-1 \
        --add-host algo-1:127.0.0.1 -e HF_HUB_OFFLINE=1 -v "$root:/opt/ml" "${@:3}" "$image" train \
        >"$root.log" 2>&1
}

failure_line() {  # the failure reason, when it is exactly one line
    local file="$1/output/failure"
    [ -s "$file" ] && [ "$(wc -l <"$file")" -eq 1 ] && cat "$file"
}

check_sm_no_gpu() {
    local root="$work/sm-no-gpu" code reason
    sm_root "$root" ml.g5.2xlarge conf/gsm8k_qwen7b_1xa10g.yaml ""
    sm_run "$root" 300; code=$?
    reason="$(failure_line "$root")"
    if [ "$code" -eq 1 ] && [[ "$reason" == "hosts joined Ray short of GPUs: algo-1 (ml.g5.2xlarge): 0 of 1 GPUs"* ]]; then
        pass sm-no-gpu "exit 1, failure: $reason"
    else
        fail sm-no-gpu "exit $code, failure: ${reason:-<none or not one line>}; log tail: $(tail -n 5 "$root.log")"
    fi
}

check_sm_cpu_node() {
    local root="$work/sm-cpu-node" code reason data=/opt/ml/input/data/train
    mkdir -p "$root/input/data/train"
    python3 - "$root/input/data/train" <<'EOF'
import json, sys
for name, numbers in (("train.jsonl", range(8)), ("val.jsonl", range(8, 12))):
    with open(f"{sys.argv[1]}/{name}", "w") as f:
        for i in numbers:
            f.write(json.dumps({"question": f"What is {i} plus {i}?",
                                "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}) + "\n")
EOF
    sm_root "$root" ml.m5.2xlarge conf/gsm8k_qwen7b_1xa10g.yaml "model.path=tiny \
model.chat_template=false data.train=$data/train.jsonl data.val=$data/val.jsonl \
learner.num_cpus=1 rollout.num_cpus=0.5"
    sm_run "$root" 300; code=$?
    reason="$(failure_line "$root")"
    if [ "$code" -eq 1 ] && [[ "$reason" == "rlrun train exited with code "*GPU* ]]; then
        pass sm-cpu-node "exit 1, failure: $reason"
    else
        fail sm-cpu-node "exit $code, failure: ${reason:-<none or not one line>}; log tail: $(tail -n 5 "$root.log")"
    fi
}

# The demo, short: no warm-start, two steps on a small toy set (as the SageMaker cluster test
# runs it).
DEMO_SHORT="sft.enabled=false reward.audit_before_training=false trainer.steps=2 \
trainer.eval_every=0 trainer.checkpoint_every=2 data.toy_size=64 data.val_size=4 \
trainer.eval_samples=2 trainer.eval_k=[1] algo.prompts_per_step=4 \
rollout.sampling.max_new_tokens=16 metrics.tensorboard=false metrics.report=false"

demo_run() {  # NAME EXTRA_OVERRIDES [docker options...]
    local name="$1" root="$work/$1" code started=$SECONDS
    sm_root "$root" ml.m5.xlarge conf/demo.yaml "$DEMO_SHORT $2"
    sm_run "$root" 900 "${@:3}"; code=$?
    cp "$root.log" "${RLRUN_IMAGE_CHECK_LOG_DIR:-$work}/" 2>/dev/null || true
    if [ "$code" -eq 0 ] && [ -s "$root/model/config.json" ]; then
        pass "$name" "exit 0 in $((SECONDS - started)) s, $(grep -c '^step=' "$root.log") step lines; $(grep -m1 'final model' "$root.log")"
    else
        fail "$name" "exit $code; $(cat "$root/output/failure" 2>/dev/null); log tail: $(tail -n 8 "$root.log")"
    fi
}

check_sm_demo() {
    demo_run sm-demo "" --cap-add SYS_ADMIN --security-opt seccomp=unconfined
}

check_sm_demo_arithmetic() {
    demo_run sm-demo-arithmetic "data.train=toy:arithmetic"
}

started=$SECONDS
for c in "${checks[@]}"; do
    case "$c" in
        versions | pip-check | imports | paths | recipes | sm-no-gpu | sm-cpu-node | sm-demo | sm-demo-arithmetic)
            "check_${c//-/_}" ;;
        *) say "unknown check '$c' (${all[*]})"; exit 2 ;;
    esac
done
if [ ${#failed[@]} -gt 0 ]; then
    say "${#failed[@]} of ${#checks[@]} checks failed (${failed[*]}) on $image in $((SECONDS - started)) s"
    exit 1
fi
say "all ${#checks[@]} checks passed on $image in $((SECONDS - started)) s"
