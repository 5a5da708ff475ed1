"""The `databuild` Typer app and what every command shares: settings, the SDK client, output."""

import asyncio
import inspect
import json
import os
import sys
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from databuild.client import DataBuild
from databuild.config import DEFAULT_HOME, Settings
from databuild.durations import format_duration
from databuild.errors import GraphDefinitionError, GraphLoadError, InvalidInputError
from databuild.failures import exit_code, understood, unexpected
from databuild.graph import Graph, load_graph
from databuild.models import MAX_INDEX
from databuild.process import keep_traceback, log_quietly
from databuild.views.lineage import Page

if TYPE_CHECKING:
    from databuild.bel import BuildEventLog

STACK_PANEL = "Run the stack"  # where `--help` lists the commands that start a process: dev, web, worker
app = typer.Typer(
    help="DataBuild: declare the partitions you want; DataBuild builds them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

console = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
PlanFlag = Annotated[
    bool, typer.Option("--plan", help="Show what it would build, how long, and SLA misses; record nothing.")
]
Limit = Annotated[int, typer.Option(min=1, max=MAX_INDEX, help="Rows to show.")]
State = Annotated[str | None, typer.Option(help="Only this state.")]
Prefix = Annotated[str | None, typer.Option(help="Only refs starting with this.")]
Pattern = Annotated[
    str | None, typer.Option("--pattern", help="Only refs matching this glob: * within a segment, ** across.")
]
Offset = Annotated[int, typer.Option(min=0, max=MAX_INDEX, help="Skip this many rows (paging).")]


class CliError(InvalidInputError):
    """A command's arguments do not go together."""


def settings(**overrides: object) -> Settings:
    return Settings.from_env(**overrides)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def client(*, lazy: bool = False, reads_only: bool = False) -> DataBuild:
    """The SDK client every change of state goes through (``lazy``: it connects to Temporal only if a
    call needs it, so BEL-only commands work while Temporal is down; ``reads_only``: a BEL not created
    yet is read as empty and left uncreated)."""
    return await DataBuild.connect(settings(), lazy=lazy, reads_only=reads_only)


async def with_client(
    call: Callable[[DataBuild], Coroutine[Any, Any, T]], *, lazy: bool = False, reads_only: bool = False
) -> T:
    db = await client(lazy=lazy, reads_only=reads_only)
    async with db:
        return await call(db)


def graph_or_note() -> Graph | None:
    """The graph, for which instances are stale; without it (it does not load here) a view is the BEL's
    alone and still shown, with a note that whether its instances are stale is not."""
    try:
        return load_graph(settings().graph)
    except GraphDefinitionError as error:
        err.print(f"[yellow]note:[/] whether it is stale is not shown: {error}")
        return None


def bel() -> "BuildEventLog":
    from databuild.bel import BuildEventLog

    return BuildEventLog.create(settings().database_url.get_secret_value())


def duration(value: timedelta | None) -> str:
    return "none" if value is None else format_duration(value)


def emit(as_json: bool, value: Any, human: Callable[[], Any]) -> None:
    if as_json:
        print(json.dumps(jsonable(value), indent=2, default=str))
    else:
        console.print(human())


def jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def page_note(page: Page) -> str:
    return "" if page.next_offset is None else f"more: --offset {page.next_offset}"


def summarise_commands(typer_app: typer.Typer) -> None:
    """Give every command of ``typer_app`` (and of its groups) the first paragraph of its docstring, with
    its line breaks joined, as the line `--help` lists it by: Typer keeps a docstring's line breaks
    there, which broke each summary at the source's margin rather than the terminal's."""
    for command in typer_app.registered_commands:
        if command.short_help is None and command.callback is not None and command.callback.__doc__:
            first = inspect.cleandoc(command.callback.__doc__).split("\n\n")[0]
            command.short_help = " ".join(first.split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            summarise_commands(group.typer_instance)


def main() -> None:
    # The home from the environment as written: the settings may be what is wrong.
    log_file = log_quietly(Path(os.environ.get("DATABUILD_HOME") or DEFAULT_HOME))
    code: int = 0
    try:
        app(prog_name="databuild")  # as the console script names it, whichever way it was started
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except Exception as error:
        known = understood(error)
        if known is None:
            message = unexpected(error, str(keep_traceback(error, log_file)))
        elif isinstance(known, GraphLoadError) and known.__cause__ is not None:
            message = f"{known}; its traceback is in {keep_traceback(known.__cause__, log_file)}"
        else:
            message = str(known)
        # One line, however wide the terminal, and printed as is (messages quote user input).
        err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
        code = exit_code(error)
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal SDK can abort the interpreter at exit (PyGILState_Release); leave directly.
    os._exit(code)
