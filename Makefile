# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The oldest Scrapy we support (pyproject.toml): `make test` runs the whole suite
# on it too, in a venv of its own.
FLOOR_SCRAPY := 2.14.*
FLOOR_VENV   := .venv-floor

.PHONY: venv floor-venv test test-fast lint typecheck docs pytest pytest-floor redis-server \
	demo bench-parser bench-crawl bench-broad bench-cluster clean

venv: $(VENV)/.installed-test
floor-venv: $(FLOOR_VENV)/.installed-test

$(VENV)/.created:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.created
	$(PY) -m pip install -q -e '.[test,redis,docs]'
	touch $@

# The demo needs scrapy-rep and Scrapy, nothing of the test toolchain.
$(VENV)/.installed-demo: pyproject.toml $(VENV)/.created
	$(PY) -m pip install -q -e .
	touch $@

$(FLOOR_VENV)/.installed-test: pyproject.toml
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install -q --upgrade pip
	$(FLOOR_VENV)/bin/python -m pip install -q -e '.[test,redis]' 'scrapy==$(FLOOR_SCRAPY)'
	touch $@

lint: venv
	$(VENV)/bin/ruff check scrapy_rep tests benchmarks example_project
	$(VENV)/bin/ruff format --check scrapy_rep tests benchmarks example_project

typecheck: venv
	$(VENV)/bin/mypy scrapy_rep

# The documentation site (docs/): every warning is an error.
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Branch coverage of scrapy_rep/ on the newest Scrapy (what it leaves out and
# why: docs, development page).
pytest: venv redis-server
	$(VENV)/bin/pytest -q --cov --cov-report=term:skip-covered

pytest-floor: floor-venv redis-server
	$(FLOOR_VENV)/bin/python -c "import scrapy; print('Scrapy', scrapy.__version__, '(floor)')"
	$(FLOOR_VENV)/bin/pytest -q -p no:cacheprovider

# The Redis tests and bench-cluster start their own redis-server (Debian's package)
# on a free port. Without it, the Redis tests are skipped, or fail when CI=true.
redis-server:
	@command -v redis-server >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server) || \
	  echo "warning: could not install redis-server (Debian: apt-get install -y redis-server)"

# The suite on both Scrapy releases at once: it mostly waits on real time (Crawl-delay,
# timeouts, pauses), not on the CPU, so side by side the whole takes about one run.
test: lint typecheck docs
	$(MAKE) -j2 --output-sync=target pytest pytest-floor

# Everything but the subprocess and real-time-delay tests (marked slow), on every
# core: under 30 s.
test-fast: venv
	$(VENV)/bin/pytest -q -m "not slow" -n auto

demo: $(VENV)/.installed-demo
	$(PY) example_project/demo.py

bench-parser: venv
	$(PY) benchmarks/parser.py

bench-crawl: venv
	$(PY) benchmarks/crawl.py

bench-broad: venv
	$(PY) benchmarks/broad.py

bench-cluster: venv redis-server
	$(PY) benchmarks/cluster.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis \
	  .coverage *.egg-info build dist
