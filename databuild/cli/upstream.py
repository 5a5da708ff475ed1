"""`databuild upstream add|list|remove`: follow other DataBuild graphs."""

from typing import Annotated, Any

import typer

from databuild.cli.app import CliError, JsonFlag, app, emit, run, with_client
from databuild.client import DataBuild
from databuild.config import masked_url
from databuild.durations import parse_duration

upstream_app = typer.Typer(
    help="Follow other DataBuild graphs (pull their events; take their pushes).", no_args_is_help=True
)
app.add_typer(upstream_app, name="upstream")


@upstream_app.command("add")
def upstream_add(
    url: Annotated[str, typer.Argument(help="The upstream graph's HTTP API, e.g. http://upstream:8000")],
    pattern: Annotated[list[str], typer.Option(help="Upstream refs to follow (glob); repeatable.")],
    name: Annotated[str | None, typer.Option(help="What to call the upstream (default: its host).")] = None,
    every: Annotated[str, typer.Option(help="How often to ask it for new events.")] = "5s",
    as_json: JsonFlag = False,
) -> None:
    """Follow an upstream graph durably: its live partitions matching the patterns become available
    here (external partitions) and wake the wants waiting for them. Survives restarts; resumes where it was."""
    import httpx

    from databuild.temporal.protocol import UpstreamInput
    from databuild.temporal.upstream import check_upstream
    from databuild.temporal.wants import start_upstream

    name = name or (httpx.URL(url).host or "").replace(":", "_") or "upstream"
    check_upstream(name, url, pattern)
    spec = UpstreamInput(name=name, url=url, patterns=pattern, poll_every=parse_duration(every))
    run(with_client(lambda db: start_upstream(db.temporal, db.settings.task_queue, spec)))
    emit(as_json, spec, lambda: f"following upstream [bold]{name}[/] at {url} ({', '.join(pattern)})")


@upstream_app.command("list")
def upstream_list(as_json: JsonFlag = False) -> None:
    """Upstream graphs followed, with their cursors and what they applied."""
    from databuild.temporal.protocol import QUERY_UPSTREAM_STATUS, UPSTREAM_WORKFLOW, UpstreamStatus

    async def go(db: DataBuild) -> list[UpstreamStatus]:
        query = (
            f"WorkflowType = '{UPSTREAM_WORKFLOW}' AND ExecutionStatus = 'Running' "
            f"AND TaskQueue = '{db.settings.task_queue}'"
        )
        found = []
        async for execution in db.temporal.list_workflows(query):
            handle = db.temporal.get_workflow_handle(execution.id)
            found.append(await handle.query(QUERY_UPSTREAM_STATUS, result_type=UpstreamStatus))
        return sorted(found, key=lambda u: u.name)

    statuses = run(with_client(go))

    def human() -> Any:
        from rich.table import Table

        table = Table("name", "url", "patterns", "cursor", "applied", "refused")
        for u in statuses:
            url = masked_url(u.url) if u.url else "push only"
            table.add_row(u.name, url, ", ".join(u.patterns), str(u.cursor), str(u.applied), str(u.refused))
        return table

    emit(as_json, statuses, human)


@upstream_app.command("remove")
def upstream_remove(name: str, as_json: JsonFlag = False) -> None:
    """Stop following an upstream graph (what it made available stays available)."""
    from temporalio.service import RPCError

    from databuild.temporal.protocol import upstream_workflow_id

    async def go(db: DataBuild) -> None:
        try:
            await db.temporal.get_workflow_handle(
                upstream_workflow_id(db.settings.task_queue, name)
            ).terminate("databuild upstream remove")
        except RPCError as error:
            raise CliError(
                f"no upstream {name!r} is followed ({error.message}); see `databuild upstream list`"
            ) from None

    run(with_client(go))
    emit(as_json, {"removed": name}, lambda: f"stopped following upstream {name}")
