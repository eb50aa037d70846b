# Two commands on a fresh machine: `make demo` and `make test`. Both install what they need into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch (the plain `torch` wheel on PyPI pulls several GB of CUDA libraries).
# On a GPU machine, install the torch build you want first, then: make install TORCH_SPEC=
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test lint bench acceptance clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_SPEC),$(PY) -m pip install -q "$(TORCH_SPEC)")
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/wattwise demo

test: install
	$(PY) -m pytest -q

# Real-GPU acceptance checks; without a GPU every check is skipped with its reason (exit 0).
acceptance: install
	$(PY) -m wattwise.acceptance --out wattwise_acceptance --quick

lint: install
	$(VENV)/bin/ruff check core lightning_energy accelerate_energy tests benchmarks examples
	$(VENV)/bin/mypy

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
