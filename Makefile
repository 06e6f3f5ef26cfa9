# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test test-fast lint typecheck pytest redis-server demo bench-parser bench-crawl bench-cluster clean

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

pytest: venv redis-server
	$(VENV)/bin/pytest -q

# The Redis tests and bench-cluster start their own redis-server (Debian's package)
# on a free port. Without it, the Redis tests are skipped, or fail when CI=true.
redis-server:
	@command -v redis-server >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server) || \
	  echo "warning: could not install redis-server (Debian: apt-get install -y redis-server)"

test: lint typecheck pytest

# Everything but the subprocess and real-time-delay tests (marked slow): under 30 s.
test-fast: venv
	$(VENV)/bin/pytest -q -m "not slow"

demo: venv
	$(PY) example_project/demo.py

bench-parser: venv
	$(PY) benchmarks/parser.py

bench-crawl: venv
	$(PY) benchmarks/crawl.py

bench-cluster: venv redis-server
	$(PY) benchmarks/cluster.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
