# Two commands do everything on a fresh machine:
#   make table3   set up .venv, then regenerate Table 3 at the smallest scale
#   make test     set up .venv, then lint (ruff) and run the test suite
# Set-up is idempotent: it reruns only when pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: setup table3 params readme lint test test-fast

setup: $(STAMP)

# Without a usable NVIDIA GPU, take the light CPU build of torch: from a local wheel or pip cache if there is
# one, else from PyTorch's CPU index when reachable, so pip never pulls the multi-GB CUDA build by accident.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if $(BIN)/python -c "import torch" 2>/dev/null; then :; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then $(BIN)/pip install "torch==$(TORCH)"; \
	elif $(BIN)/pip download --no-deps --no-index -q -d /tmp/ablate-torch "torch==$(TORCH)" >/dev/null 2>&1 \
	     || ! curl -s --max-time 5 -o /dev/null $(TORCH_CPU_INDEX)/torch/; then $(BIN)/pip install "torch==$(TORCH)"; \
	else $(BIN)/pip install "torch==$(TORCH)" --index-url $(TORCH_CPU_INDEX) --extra-index-url https://pypi.org/simple; fi
	$(BIN)/pip install -e '.[dev]'
	touch $@

# All 20 rows x 2 seeds at the tiny scale, WORKERS runs at a time (auto: one single-thread run per core; on a GPU,
# several per GPU); finished runs are skipped on a rerun. `make table3 WORKERS=2` for two.
WORKERS ?= auto
table3: $(STAMP)
	$(BIN)/ablate sweep sweeps/table3.yaml --scale tiny --workers $(WORKERS)
	$(BIN)/ablate table sweeps/table3.yaml --scale tiny --published

params: $(STAMP)
	$(BIN)/ablate params sweeps/table3.yaml --vocab 37000

# The README's glance, per-row tables and quoted notes, rewritten from results/*.json after a table is rebuilt
# (ablations/report/readme.py; tests/test_published_tables.py fails while they differ)
readme: $(STAMP)
	$(BIN)/python -m ablations.report.readme --write

# ruff: the linter and the formatter's check over the whole tree (pyproject.toml's [tool.ruff])
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not benchmark and not reliability"
