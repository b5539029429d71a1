# One command to run the main job, one to run the tests; both set themselves up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.janus-installed
# One Numba cache for every process these targets start (the replay kernels compile once, not per
# process; without it, PYTHONDONTWRITEBYTECODE=1 means no cache at all).
export NUMBA_CACHE_DIR ?= $(abspath $(VENV))/numba-cache

.PHONY: setup compare test test-all bench clean

# The pinned CPU torch is installed first (constraints.txt), so pip never pulls CUDA wheels.
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

compare: $(STAMP)  ## the main job: janus compare on configs/default.yaml
	$(BIN)/janus compare $(ARGS)

test: $(STAMP)  ## the test suite CI runs (slow tests excluded)
	$(BIN)/python -m pytest -m "not slow" -q $(ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
