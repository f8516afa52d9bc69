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
# The sample photos and paintings the page offers (GET /samples), from the same place.
SHARED_IMAGES := $(abspath ../shared/images)
ifneq ($(wildcard $(SHARED_IMAGES)),)
export ATELIER_SAMPLES_DIR ?= $(SHARED_IMAGES)
endif
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

# Debian packages the tests use: a real Redis for the job store's tests, headless
# Chromium for the page's tests, curl for the README's examples, Noto Color Emoji for the
# everyday-things training data (models/things). Installed when missing (as root, with
# apt); without them those tests are skipped with the reason. (axe-core, for the page's
# accessibility test, comes with the dev extra: the PyPI package axe-core-python ships
# axe.min.js.)
DEBIAN_PACKAGES := redis-server chromium chromium-driver curl fonts-noto-color-emoji

.PHONY: test serve lint install system-deps fonts clean

# The Python client (clients/python, a package of its own) goes in after the project: the
# CLI's --server, the ComfyUI nodes and their tests use it.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e 'clients/python[all]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

system-deps:
	@missing=""; \
	for pkg in $(DEBIAN_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages:$$missing"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
			|| echo "could not install$$missing: the tests that need them are skipped"; \
	else echo "missing Debian packages:$$missing (not root): the tests that need them are skipped"; fi

# The emoji font alone (what training the text-to-image model needs beyond Python).
fonts:
	@$(MAKE) --no-print-directory system-deps DEBIAN_PACKAGES=fonts-noto-color-emoji

test: lint system-deps
	$(BIN)/python -m pytest

serve: $(STAMP)
	$(BIN)/atelier serve

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
