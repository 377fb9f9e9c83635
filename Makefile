# Two entry points for a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := $(BIN)/vault-search --vault sample-vault --index-dir .demo-index

.PHONY: demo test lint clean browser dist

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

# Debian's chromium and chromium-driver for tests/test_browser.py (a real
# browser, headless, on 127.0.0.1). Installed with apt-get when this user may
# (root, or sudo without a password); otherwise those tests skip and say why.
BROWSER_PACKAGES := chromium chromium-driver
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null 2>&1)) \
	  || echo "note: could not install $(BROWSER_PACKAGES); the browser tests will be skipped"; \
	elif sudo -n true 2>/dev/null; then \
	  (sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null 2>&1 || \
	   (sudo -n apt-get update -qq >/dev/null 2>&1 && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null 2>&1)) \
	  || echo "note: could not install $(BROWSER_PACKAGES); the browser tests will be skipped"; \
	else echo "note: $(BROWSER_PACKAGES) missing and no root; the browser tests will be skipped"; fi

test: $(VENV)/.installed-dev browser
	$(BIN)/python -m pytest -q

# ruff (pyflakes, pycodestyle, import order, bugbear) and mypy; .ci/run runs it before the tests.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check vault_search indexer benchmarks tests
	$(BIN)/mypy

# The sdist and the wheel (built from the sdist, as an installer builds it) in
# dist/, for `pipx install dist/vault_search-*.whl` (tests/test_wheel.py builds its own).
dist: | $(BIN)/python
	$(BIN)/python -c "import build" 2>/dev/null || $(BIN)/pip install --quiet build
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf $(VENV) .demo-index .pytest_cache dist build
