# Two entry points for a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := $(BIN)/vault-search --vault sample-vault --index-dir .demo-index

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --editable .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --editable '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(DEMO) index
	$(DEMO) search "数据库 索引"
	$(DEMO) search "tea ceremony" --json

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .demo-index .pytest_cache
