# One command to run the main job, one to run the tests; both set themselves up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.janus-installed
# The Numba cache of the processes these targets start, in the venv so that `make clean` clears it
# (without it janus uses ~/.cache/janus/numba: compiled once per machine either way).
export NUMBA_CACHE_DIR ?= $(abspath $(VENV))/numba-cache

.PHONY: setup compare lint test test-all bench clean

# torch is installed first, at the version constraints.txt pins. The pin says nothing about the
# build: which one pip gets is up to the index. From PyPI on Linux, torch==2.13.0 is the CUDA build
# with its nvidia-*/triton dependencies (about 3 GB); an index or find-links folder that offers the
# CPU build (2.13.0+cpu, as the development and CI machines' pip configuration does) gives that.
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu make setup  takes torch (and its few
# dependencies) from that index instead: the CPU build, about 200 MB. Empty (the default): pip's own
# configuration decides, exactly as before.
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(strip $(TORCH_INDEX_URL)),--index-url $(strip $(TORCH_INDEX_URL)),)
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt $(TORCH_INDEX) torch
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

compare: $(STAMP)  ## the main job: janus compare on the packaged default (src/janus/configs/default.yaml)
	$(BIN)/janus compare $(ARGS)

# Static checks; their settings are in pyproject.toml. `make test` (so CI) runs lint first.
lint: $(STAMP)  ## ruff on src, tests and benchmarks; mypy on src/janus
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

test: $(STAMP) lint  ## the static checks, then the test suite CI runs (slow tests excluded)
	$(BIN)/python -m pytest -m "not slow" -q --durations=20 $(ARGS)

bench: $(STAMP)  ## installs the libraries benchmarks/ compares janus with (cpprb, SB3, TorchRL)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[bench]"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
