"""Benchmarks stand on the product (and on each other), never on the tests: tests may import bench."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or deferred inside a function or block."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_bench_module_imports_the_tests() -> None:
    modules = sorted((ROOT / "bench").rglob("*.py"))
    assert len(modules) > 5
    offending = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.split(".")[0] == "tests")
        for path in modules
    }
    assert not {path: found for path, found in offending.items() if found}


def test_the_check_sees_deferred_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    with x:\n        from tests.conftest import y\nimport tests.helpers\n")
    assert imported_modules(sample) == {"tests.conftest", "tests.helpers"}
