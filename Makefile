# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# The venvs' interpreter: the system's CPython, /usr/bin/python3, when it is there,
# 3.10 or newer and able to make a venv, else python3 on PATH; `make test
# PYTHON=python3.13` chooses. Debian's is linked with libpython statically; with
# pyenv's default build, which loads it as a shared library, `make test` took
# 549 CPU-s against 502, and the suite's time on 2 cores follows its CPU
# (docs/development.md).
SYSTEM_PYTHON := /usr/bin/python3
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell $(SYSTEM_PYTHON) -c 'import ensurepip, sys; sys.exit(sys.version_info < (3, 10))' \
	  2>/dev/null && echo $(SYSTEM_PYTHON) || echo python3)
endif
VENV   := .venv
PY     := $(VENV)/bin/python
# The oldest Scrapy we support (pyproject.toml): `make test` runs the whole suite
# on it too, in a venv of its own.
FLOOR_SCRAPY := 2.14.*
FLOOR_VENV   := .venv-floor

.PHONY: venv floor-venv test test-fast lint typecheck docs pytest pytest-twisted pytest-floor coverage redis-server \
	demo bench-parser bench-crawl bench-broad bench-cluster bench-request-path clean

venv: $(VENV)/.installed-test
floor-venv: $(FLOOR_VENV)/.installed-test

# Installs go through uv, installed into .venv first: it sets up a venv in a few
# seconds where pip takes half a minute of CPU (measured, docs/development.md).
# pip is the fall-back when uv cannot be had. --no-compile (pip): the suite imports
# a fraction of what is installed and compiles what it imports; uv never compiles.
UV := $(VENV)/bin/uv
PIP_INSTALL = -m pip install -q --no-compile --disable-pip-version-check
TEST_EXTRAS  := -e '.[test,redis,docs]'
FLOOR_EXTRAS := -e '.[test,redis]' 'scrapy==$(FLOOR_SCRAPY)'
install = if test -x $(UV); then $(UV) pip install -q --python $(1) $(2); \
	  else $(1) $(PIP_INSTALL) $(2); fi

# Some machines set PYTHONDONTWRITEBYTECODE (the development machine does): the suite's
# many Python processes (pytest's, the forked crawls', the subprocesses') then
# each compiled Scrapy, Twisted and the tests again, about 3 CPU-s apiece for a
# pytest process. The set-up compiles what the suite imports once (pytest
# --collect-only), and every later process reads it.
export PYTHONDONTWRITEBYTECODE :=

$(VENV)/.created:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) $(PIP_INSTALL) uv || echo "note: no uv, installing with pip (slower)"
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.created
	@echo "== .venv: scrapy-rep with the test, redis and docs tools"
	$(call install,$(PY),$(TEST_EXTRAS))
	$(VENV)/bin/pytest --collect-only -q -p no:cacheprovider >/dev/null
	touch $@

# The demo needs scrapy-rep and Scrapy, nothing of the test toolchain.
$(VENV)/.installed-demo: pyproject.toml $(VENV)/.created
	$(call install,$(PY),-e .)
	touch $@

$(FLOOR_VENV)/.installed-test: pyproject.toml $(VENV)/.created
	@echo "== .venv-floor: the same on Scrapy $(FLOOR_SCRAPY)"
	test -x $(FLOOR_VENV)/bin/python || $(UV) venv -q --python $(PYTHON) $(FLOOR_VENV) \
	  || $(PYTHON) -m venv $(FLOOR_VENV)
	$(call install,$(FLOOR_VENV)/bin/python,$(FLOOR_EXTRAS))
	$(FLOOR_VENV)/bin/pytest --collect-only -q -p no:cacheprovider >/dev/null
	touch $@

# lint-imports: the import contracts of pyproject.toml ([tool.importlinter]): arrows
# point down the layers, no import circles, a Scrapy-free core.
lint: venv
	@echo "== lint: ruff check, ruff format --check, lint-imports (a few seconds)"
	$(VENV)/bin/ruff check scrapy_rep tests benchmarks example_project
	$(VENV)/bin/ruff format --check scrapy_rep tests benchmarks example_project
	$(VENV)/bin/lint-imports --no-cache --no-logo

typecheck: venv
	@echo "== typecheck: mypy --strict scrapy_rep (under a minute)"
	$(VENV)/bin/mypy scrapy_rep

