"""The CLI, the HTTP API and the dashboard are thin adapters: their modules import each other without a
cycle."""

import ast
from pathlib import Path

import pytest

import databuild

PACKAGE = Path(databuild.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere, also inside functions (a deferred
    import is how a cycle hides). ``from package import submodule`` imports the submodule; any other
    name from a package is its ``__init__``'s."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def import_graph(folder: Path) -> dict[str, set[str]]:
    """Which modules of the package in ``folder`` import which others of it."""
    paths = sorted(folder.glob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for following in sorted(graph.get(node, ())):
            if state.get(following) == "open":
                return [*path[path.index(following) :], following]
            if following not in state:
                found = visit(following, [*path, following])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


@pytest.mark.parametrize("folder", ["web", "cli"])
def test_adapter_modules_import_without_a_cycle(folder: str) -> None:
    graph = import_graph(PACKAGE / folder)
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_only_the_package_imports_the_web_app() -> None:
    graph = import_graph(PACKAGE / "web")
    importers = {name for name, imported in graph.items() if "databuild.web.app" in imported}
    assert importers == {"databuild.web"}


def test_the_cycle_check_finds_a_deferred_import() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
