"""A user's graph that does not load is the user's error, not DataBuild's (docs/cli.md, Errors): every command
that loads it says so in one line naming `DATABUILD_GRAPH`, the exception and the user's file and line, and
exits 2; the SDK raises GraphLoadError and the HTTP API answers 503 with the same line."""

import asyncio
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import GraphLoadError
from databuild.graph import definition, load_graph
from databuild.testing import free_port
from databuild.web import create_app, web_context
from tests import cli_fork as fork_server
from tests.test_error_surfaces import BASE, LOOPBACK, one_line

pytestmark = pytest.mark.unit

# Each mistake a new user makes: its module's text (None: no module at all), the setting, and what the one
# line must say of it (the exception and the user's file and line).
MISTAKES: dict[str, tuple[str | None, str, str]] = {
    "unknown module": (
        None,
        "nosuch:graph",
        "ModuleNotFoundError: No module named 'nosuch'; run the command",
    ),
    "unknown attribute": (
        "from databuild.graph import Graph\n\ngraph = Graph('g')\n",
        "attr_mistake:grpah",
        "module 'attr_mistake' (attr_mistake.py) has no attribute 'grpah'",
    ),
    "syntax error": (
        "def broken(:\n    pass\n",
        "syntax_mistake:graph",
        "SyntaxError: invalid syntax (syntax_mistake.py, line 1)",
    ),
    "exception at import": (
        "import json\n\nraise RuntimeError('no config file here')\n",
        "import_mistake:graph",
        "RuntimeError: no config file here (import_mistake.py, line 3)",
    ),
    "unknown keyword": (
        "from databuild.graph import Graph\n\ngraph = Graph('dims', timezon='Europe/Berlin')\n",
        "keyword_mistake:graph",
        "TypeError: Graph.__init__() got an unexpected keyword argument 'timezon' (keyword_mistake.py, line 3)",
    ),
    "refused declaration": (
        "from databuild.graph import Graph, JobContext\n\ngraph = Graph('g')\n\n\n"
        "@graph.job('sales/{day}/{day}')\ndef sales(ctx: JobContext, day: str) -> None:\n    pass\n",
        "declaration_mistake:graph",
        "GraphDefinitionError: pattern 'sales/{day}/{day}' repeats a placeholder (declaration_mistake.py, line 6)",
    ),
}


def commands() -> dict[str, list[str]]:
    ports = [str(free_port()) for _ in range(3)]
    return {
        "dev": ["dev", "--port", ports[0], "--ui-port", ports[1], "--web-port", ports[2]],
        "worker": ["worker"],
        "want --plan": ["want", "sales/us/2024-01-01", "--plan"],
        "backfill": ["backfill", "sales/{day}", "--from", "2024-01-01", "--to", "2024-01-03"],
    }


def write_modules(folder: Path) -> None:
    for text, setting, _ in MISTAKES.values():
        if text is not None:
            (folder / f"{setting.partition(':')[0]}.py").write_text(text)


def test_every_command_says_the_graph_does_not_load_in_one_line(tmp_path: Path) -> None:
    """Run in the user's folder (the graph module is found there, as `python -m` finds one), with nothing
    of DataBuild's running: the graph is the first thing every command loads, so the line is the graph's."""
    write_modules(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    clean.pop("PYTHONPATH", None)
    runs = [
        (mistake, command, args, setting, says)
        for mistake, (_, setting, says) in MISTAKES.items()
        for command, args in commands().items()
    ]

    def run(setting: str, args: list[str]) -> subprocess.CompletedProcess[str]:
        env = {
            **clean,
            "COLUMNS": "500",
            "DATABUILD_HOME": str(tmp_path / "home"),
            "DATABUILD_GRAPH": setting,
        }
        return fork_server.cli(args, env, tmp_path, timeout=180)

    with ThreadPoolExecutor(8) as pool:
        ran = list(pool.map(lambda r: run(r[3], r[2]), runs))
    log = tmp_path / "home" / "logs" / "databuild.log"
    for (mistake, command, _, setting, says), result in zip(runs, ran, strict=True):
        try:
            one_line(result, 2, f"error: DATABUILD_GRAPH={setting!r} does not load: ")
            assert says in result.stderr
            assert "a bug in DataBuild" not in result.stderr
            if mistake != "unknown attribute":  # an exception was raised: its traceback is kept
                assert f"its traceback is in {log}" in result.stderr
        except AssertionError as failure:
            raise AssertionError(f"{mistake}, on `{command}`: {failure}") from None
    assert "Traceback" in log.read_text() and "no config file here" in log.read_text()
    assert not (tmp_path / "home" / "bel.sqlite").exists()  # nothing was recorded, nor created


def test_the_sdk_and_the_http_api_say_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_modules(tmp_path)
    monkeypatch.chdir(tmp_path)
    _, setting, says = MISTAKES["exception at import"]
    with pytest.raises(GraphLoadError, match="no config file here") as raised:
        load_graph(setting)
    assert says in str(raised.value)
    assert isinstance(raised.value.__cause__, RuntimeError)  # the whole traceback, for a log

    settings = Settings(
        home=tmp_path / "home", graph=setting, database_url=f"sqlite:///{tmp_path / 'bel.sqlite'}"
    )
    with pytest.raises(GraphLoadError, match=r"import_mistake\.py, line 3"):
        asyncio.run(DataBuild.connect(settings))  # before it reaches for Temporal

    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    app = create_app(web_context(settings, bel))
    with TestClient(app, base_url=BASE, client=LOOPBACK, raise_server_exceptions=False) as client:
        response = client.get("/api/wants/w-1")
    assert response.status_code == 503, response.text
    assert says in response.json()["error"] and response.json()["type"] == "GraphLoadError"
    bel.dispose()


def test_an_exception_from_databuilds_own_code_stays_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "own_bug.py").write_text("from databuild.graph import Graph\n\ngraph = Graph('g')\n")
    monkeypatch.chdir(tmp_path)

    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise KeyError("inside DataBuild")

    # As if raised in DataBuild's own package (a module of it that the user's declaration called).
    broken.__code__ = broken.__code__.replace(co_filename=definition.__file__)
    monkeypatch.setattr("databuild.graph.definition.Graph.__init__", broken)
    with pytest.raises(KeyError, match="inside DataBuild"):
        load_graph("own_bug:graph")
