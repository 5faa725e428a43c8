#!/usr/bin/env bash
# The prepared GPU checks (scripts/gpu_check.py): one line per check, PASS / FAIL / SKIP with
# the reason. Runs anywhere; on a machine without NVIDIA GPUs every check says it skipped.
#   bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi finds none); every check skips"
fi
[ -x "$python" ] || python=python3
exec "$python" scripts/gpu_check.py
