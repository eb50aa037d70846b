# Two commands on a fresh machine: `make demo` and `make test`. Both install what they need into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned, not its build: from PyPI alone, torch==2.13.0 on Linux is the CUDA build (several GB of
# CUDA libraries; it runs on a CPU too). pip takes a CPU build of that version wherever one is offered (this
# project's machines offer one through pip's find-links); elsewhere ask for it with
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make install
# On a GPU machine, install the torch build you want first, then: make install TORCH_SPEC=
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-durations test-fast lint docs docs-serve bench acceptance clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_SPEC),$(PY) -m pip install -q "$(TORCH_SPEC)")
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/wattwise demo

# Tests run in parallel (pytest-xdist), one worker per CPU unless TEST_WORKERS says otherwise; the tests
# that share a server or a module-scoped fixture stay on one worker (tests/conftest.py's scheduler).
TEST_WORKERS ?= auto
# Everything, both tiers: tests/unit/ and tests/integration/ (CI's command).
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# `make test`, keeping each test's duration in tests/durations.json: a clone with no pytest cache yet (CI's)
# starts the longest tests first by it. Run it after adding or changing slow tests, and commit the file.
test-durations: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --store-durations

# The unit tier alone: in-process tests, no process, server or training run started.
test-fast: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/unit

# Real-GPU acceptance checks; without a GPU every check is skipped with its reason (exit 0).
acceptance: install
	$(PY) -m wattwise.acceptance --out wattwise_acceptance --quick

lint: install
	$(VENV)/bin/ruff check core lightning_energy accelerate_energy tests benchmarks examples docs
	$(VENV)/bin/ruff format --check core lightning_energy accelerate_energy tests benchmarks examples docs
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/): built strictly, so a broken link or reference fails.
MKDOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
docs: install
	$(MKDOCS_ENV) $(VENV)/bin/mkdocs build --strict --site-dir build/site

docs-serve: install
	$(MKDOCS_ENV) $(VENV)/bin/mkdocs serve

bench: install
	$(PY) benchmarks/monitor_overhead.py
	$(PY) benchmarks/callback_overhead.py
	$(PY) benchmarks/hot_path.py
	$(PY) benchmarks/agent.py
	$(PY) benchmarks/recurring.py
	$(PY) benchmarks/recurring.py --validate
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/frontier.py

clean:
	rm -rf $(VENV) wattwise_runs .pytest_cache .mypy_cache .ruff_cache
