# Everyday commands. `make demo` and `make test` set up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint typecheck install clean collect-medium

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

# Exhaustive datasets of the `medium` spaces: conv2d, dense, batch_matmul and depthwise conv2d on
# this CPU, 63,312 configs in all, 7-9.4 hours (0.4-0.54 s per config; README, "Datasets").
# Resumable: run it again after a kill. No progress bar, so it can run in the background:
#   nohup make collect-medium > collect-medium.log 2>&1 &
MEDIUM_TASKS := resnet18:6 resnet18:8 resnet18:10 bert_base:0 bert_base:4 mobilenet_v2:12 mobilenet_v2:17

collect-medium: $(STAMP)
	$(BIN)/python scripts/collect_dataset.py $(MEDIUM_TASKS) --preset medium --plan exhaustive --quiet

clean:
	rm -rf $(VENV) runs .pytest_cache
