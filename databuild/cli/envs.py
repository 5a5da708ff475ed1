"""`databuild envs`: the environments, the workers serving each now, and which version of each job they
run (a job whose versions differ is shown in red: a fresh rebuild of it is refused until they agree)."""

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from databuild.cli.app import JsonFlag, app, emit, run, with_client
from databuild.domain.workers import Environment


@app.command("envs")
def envs(as_json: JsonFlag = False) -> None:
    """The environments with the workers serving each now and the version of each job they run."""
    found = run(with_client(lambda db: db.envs()))
    emit(as_json, found, lambda: Group(*(environment_view(e) for e in found)))


def environment_view(env: Environment) -> RenderableType:
    title = Text.assemble((env.name, "bold"), f" (task queue {env.task_queue}): ")
    if not env.workers:
        return Text.assemble(title, ("no worker serves it now; start one with `databuild worker`", "yellow"))
    title.append(f"{len(env.workers)} worker{'s' if len(env.workers) != 1 else ''}")
    jobs = sorted({label for w in env.workers for label in w.versions})
    table = Table("job", *(w.identity for w in env.workers), box=None, header_style="bold")
    for label in jobs:
        style = "red" if label in env.differing else ""
        table.add_row(
            Text(label, style=style), *(Text(w.versions.get(label, "-"), style=style) for w in env.workers)
        )
    if env.differing:
        verdict = Text(
            f"versions differ for {', '.join(env.differing)}: a fresh rebuild of their partitions is refused "
            "until every worker runs one version",
            style="red",
        )
    else:
        verdict = Text("every worker runs the same version of every job", style="green")
    return Group(title, table, verdict)
