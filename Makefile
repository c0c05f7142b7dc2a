# Two commands, both safe to run on a fresh clone:
#   make lab    set up .venv with the pinned course environment, then open JupyterLab on notebook 00
#   make test   the same set-up plus the test tools, then every test (unit, property, parity,
#               strict nbval on every notebook, the browser test, the Binder proxy)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch first and pinned (the pin is read from pyproject.toml): an unpinned torch pulls a
# multi-GB CUDA build on CPU-only machines.
TORCH  := $(shell sed -n 's/^ *"\(torch==[^"]*\)".*/\1/p' pyproject.toml)
# JupyterLab refuses to run as root (say, in a container) unless told that is intended.
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
LAB_ARGS ?=
PYTEST_ARGS ?=

.PHONY: lab test models setup setup-dev check-python clean-venv

check-python:
	@if ! command -v "$(PYTHON)" >/dev/null 2>&1; then \
	  echo "llmkit needs Python 3.10 or newer, but '$(PYTHON)' was not found."; \
	  echo "Install Python 3.10+ and run, for example: make PYTHON=python3.11 lab"; exit 1; \
	elif ! "$(PYTHON)" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then \
	  echo "llmkit needs Python 3.10 or newer, but '$(PYTHON)' is $$("$(PYTHON)" --version 2>&1)."; \
	  echo "Install Python 3.10+ and run, for example: make PYTHON=python3.11 lab"; exit 1; \
	fi

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

# The whole checkout is the root (notebooks, llmkit's source, data); the browser opens notebook 00.
lab: setup
	@$(PY) -m llmkit env --quiet || echo "(JupyterLab opens anyway; notebook 00 shows the same check.)"
	$(PY) -m jupyterlab --ServerApp.root_dir=. notebooks/00_start_here.ipynb $(ROOT_FLAG) $(LAB_ARGS)

# -ra lists every skip with its reason (a skipped browser test names the package to install).
test: setup-dev
	$(PY) -m pytest tests notebooks --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg -ra --durations=15 $(PYTEST_ARGS)

# Rebuild the course's tokenizer, base and chat models from data/models/recipe.json (hours on a
# CPU: see data/models/recipe/README.md), then copy them into data/models/. Interrupt it and run it
# again: it resumes. DEVICE=cuda uses a GPU for the training stages.
DEVICE ?=
models: setup
	$(PY) -m llmkit recipe data/models/recipe.json $(if $(DEVICE),--device $(DEVICE))
	$(PY) -m llmkit recipe data/models/recipe.json --ship

clean-venv:
	rm -rf $(VENV)
