# Every target here is a command the README documents. On a fresh machine `make run` and
# `make test` each install what they need first (and only once): Python packages into .venv/,
# system tools through `make deps`.
# PYTHON: the interpreter that creates .venv (Python >= 3.11).
# TORCH: installed only when that interpreter has no torch at all; TORCH_INDEX: where from (empty:
# pip's configured indexes; https://download.pytorch.org/whl/cpu gives the CPU-only build).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.monolith-installed
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
SHARED ?= ../shared
export MONOLITH_DATA_DIR ?= $(abspath $(SHARED)/data)
NVCC ?= nvcc
CKPT ?= checkpoints/synth-seed0
export PYTHONPATH := $(CURDIR)

.PHONY: install deps run test test-py test-cuda test-web lint gpu-test demo probe synth clean help

help:
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(STAMP) ## install monolith into .venv once (sees the system's packages: an existing torch is kept)

# Rebuilt only when pyproject.toml changes. --system-site-packages: a torch already installed
# (a CUDA build on a GPU machine) is used as it is; nothing is installed into the system's
# interpreter. The pod extra (runpod) is not installed: `pip install -e ".[infra]"` for `monolith pod`.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "monolith needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) -V 2>&1). Use make PYTHON=python3.11"; exit 1; }
	@test -x $(PY) || { echo "creating $(VENV) (a virtual environment that also sees the system's packages)"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV); }
	@if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "torch $$($(PY) -c 'import torch; print(torch.__version__)') is present: kept"; \
	else \
	  echo "installing $(TORCH)$(if $(TORCH_INDEX), from $(TORCH_INDEX)) (no torch here: several GB for the CUDA build, a few hundred MB for the CPU one; progress below)"; \
	  $(PY) -m pip install --progress-bar on $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"; \
	fi
	@echo "installing monolith and its dependencies (pyproject.toml) into $(VENV)"
	$(PY) -m pip install --progress-bar on -e ".[dev]"
	@# ruff is a binary that `python -m ruff` looks for in this environment's bin/: a copy found
	@# only in the system's site-packages is not enough, so the pinned one goes into .venv too.
	$(PY) -m pip install --progress-bar on --ignore-installed --no-deps \
	  "$$($(PY) -c 'import tomllib; print(next(r for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if r.startswith("ruff")))')"
	@touch $@
	@echo "installed: run commands with $(VENV)/bin/monolith, or . $(VENV)/bin/activate"

deps: ## system tools the tests need (chromium, nginx, shellcheck via apt-get; checks node and nvcc)
	@NVCC=$(NVCC) PYTHON=$(PYTHON) bash scripts/deps.sh

synth: install ## write the synthetic checkpoint (seed 0) to $(CKPT) if it is not there
	@test -f $(CKPT)/model.safetensors || $(PY) -m monolith synth --out $(CKPT) --seed 0

run: install synth ## install, write the synthetic checkpoint, decode one prompt with the best engine present
	$(PY) -m monolith generate --model $(CKPT) --prompt "The history of the city begins" -n 32

test: deps install ## everything CI runs: ruff + pytest (CPU), nvcc for sm_90a and sm_120a, page build + browser tests
	@test -f $(MONOLITH_DATA_DIR)/wikitext-2-raw-v1-test.txt || \
	  { echo "the tests read $(MONOLITH_DATA_DIR)/wikitext-2-raw-v1-test.txt: put ../shared beside this repository (or SHARED=dir)"; exit 1; }
	$(MAKE) test-py test-cuda test-web

test-py: install ## CPU tests and lint
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not gpu"

test-cuda: install ## compile every kernel variant and probe for sm_90a and sm_120a, check kernel/sass.lock (no GPU needed)
	$(PY) scripts/compile_all.py --nvcc $(NVCC) --spill-budget sm_90a=0,sm_120a=0 --sass-lock kernel/sass.lock

test-web: install ## build the page and run its unit and browser tests (Chromium from Debian, nginx on loopback)
	$(MAKE) -C web test PY=$(abspath $(PY))

lint: install ## ruff only
	$(PY) -m ruff check .

gpu-test: install ## GPU tests (run on the H200): gate, phase diff, sanitizers
	$(PY) -m pytest -q -m gpu tests

probe: install ## M0 probes on the GPU present
	$(PY) -m monolith probe

demo: ## build and serve the page locally from the committed data
	$(MAKE) -C web demo

clean: ## remove build outputs (keeps .venv and checkpoints)
	rm -rf build dist web/dist .pytest_cache
