"""Importing the user's graph (`DATABUILD_GRAPH`). What goes wrong while the user's module imports or
declares its graph is the user's to fix, so it is reported as the graph's error, pointing at the user's
own file and line; only an exception raised by DataBuild's own code stays a bug in DataBuild."""

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from databuild.errors import DataBuildError, GraphLoadError
from databuild.graph.definition import Graph

SETTING = "DATABUILD_GRAPH"
_OWN = Path(__file__).resolve().parents[1]  # the databuild package
# Where the standard library and installed packages live: frames there are nobody's graph code.
_LIBRARIES = tuple(
    {
        str(Path(p).resolve())
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_path(key))
    }
)


def load_graph(spec: str) -> Graph:
    """Import ``module:attribute`` and return the Graph it names; ``GraphLoadError`` if it cannot."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise GraphLoadError(f"{SETTING}={spec!r} must be written as module:attribute, e.g. mygraph:graph")
    _current_folder_on_path()
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        if _raised_by_databuild(error):
            raise  # DataBuild's own code failed while the graph declared itself: a bug, not the user's
        raise GraphLoadError(_does_not_load(spec, error)) from error
    graph: Any = getattr(module, attribute, None)
    if graph is None and not hasattr(module, attribute):
        raise GraphLoadError(
            f"{SETTING}={spec!r} does not load: AttributeError: module {module_name!r} ({_where(module)}) "
            f"has no attribute {attribute!r}"
        )
    if not isinstance(graph, Graph):
        raise GraphLoadError(
            f"{SETTING}={spec!r} names a {type(graph).__name__}, not a databuild Graph "
            f"({_where(module)}): point it at the Graph(...) your module makes"
        )
    return graph


def _current_folder_on_path() -> None:
    """A graph module is found in the folder the command runs in, as `python -m` finds one: the
    `databuild` script's own folder, not the user's, is first on the path otherwise."""
    here = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == here for p in sys.path):
        sys.path.insert(0, here)


def _does_not_load(spec: str, error: Exception) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, SyntaxError):
        message = error.msg  # its str() repeats the file and line, given below
    said = f"{SETTING}={spec!r} does not load: {type(error).__name__}" + (f": {message}" if message else "")
    place = _user_frame(error)
    if place is not None:
        return f"{said} ({place})"
    if isinstance(error, ModuleNotFoundError) and error.name == spec.partition(":")[0].split(".")[0]:
        return f"{said}; run the command in the folder that holds it, or add that folder to PYTHONPATH"
    return said


def _user_frame(error: BaseException) -> str | None:
    """The file and line of the user's code where ``error`` was raised: the innermost frame outside
    DataBuild, the standard library, installed packages and the import machinery."""
    if isinstance(error, SyntaxError) and error.filename:
        return _place(error.filename, error.lineno)
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if _is_users(frame.filename):
            return _place(frame.filename, frame.lineno)
    return None


def _raised_by_databuild(error: BaseException) -> bool:
    """An unexpected exception whose innermost frame is DataBuild's own (a DataBuildError is raised on
    purpose: a declaration the graph refuses is the user's to fix)."""
    if isinstance(error, DataBuildError):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and _inside(frames[-1].filename, str(_OWN))


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    return not _inside(filename, str(_OWN)) and not any(_inside(filename, lib) for lib in _LIBRARIES)


def _inside(filename: str, folder: str) -> bool:
    return str(Path(filename).resolve()).startswith(folder + os.sep)


def _where(module: object) -> str:
    filename = getattr(module, "__file__", None)
    return "no file" if filename is None else _place(filename, None)


def _place(filename: str, line: int | None) -> str:
    """``filename`` as the user would type it (relative to the current folder when under it)."""
    path = Path(filename)
    try:
        shown = str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        shown = filename
    return shown if line is None else f"{shown}, line {line}"