# The documentation site (docs/): every warning is an error.
docs: venv
	@echo "== docs: sphinx-build -W, every warning an error (under a minute)"
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Each lane runs its tests on several processes (pytest-xdist; a test that waits
# on real time leaves the cores to the others), each taking the next test as it
# ends one, the modules with slow tests first (tests/conftest.py), so no lane ends
# on one long test. The newest Scrapy's run, which has the most tests, takes
# JOBS + 1, the Twisted lane, which has the fewest (the crawl tests alone), JOBS - 1,
# the floor's JOBS: as many processes as 3 each, and alone on 2 cores 5 min 29 s
# against 6 min 5 s (docs/development.md). 4 for the floor too took 4 min 39 s
# alone but failed two timing tests beside a second make test.
# `make test JOBS=1` runs each lane on one. Each appends a line per test started
# and ended, with its wall and CPU time, to pytest-LANE.log: the test under way when
# a run was killed is its last "start" (a SIGTERM also prints it).
JOBS ?= 3
XDIST = -n $(JOBS) --dist load
NEWEST_JOBS ?= $(if $(filter 1,$(JOBS)),1,$(shell echo $$(($(JOBS) + 1))))
TWISTED_JOBS ?= $(if $(filter 1,$(JOBS)),1,$(shell echo $$(($(JOBS) - 1))))
FLOOR_JOBS ?= $(JOBS)

# The whole suite on the newest Scrapy, on the asyncio reactor.
pytest: venv redis-server
	@echo "== pytest: the whole suite on the newest Scrapy"
	$(VENV)/bin/pytest -q -p no:cacheprovider -n $(NEWEST_JOBS) --dist load --progress-log=pytest-newest.log

# Branch coverage of scrapy_rep/ on the newest Scrapy (what it leaves out and why:
# docs, development page). Not part of make test: tracing doubles the suite's CPU.
coverage: venv redis-server
	@echo "== coverage: the whole suite on the newest Scrapy, with branch coverage"
	$(VENV)/bin/pytest -q -p no:cacheprovider $(XDIST) --cov --cov-report=term:skip-covered \
	  --progress-log=pytest-coverage.log

# The newest Scrapy on Twisted's own reactor (epoll on Linux): waiting, fetching
# and pacing run on Deferreds alone there, and a fetch can end before anyone awaits it.
# Every test that crawls in pytest's process; those marked reactor_free (the parser,
# the docs, crawls in subprocesses with their own reactor) would only repeat.
pytest-twisted: venv redis-server
	@echo "== pytest-twisted: the crawl tests on the newest Scrapy, on Twisted's own reactor"
	$(VENV)/bin/pytest -q -p no:cacheprovider -n $(TWISTED_JOBS) --dist load --reactor=default -m "not reactor_free" \
	  --progress-log=pytest-twisted.log

# The oldest Scrapy.
# Tests marked scrapy_free (the parser, the corpus, the docs, packaging) run no
# Scrapy code: the newest run has them.
pytest-floor: floor-venv redis-server
	@echo "== pytest-floor: the suite but the Scrapy-free tests, on Scrapy $(FLOOR_SCRAPY)"
	$(FLOOR_VENV)/bin/python -c "import scrapy; print('Scrapy', scrapy.__version__, '(floor)')"
	$(FLOOR_VENV)/bin/pytest -q -p no:cacheprovider -n $(FLOOR_JOBS) --dist load -m "not scrapy_free" \
	  --progress-log=pytest-floor.log

# The Redis tests and bench-cluster start their own redis-server (Debian's package)
# on a free port. Without it, the Redis tests are skipped, or fail when CI=true.
redis-server:
	@command -v redis-server >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server) || \
	  echo "warning: could not install redis-server (Debian: apt-get install -y redis-server)"

# Everything at once: the checks, and three runs of the suite (the whole suite on the
# newest Scrapy and on the oldest, asyncio reactor; the crawl tests on the newest on
# Twisted's own reactor), each on JOBS processes. Most tests wait on real time
# (timeouts, Crawl-delay, pauses, subprocess crawls): side by side they overlap.
# The two venvs and Redis are set up side by side too.
test:
	$(MAKE) -j3 --output-sync=target venv floor-venv redis-server
	@echo "== lint, typecheck, docs, pytest, pytest-twisted and pytest-floor side by side:"
	@echo "   about 6 minutes on 2 cores, set-up included; each prints its results when it ends"
	$(MAKE) -j6 --output-sync=target lint typecheck docs pytest pytest-twisted pytest-floor

# Everything but the subprocess and real-time-delay tests (marked slow) and the
# whole-corpus tests (marked corpus), on every core: under 60 s on two busy cores.
test-fast: venv
	@echo "== the suite without the slow and whole-corpus tests, on every core (under a minute)"
	$(VENV)/bin/pytest -q -m "not slow and not corpus" -n auto

demo: $(VENV)/.installed-demo
	$(PY) example_project/demo.py

bench-parser: venv
	$(PY) benchmarks/parser.py

bench-crawl: venv
	$(PY) benchmarks/crawl.py

bench-broad: venv
	$(PY) benchmarks/broad.py

bench-request-path: venv
	$(PY) benchmarks/request_path.py

bench-cluster: venv redis-server
	$(PY) benchmarks/cluster.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis \
	  .coverage *.egg-info build dist pytest-newest.log pytest-twisted.log pytest-floor.log pytest-coverage.log
