# Atelier: the two commands are `make serve` and `make test`.
# Each creates .venv and installs the project into it when missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The third-party VGG weights live beside the checkout (never committed).
SHARED_WEIGHTS := $(abspath ../shared/weights)
ifneq ($(wildcard $(SHARED_WEIGHTS)),)
export ATELIER_WEIGHTS_DIR ?= $(SHARED_WEIGHTS)
endif
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: test serve lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

serve: $(STAMP)
	$(BIN)/atelier serve

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
