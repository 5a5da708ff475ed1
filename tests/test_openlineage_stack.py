"""OpenLineage export on the real stack (Temporal, Spark, SQLite): the events of real job runs, with the
instances they read and wrote (settings and the emitter on their own: tests/test_openlineage.py)."""

import uuid
from datetime import datetime
from pathlib import Path

from databuild.jobs.execution import JobExecutor
from databuild.jobs.executors import Executors
from databuild.jobs.openlineage import LineageEmitter, run_id
from databuild.jobs.storage import Storage
from databuild.models import InstanceRef, JobRun, JobRunState, WantState
from tests.helpers import lake, until
from tests.test_openlineage import Event, by_run, read_events

EVENT_TYPES = {"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"}


def assert_valid(event: Event) -> None:
    """The required fields of an OpenLineage RunEvent, and the base fields of every facet."""
    assert event["eventType"] in EVENT_TYPES
    assert "T" in event["eventTime"] and datetime.fromisoformat(event["eventTime"]).tzinfo is not None
    assert event["producer"] and event["schemaURL"].endswith("#/$defs/RunEvent")
    uuid.UUID(event["run"]["runId"])
    assert event["job"]["namespace"] and event["job"]["name"]
    facets = [*event["run"]["facets"].values(), *event["job"]["facets"].values()]
    for dataset in event["inputs"] + event["outputs"]:
        assert dataset["namespace"] == "file" and Path(dataset["name"]).is_absolute()
        facets += dataset.get("facets", {}).values()
    for facet in facets:
        assert facet["_producer"] and facet["_schemaURL"]


def versions(datasets: list[Event]) -> dict[str, str | None]:
    """The instance of each partition a dataset of the event names (by ref, from the databuild facet)."""
    found = {}
    for d in datasets:
        facet = d["facets"]["databuild"]
        assert facet.get("instance_id") == d["facets"].get("version", {}).get("datasetVersion")
        found[facet["ref"]] = facet.get("instance_id")
    return found


def expected(instances: list[InstanceRef]) -> dict[str, str | None]:
    return {i.ref: i.instance_id for i in instances}


# Refs are unique to this module: want ids (hence workflow ids) are shared across the session's Temporal.
async def test_job_runs_emit_start_and_a_final_event_with_instance_versions(
    make_stack, tmp_path: Path
) -> None:
    path = tmp_path / "lineage" / "ol.ndjson"
    stack = await make_stack(graph="tests.graphs:chain", openlineage_url=f"file://{path}")
    done = await stack.db.wait(await stack.db.want("derived/lineage"))
    assert done.state is WantState.successful, done.reason

    runs = {r.job_run_id: r for r in stack.bel.job_runs.query(limit=100)}
    states = sorted((r.job_label, r.state.value) for r in runs.values())
    assert states == [("base", "succeeded"), ("derived", "dep_miss"), ("derived", "succeeded")]
    await until(lambda: len(read_events(path)) == 2 * len(runs), seconds=10)

    events = read_events(path)
    root = lake(stack.settings)
    for job_run_id, emitted in by_run(events).items():
        run: JobRun = stack.bel.job_runs.get(job_run_id)
        final = {"succeeded": "COMPLETE", "dep_miss": "ABORT"}[run.state.value]
        assert [e["eventType"] for e in emitted] == ["START", final]
        start, end = emitted
        for event in emitted:
            assert_valid(event)
            assert event["run"]["runId"] == run_id(job_run_id)
            assert event["job"] == {**event["job"], "namespace": "databuild", "name": run.job_label}
            assert event["run"]["facets"]["databuild"] == {
                **event["run"]["facets"]["databuild"],
                "attempt": 1,
                "want_id": run.want_id,
            }
        # The final event carries what the run cost, as recorded (Spark's accounting of its attempts).
        recorded = [a.cost for a in stack.bel.costs.attempts_of([job_run_id]) if a.cost is not None]
        cost = end["run"]["facets"]["databuildCost"]
        assert cost["known"] and cost["attempts"] == 1 and "databuildCost" not in start["run"]["facets"]
        assert cost["task_seconds"] == sum(c.task_seconds for c in recorded)
        # A dep-miss found its input missing before any Spark work: it ran nothing (known, not unknown).
        assert cost["tasks"] > 0 if run.state is JobRunState.succeeded else cost["tasks"] == 0
        # START: nothing read yet, the refs it will write, without a version.
        assert start["inputs"] == []
        assert versions(start["outputs"]) == {ref: None for ref in run.outputs}
        # The final event: exactly the instances read and written, by UUID.
        assert versions(end["inputs"]) == expected(run.reads)
        if run.state is JobRunState.succeeded:
            assert versions(end["outputs"]) == expected(run.writes)
            # The checks of what it wrote (derived declares one; base none), in its databuild facet.
            assertions = [d["facets"]["databuild"].get("checks") for d in end["outputs"]]
            assert assertions == (
                [[{**assertions[0][0], "name": "rows", "success": True}]]
                if run.job_label == "derived"
                else [None]
            )
        else:
            assert versions(end["outputs"]) == {ref: None for ref in run.outputs}
        # One dataset per output pattern (not per partition path), the partition in the facet.
        for dataset in (*end["inputs"], *end["outputs"]):
            label = dataset["facets"]["databuild"]["ref"].split("/")[0]
            assert dataset["name"] == f"{root}/{label}/{{n}}"
            assert dataset["facets"]["databuild"]["partition"] == {"n": "lineage"}

    final = next(r for r in runs.values() if r.job_label == "derived" and r.state is JobRunState.succeeded)
    base = next(r for r in runs.values() if r.job_label == "base")
    assert final.reads == base.writes  # the lineage chain is joined by the instance UUID
    assert final.reads[0].instance_id == stack.bel.partitions.get("base/lineage").instance_id


async def test_a_run_failing_past_its_retries_emits_one_fail(make_stack, tmp_path: Path) -> None:
    path = tmp_path / "ol.ndjson"
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=2, openlineage_url=str(path))
    done = await stack.db.wait(await stack.db.want("fails/lineage"))
    assert done.state is WantState.failed
    run = stack.bel.job_runs.query()[0]
    await until(lambda: any(e["eventType"] == "FAIL" for e in read_events(path)), seconds=10)

    events = read_events(path)
    assert [e["eventType"] for e in events] == ["START", "START", "FAIL"]  # one START per attempt
    assert {e["run"]["runId"] for e in events} == {run_id(run.job_run_id)}
    for event in events:
        assert_valid(event)
    fail = events[-1]
    assert "boom lineage" in fail["run"]["facets"]["errorMessage"]["message"]
    assert fail["run"]["facets"]["databuild"]["attempt"] == 2
    assert versions(fail["outputs"]) == {"fails/lineage": None}
    assert [d["name"] for d in fail["outputs"]] == [f"{lake(stack.settings)}/fails/{{n}}"]

    # Recording the failure again (a retried activity) changes nothing and emits nothing.
    emitter = LineageEmitter.from_settings(stack.settings, stack.graph)
    storage = Storage(stack.settings.storage_root)
    executors = Executors.from_settings(
        stack.settings, graph=stack.graph, bel=stack.bel, storage=storage, spark=stack.parts.spark
    )
    executor = JobExecutor(stack.bel, storage, executors, "t", lineage=emitter)
    assert executor.fail(run.job_run_id, "again").reason == run.reason
    assert emitter is not None and emitter.flush()
    assert len(read_events(path)) == 3
