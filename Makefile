# The two commands of the README:
#   make run   - set up, fetch the default model, run a prompt program on it
#   make test  - set up and run the test suite (what .ci/run calls)
#   make test-loaded - the same suite beside CPU hogs (LOAD=4): it must not depend on speed
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.furca-installed
# Real clients whose own requirements cannot resolve beside the rest: installed without
# them; what they import is in pyproject's `clients` extra (docs/clients.md says why).
NODEPS_CLIENTS = sglang==0.5.23 instructor==1.17.0

.PHONY: setup run test test-loaded bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch alone first, pinned: pip must take the CPU build of 2.13.0
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,clients]'
	$(PY) -m pip install --quiet --no-deps $(NODEPS_CLIENTS)
	touch $(STAMP)

setup: $(STAMP)

# the default model from its own Q4_1 GGUF (fetched on first use), kept quantized: on a CPU
# with AVX512-VNNI its decode runs as one compiled call a step (README, "Numbers")
run: setup
	$(VENV)/bin/furca run examples/quickstart.py --model default-gguf

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900 tests

test-loaded: setup
	PY=$(PY) scripts/test_under_load.sh

clean:
	rm -rf $(VENV) build *.egg-info
