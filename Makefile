# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test lint typecheck pytest demo bench-parser bench-crawl clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,redis]'
	touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check scrapy_rep tests benchmarks example_project
	$(VENV)/bin/ruff format --check scrapy_rep tests benchmarks example_project

typecheck: venv
	$(VENV)/bin/mypy scrapy_rep

pytest: venv
	$(VENV)/bin/pytest -q

test: lint typecheck pytest

demo: venv
	$(PY) example_project/demo.py

bench-parser: venv
	$(PY) benchmarks/parser.py

bench-crawl: venv
	$(PY) benchmarks/crawl.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
