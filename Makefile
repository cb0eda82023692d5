# The two entry points a newcomer needs; each creates its own virtual environment in .venv.
#   make demo   set up the migrator and show the migration diff of the bundled example project
#   make test   set up the migrator, the apex runtime and CPU torch, then run the whole test suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build that CI machines install quickly; an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
PYTEST_ARGS ?=

.PHONY: demo test test-all lint bench clean device-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.demo-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml runtime/pyproject.toml
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]' -e runtime
	touch $@

demo: $(VENV)/.demo-installed
	@# --diff exits 1 when the migration would change something, which is the point of the demo.
	$(BIN)/npu-migrate --diff examples/ || test $$? -eq 1

# The HTML report's browser test drives Debian's Chromium through Playwright (never a browser
# build of Playwright's own). Installed here when missing; a machine that has it pays nothing.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@command -v apt-get >/dev/null && test "$$(id -u)" -eq 0 || { \
	  echo "error: the HTML report test needs Chromium at $(CHROMIUM): install Debian's" \
	    "'chromium' package (as root: apt-get install chromium)" >&2; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
	  >/dev/null || { echo "error: apt-get could not install chromium" >&2; exit 1; }

# Two pytest workers on two cores: one torch thread each, or the workers fight over the cores
# (the tiny models of the tests run many times slower with two threads per worker).
# NPU_MIGRATE_NO_SKIPS: this set-up installs what every test needs (Chromium included), so a skipped
# test is a failure (conftest.py).
test: $(VENV)/.test-installed $(CHROMIUM)
	NPU_MIGRATE_NO_SKIPS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# Also the tests marked slow and the whole of the sampled ones (conftest.py, tests/_tiers.py):
# what a change to the engine's shortcuts or to an end-to-end program should run before it lands.
test-all: $(VENV)/.test-installed $(CHROMIUM)
	NPU_MIGRATE_SLOW=1 NPU_MIGRATE_NO_SKIPS=1 OMP_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# On a machine with a CUDA GPU or an Ascend NPU: the runtime's tests on the device, the end-to-end
# programs there, and npu-migrate verify (runtime/tools/device_check.py); within 8 minutes on one
# GPU. Anywhere else it says why it skipped and exits 0. The venv's torch must see the device.
device-check: $(VENV)/.test-installed
	$(BIN)/python runtime/tools/device_check.py

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
