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
	@echo "Installing cmdstalk-py into $(VENV) with the extras [$(EXTRAS)]:"
	@echo "  dev: pytest, hypothesis, ruff, mypy, supervisor, Playwright (tests and linters);"
	@echo "  spark: pyspark, pyarrow, pandas, matplotlib (cmdstalk-spark; pyspark alone is ~500 MB);"
	@echo "  metrics: prometheus-client (--metrics)."
	@echo "About 1.2 GB to download and unpack: a few minutes the first time (pip prints nothing until done)."
	@echo "Later runs reuse $(VENV) until pyproject.toml changes. 'make demo' needs none of it."
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --config-settings editable_mode=compat -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* $(VENV)/.base-*
	touch $@ $(BASE)

$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing cmdstalk-py alone into $(VENV) (click, greenstalk, psutil, tenacity; no extras):"
	@echo "a few MB, under a minute. 'make test' adds the dev, spark and metrics extras (~1.2 GB)."
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
