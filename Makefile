# Every target here is a command the README documents.
PY ?= python3
SHARED ?= ../shared
NVCC ?= nvcc
CKPT ?= checkpoints/synth-seed0
export PYTHONPATH := $(CURDIR)

.PHONY: install run test test-py test-cuda test-web lint gpu-test demo probe synth clean help

help:
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: ## install monolith and its Python dependencies (CPU torch 2.13.0 unless a torch is present)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,infra]"

synth: ## write the synthetic checkpoint (seed 0) to $(CKPT) if it is not there
	@test -f $(CKPT)/model.safetensors || $(PY) -m monolith synth --out $(CKPT) --seed 0

run: install synth ## install, write the synthetic checkpoint, decode one prompt with the best engine present
	$(PY) -m monolith generate --model $(CKPT) --prompt "The history of the city begins" -n 32

test: test-py test-cuda test-web ## everything CI runs: pytest + ruff, nvcc for sm_90a and sm_120a, page build + browser tests

test-py: ## CPU tests and lint
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not gpu"

test-cuda: ## compile every kernel variant and probe for sm_90a and sm_120a (no GPU needed)
	$(PY) scripts/compile_all.py --nvcc $(NVCC)

test-web: ## build the page and run its unit and browser tests (Chromium from Debian, nginx on loopback)
	$(MAKE) -C web test

gpu-test: ## GPU tests (run on the H200): gate, phase diff, sanitizers
	$(PY) -m pytest -q -m gpu tests

probe: ## M0 probes on the GPU present
	$(PY) -m monolith probe

demo: ## build and serve the page locally from the committed data
	$(MAKE) -C web demo

lint:
	$(PY) -m ruff check .

clean:
	rm -rf build dist web/dist .pytest_cache
