"""A job's derived code version (``graph.versions``): comments, docstrings, formatting and the decorator
do not count; the code does; every process derives the same."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from databuild.graph.versions import DERIVED_LENGTH, code_version

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]

ORIGINAL = '''
import functools

@functools.lru_cache
def job(ctx, date):
    """Counts the day's events."""
    events = ctx.read(f"raw/{date}")
    ctx.write(f"count/{date}", events.groupBy("user").count())
'''

# The same code: other comments, docstring, formatting and decorator.
RESTYLED = """
def job(ctx, date):  # renamed nothing, reformatted everything
    # a comment
    events = ctx.read(
        f"raw/{date}"
    )
    ctx.write(f"count/{date}",
              events.groupBy("user").count())
"""

CHANGED = '''
def job(ctx, date):
    """Counts the day's events."""
    events = ctx.read(f"raw/{date}")
    ctx.write(f"count/{date}", events.groupBy("user", "country").count())
'''


def module(tmp_path: Path, name: str, source: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def test_only_the_code_counts(tmp_path: Path) -> None:
    original = code_version(module(tmp_path, "original", ORIGINAL).job.__wrapped__)
    assert len(original) == DERIVED_LENGTH
    assert code_version(module(tmp_path, "restyled", RESTYLED).job) == original
    assert code_version(module(tmp_path, "changed", CHANGED).job) != original


def test_every_process_derives_the_same_version(tmp_path: Path) -> None:
    module(tmp_path, "shared", CHANGED)
    script = (
        "import shared; from databuild.graph.versions import code_version; print(code_version(shared.job))"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PYTHONHASHSEED": "random"}
    found = {
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert found == {code_version(module(tmp_path, "shared", CHANGED).job) + "\n"}


def test_code_without_source_is_versioned_by_its_compiled_form() -> None:
    def compiled(body: str) -> object:
        space: dict[str, object] = {}
        exec(
            compile(
                f"def job(ctx):\n    def inner():\n        return {body}\n    return inner", "<job>", "exec"
            ),
            space,
        )
        return space["job"]

    assert code_version(compiled("1")) == code_version(compiled("1"))  # nested code: no addresses
    assert code_version(compiled("1")) != code_version(compiled("2"))
