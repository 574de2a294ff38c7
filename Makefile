# The two set-up commands: `make quickstart` and `make test` (see README.md).
PYTHON ?= python3
# The torch build to install; on PyPI this is the CUDA build on Linux, here the CPU wheel on disk.
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A pip constraints file for the install: empty (the default), the ranges pyproject.toml declares;
# CI passes CONSTRAINTS=constraints.txt, the versions the tests last passed with.
CONSTRAINTS ?=

.PHONY: quickstart test lint format bench constraints clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "$(TORCH)"
	$(BIN)/pip install -e '.[dev]' $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	touch $(STAMP)

# Train a tiny Transformer on the embedded toy corpus, then translate its test split and print BLEU.
quickstart: $(STAMP)
	run=outputs/quickstart/$$(date +%Y-%m-%d_%H-%M-%S) && \
	$(BIN)/python train.py experiment=quickstart hydra.run.dir=$$run && \
	$(BIN)/python evaluate.py run_dir=$$run split=test

# Lint, then the whole test suite (CPU only, no network; tests needing ../shared/data skip without it).
test: $(STAMP) lint
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python scripts/benchmark.py train

# Rewrite constraints.txt from this environment once `make test` passed (its comments kept).
constraints: $(STAMP)
	{ grep '^#' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^torch=='; } \
		> constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .cache outputs
