"""A job's code version: declared (``version="2"``), or derived from its function's code so that comments,
docstrings, formatting and the decorator do not count.

The derived version hashes the function's syntax tree. It sees the body only: a job whose output also
depends on helpers or constants outside it should declare ``version=`` and change it with them."""

import ast
import hashlib
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

from databuild.errors import GraphDefinitionError

# A short hash reads well in views and is plenty to tell one edit of one job from another.
DERIVED_LENGTH = 12


def code_version(fn: Callable[..., Any]) -> str:
    """``fn``'s version: a hash of its syntax tree without docstrings or decorators (or, where Python
    cannot find its source, of its compiled code)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return _digest(_compiled(fn))
    # Unparsed, not dumped: the tree's dump changes between Python versions (3.12 added fields), and a
    # worker and a CLI on two Pythons must derive one version from one code.
    return _digest(ast.unparse(_without_docs(tree)))


def _without_docs(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.decorator_list = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and _is_doc(node.body[0]):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def _is_doc(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _compiled(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise GraphDefinitionError(f"cannot derive a version for {fn!r}: declare one, e.g. version='1'")
    return _code_text(code)


def _code_text(code: types.CodeType) -> str:
    """The compiled code without addresses or line numbers (nested functions' code objects included), so
    every process derives the same text for it."""
    consts = [_code_text(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code, consts, code.co_names, code.co_varnames))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DERIVED_LENGTH]
