# Two commands, both safe to run on a fresh clone:
#   make lab    set up .venv with the pinned course environment, then open JupyterLab on notebook 00
#   make test   the same set-up plus the test tools, then every test (unit, property, parity,
#               strict nbval on every notebook, the browser test, the Binder proxy)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build on CPU-only machines.
TORCH  := torch==2.13.0
LAB_ARGS ?=
PYTEST_ARGS ?=

.PHONY: lab test setup setup-dev check-python clean-venv

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null || { \
	  echo "llmkit needs Python 3.10 or newer, but '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)."; \
	  echo "Install Python 3.10+ and run, for example: make PYTHON=python3.11 lab"; exit 1; }

$(PY): | check-python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip

# The stamps make a second `make lab` instant; editing pyproject.toml re-runs the install.
$(VENV)/.course-installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e .
	@touch $@

$(VENV)/.dev-installed: pyproject.toml $(VENV)/.course-installed
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $@

setup: $(VENV)/.course-installed
setup-dev: $(VENV)/.dev-installed

lab: setup
	$(PY) -m llmkit.env --quiet || true
	$(PY) -m jupyterlab notebooks/00_start_here.ipynb $(LAB_ARGS)

test: setup-dev
	$(PY) -m pytest tests notebooks --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
