# Two entry points for a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := $(BIN)/vault-search --vault sample-vault --index-dir .demo-index

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --editable .
	touch $@

# torch first, pinned: the local CPU wheel. Left to sentence-transformers,
# pip would pull a multi-GB CUDA build.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet --editable '.[dev,sentence-transformers,bench]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(DEMO) index
	$(DEMO) search "数据库 索引"
	$(DEMO) search "tea ceremony" --json

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

# ruff (pyflakes, pycodestyle, import order, bugbear) and mypy; .ci/run runs it before the tests.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check vault_search indexer benchmarks tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .demo-index .pytest_cache
