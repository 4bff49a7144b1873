# Everyday commands. `make demo` and `make test` set up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint typecheck install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m benchmarks.demo

# One worker per core; a test file runs in one worker (its module fixtures are built once).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m ''

lint: $(STAMP)
	$(BIN)/ruff check tune_gym agents benchmarks tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs .pytest_cache
