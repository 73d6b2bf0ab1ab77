# Everything runs from a project-local virtualenv, created on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SUM    := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(SUM)
# The demo needs the package alone, not the dev, Spark and metrics stacks (~1 GB).
BASE   := $(VENV)/.base-$(SUM)
EXTRAS ?= dev,spark,metrics

# Tests run in parallel, one pytest-xdist worker per core; tests carrying the same
# xdist_group mark (tests/conftest.py) stay on one worker, one after the other.
# `make test XDIST=` runs everything in one process, in collection order.
XDIST  ?= -n auto --dist loadgroup

.PHONY: test test-fast lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --config-settings editable_mode=compat -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* $(VENV)/.base-*
	touch $@ $(BASE)

$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --config-settings editable_mode=compat -e .
	rm -f $(VENV)/.base-*
	touch $@

# The whole suite: lint, types, every test including the slow drills.
test: $(STAMP) lint
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Without the slow drills, for a quick local loop.
test-fast: $(STAMP) lint
	$(PY) -m pytest $(XDIST) -m "not slow and not spark" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check cmdstalk_py tests benchmarks examples
	$(VENV)/bin/mypy --strict
	$(VENV)/bin/mypy --strict benchmarks examples
	$(VENV)/bin/mypy --strict tests

# The quick start: bundled server in-process, example jobs, the supervisor until all are done.
demo: $(BASE)
	$(PY) examples/demo.py

# Benchmarks against the real beanstalkd, measured in the same run (see benchmarks/README.md).
bench: $(STAMP)
	$(PY) benchmarks/server.py
	$(PY) benchmarks/server.py --durable
	$(PY) benchmarks/drain.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
