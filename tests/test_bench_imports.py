"""Benchmarks stand on the product (and on each other), never on the tests; the tests and the product stand
on nothing in bench/. What tests and benchmarks share lives in the product's testing package
(databuild.testing), or, for the soak under faults that runs the demo, in chaos/ beside it; bench/
holds the benchmarks, scripts that measure and print; a test may only run a benchmark
(``bench.bench_<name>``) at a small size."""

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("databuild", "workflows", "activities", "worker", "examples")
# A benchmark script; `common` is their command-line scaffolding.
BENCHMARK = re.compile(r"bench\.bench_\w+")
# A string that names a module of bench/, as `python -m bench.x` or a graph reference `bench.x:graph` does.
NAMES_BENCH = re.compile(r"(bench(?:\.\w+)+)(?::\w+)?")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or deferred inside a function or block."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def named_modules(path: Path) -> set[str]:
    """The modules of bench/ that a file's strings name whole (a command line's words, a graph's
    reference), which load them as surely as an import."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(m[1] for word in node.value.split() if (m := NAMES_BENCH.fullmatch(word)))
    return found


def test_no_bench_or_chaos_module_imports_the_tests() -> None:
    modules = sorted(p for folder in ("bench", "chaos") for p in (ROOT / folder).rglob("*.py"))
    assert len(modules) > 5
    offending = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.split(".")[0] == "tests")
        for path in modules
    }
    assert not {path: found for path, found in offending.items() if found}


def test_tests_use_bench_only_to_run_a_benchmark() -> None:
    # (This file names modules of bench/ in its own samples.)
    modules = sorted(set((ROOT / "tests").rglob("*.py")) - {Path(__file__).resolve()})
    assert len(modules) > 40
    used = {
        str(path.relative_to(ROOT)): {
            m for m in imported_modules(path) | named_modules(path) if m.split(".")[0] == "bench"
        }
        for path in modules
    }
    assert {"bench.bench_views"} <= used["tests/test_bench_smoke.py"]  # the check sees a command line
    offending = {path: sorted(m for m in found if not BENCHMARK.fullmatch(m)) for path, found in used.items()}
    assert not {path: found for path, found in offending.items() if found}


def test_the_product_imports_nothing_from_bench_or_chaos() -> None:
    modules = sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))
    assert len(modules) > 50
    offending = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m.split(".")[0] in ("bench", "chaos")
        )
        for path in modules
    }
    assert not {path: found for path, found in offending.items() if found}


def test_bench_holds_only_benchmark_scripts() -> None:
    modules = {path.stem for path in (ROOT / "bench").glob("*.py")} - {"__init__", "common"}
    assert modules and all(BENCHMARK.fullmatch(f"bench.{name}") for name in modules), sorted(modules)
    for name in modules:
        assert 'if __name__ == "__main__":' in (ROOT / "bench" / f"{name}.py").read_text(), name


def test_the_checks_see_deferred_imports_and_named_modules(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    with x:\n        from tests.conftest import y\nimport tests.helpers\n"
        "GRAPH = 'bench.graphs:graph'\nRUN = ['-m', 'bench.bench_views']\nNOT = 'see bench/chaos.py'\n"
    )
    assert imported_modules(sample) == {"tests.conftest", "tests.helpers"}
    assert named_modules(sample) == {"bench.graphs", "bench.bench_views"}
