"""OpenLineage export without a server: settings, transports, the emitter and dataset naming (the events
of real job runs: tests/test_openlineage_stack.py)."""

import json
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from databuild.config import Settings
from databuild.domain.cost import AttemptCost, SparkCost, run_cost
from databuild.errors import InvalidInputError
from databuild.graph import Graph, load_graph
from databuild.jobs.openlineage import DatasetNaming, LineageEmitter, run_id, transport_from_settings
from databuild.models import CheckResult, CheckSeverity, InstanceRef, JobRun, JobRunState

pytestmark = pytest.mark.unit

Event = dict[str, Any]


def read_events(path: Path) -> list[Event]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_run(events: list[Event]) -> dict[str, list[Event]]:
    runs: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        runs[event["run"]["facets"]["databuild"]["job_run_id"]].append(event)
    return runs


def test_lineage_is_off_by_default_and_bad_urls_are_rejected(monkeypatch, tmp_path: Path) -> None:
    for var in (
        "DATABUILD_OPENLINEAGE_URL",
        "DATABUILD_OPENLINEAGE_NAMESPACE",
        "DATABUILD_OPENLINEAGE_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    settings = Settings.from_env(home=tmp_path)
    assert settings.openlineage_url is None and settings.openlineage_namespace == "databuild"
    assert LineageEmitter.from_settings(settings) is None

    for bad in ("ftp://x", "http://", "file://relative/path", "http://host:99999"):
        with pytest.raises(InvalidInputError, match="DATABUILD_OPENLINEAGE_URL"):
            Settings.from_env(home=tmp_path, openlineage_url=bad)
    monkeypatch.setenv("DATABUILD_OPENLINEAGE_URL", "ftp://x")
    with pytest.raises(
        InvalidInputError, match=r"^bad setting DATABUILD_OPENLINEAGE_URL: unsupported scheme"
    ):
        Settings.from_env(home=tmp_path)
    monkeypatch.setenv("DATABUILD_OPENLINEAGE_URL", "http://localhost:5000")
    monkeypatch.setenv("DATABUILD_OPENLINEAGE_NAMESPACE", " ")
    with pytest.raises(InvalidInputError, match="DATABUILD_OPENLINEAGE_NAMESPACE"):
        Settings.from_env(home=tmp_path)


def test_transports_from_settings(tmp_path: Path) -> None:
    from openlineage.client.transport.file import FileTransport
    from openlineage.client.transport.http import HttpTransport

    http = transport_from_settings(
        Settings(home=tmp_path, openlineage_url="https://lineage.example:5000", openlineage_api_key="s3cret")
    )
    assert isinstance(http, HttpTransport)
    assert (http.url, http.endpoint) == ("https://lineage.example:5000", "api/v1/lineage")
    assert http.config.auth.get_bearer() == "Bearer s3cret"
    custom = transport_from_settings(Settings(home=tmp_path, openlineage_url="http://h:1/custom/lineage"))
    assert isinstance(custom, HttpTransport) and custom.endpoint == "custom/lineage"
    for url in (f"file://{tmp_path}/a/ol.ndjson", str(tmp_path / "a/ol.ndjson")):
        file = transport_from_settings(Settings(home=tmp_path, openlineage_url=url))
        assert isinstance(file, FileTransport) and file.config.append
        assert file.config.log_file_path == str(tmp_path / "a/ol.ndjson")
    assert "s3cret" not in repr(Settings(home=tmp_path, openlineage_api_key="s3cret"))


def fake_run(n: int, width: int) -> JobRun:
    at = datetime.fromisoformat("2024-01-01T00:00:00+00:00")
    return JobRun(
        job_run_id=f"jr-{n:016x}",
        job_label="wide",
        outputs=[f"out/{n}"],
        params={},
        state=JobRunState.succeeded,
        want_id=None,
        attempts=1,
        reason=None,
        missing=[],
        reads=[InstanceRef(ref=f"in/{n}/{i}", instance_id=str(uuid.uuid4())) for i in range(width)],
        writes=[InstanceRef(ref=f"out/{n}", instance_id=str(uuid.uuid4()))],
        workflow_id="wf",
        created_at=at,
        updated_at=at,
    )


def test_concurrent_emits_write_whole_lines_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "ol.ndjson"
    settings = Settings(home=tmp_path, openlineage_url=f"file://{path}")
    emitter = LineageEmitter.from_settings(settings)
    assert emitter is not None
    runs = [fake_run(n, width=200) for n in range(40)]  # ~40 kB per event: larger than any I/O buffer
    threads = [
        threading.Thread(target=lambda r=run: (emitter.started(r, 1), emitter.finished(r))) for run in runs
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    emitter.close()

    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ol")] == ["ol.ndjson"]
    events = read_events(path)  # every line parses: no interleaving
    assert len(events) == 80
    for emitted in by_run(events).values():
        assert [e["eventType"] for e in emitted] == ["START", "COMPLETE"]
        assert len(emitted[1]["inputs"]) == 200


def test_emission_errors_never_reach_the_job(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    emitter = LineageEmitter.from_settings(Settings(home=tmp_path, openlineage_url=str(tmp_path / "ol")))
    assert emitter is not None
    emitter.client.transport.config.log_file_path = str(blocked / "ol.ndjson")  # type: ignore[attr-defined]
    run = fake_run(1, width=1)
    emitter.started(run, 1)
    emitter.finished(run.model_copy(update={"reads": [InstanceRef(ref="../escape", instance_id="x")]}))
    emitter.close()
    assert "could not send the OpenLineage START event" in caplog.text
    assert "could not emit an OpenLineage event" in caplog.text  # a bad ref fails while building the event


def test_http_transport_posts_events_with_the_api_key(tmp_path: Path) -> None:
    received: list[tuple[str, str | None, Event]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Authorization"], json.loads(body)))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = Settings(home=tmp_path, openlineage_url=url, openlineage_api_key="s3cret")
        emitter = LineageEmitter.from_settings(settings)
        assert emitter is not None
        run = fake_run(7, width=2)
        emitter.started(run, 1)
        emitter.finished(run)
        emitter.close()
    finally:
        server.shutdown()
    assert [(path, auth, e["eventType"]) for path, auth, e in received] == [
        ("/api/v1/lineage", "Bearer s3cret", "START"),
        ("/api/v1/lineage", "Bearer s3cret", "COMPLETE"),
    ]
    assert received[1][2]["run"]["runId"] == run_id(run.job_run_id)


def test_an_unreachable_endpoint_does_not_slow_the_job(tmp_path: Path) -> None:
    emitter = LineageEmitter.from_settings(Settings(home=tmp_path, openlineage_url="http://127.0.0.1:9"))
    assert emitter is not None
    run = fake_run(3, width=1)
    started = time.monotonic()
    emitter.started(run, 1)
    emitter.finished(run)
    assert time.monotonic() - started < 0.5  # sending (and its retries) happens on the sender thread
    emitter.close(timeout=0.2)


def test_datasets_are_tables_in_the_catalog_or_patterns_under_the_root(tmp_path: Path) -> None:
    graph = load_graph("examples.demo:graph")
    graph_with_odd = Graph("odd")
    graph_with_odd.job("raw/{date}/part", "kept/{date}", tables={"kept/{date}": None})(lambda ctx, date: None)
    embedded = DatasetNaming(Settings(home=tmp_path, storage_root="s3a://bucket/lake"), graph)
    assert embedded("daily_users/2024-01-03") == (
        "hive://embedded",
        "default.daily_users",
        {"date": "2024-01-03"},
    )
    shared = Settings(home=tmp_path, catalog="thrift://meta:9083", catalog_database="analytics")
    assert DatasetNaming(shared, graph)("daily_users/2024-01-03")[:2] == (
        "hive://meta:9083",
        "analytics.daily_users",
    )
    # No table: the pattern under the storage root, one dataset for every partition of it.
    odd = DatasetNaming(Settings(home=tmp_path, storage_root="s3a://bucket/lake"), graph_with_odd)
    assert odd("raw/2024-01-03/part") == ("s3a://bucket", "/lake/raw/{date}/part", {"date": "2024-01-03"})
    assert odd("kept/2024-01-03")[:2] == ("s3a://bucket", "/lake/kept/{date}")
    tables_off = DatasetNaming(Settings(home=tmp_path, catalog="none"), graph)
    assert tables_off("daily_users/2024-01-03")[1] == f"{tmp_path.resolve()}/data/daily_users/{{date}}"
    # An Iceberg table: its location (as Spark's integration names it), its catalog name a symlink; the
    # catalog's namespace never carries its password.
    iceberg = Settings(
        home=tmp_path,
        storage_root="s3a://bucket/lake",
        table_format="iceberg",
        catalog="none",
        database_url="postgresql+psycopg://bel:secret@db.internal:5432/bel",
    )
    naming = DatasetNaming(iceberg, graph)
    assert naming("daily_users/2024-01-03")[:2] == (
        "s3a://bucket",
        "/lake/_databuild/tables/default/daily_users",
    )
    assert naming.symlink("daily_users/2024-01-03") == (
        "postgresql://db.internal:5432",
        "default.daily_users",
    )
    assert embedded.symlink("daily_users/2024-01-03") is None


def test_check_results_are_quality_assertions_of_the_inputs_and_checks_of_the_outputs(tmp_path: Path) -> None:
    path = tmp_path / "ol.ndjson"
    emitter = LineageEmitter.from_settings(Settings(home=tmp_path, openlineage_url=f"file://{path}"))
    assert emitter is not None
    run = fake_run(1, width=1)
    results = [
        CheckResult(
            name="not_null(id)", ref="out/1", severity=CheckSeverity.blocking, passed=True, message="ok"
        ),
        CheckResult(
            name="small",
            ref="out/1",
            severity=CheckSeverity.warning,
            passed=False,
            message="4 rows (expected 0 to 3)",
            metrics={"rows": 4},
        ),
    ]
    read = {i.instance_id or "": [r.model_copy(update={"ref": i.ref}) for r in results] for i in run.reads}
    emitter.finished(run, {"out/1": results}, read_checks=read)
    failed = run.model_copy(update={"state": JobRunState.failed, "writes": [], "job_run_id": "jr-2"})
    emitter.finished(failed, {"out/1": results[:1]})
    emitter.finished(run.model_copy(update={"job_run_id": "jr-3"}))  # no checks: no facet
    emitter.close()

    complete, fail, plain = read_events(path)
    # What the run read: the standard input facet, as the spec declares it.
    assert complete["inputs"] and all(
        [a["name"] for a in i["inputFacets"]["dataQualityAssertions"]["assertions"]]
        == ["not_null(id)", "small"]
        for i in complete["inputs"]
    )
    assert all("dataQualityAssertions" not in o["facets"] for o in complete["outputs"])
    # What it wrote: in the output's databuild facet.
    assert complete["outputs"][0]["facets"]["databuild"]["checks"] == [
        {
            "assertion": "not_null(id)",
            "name": "not_null(id)",
            "success": True,
            "severity": "error",
            "description": "ok",
            "params": {},
        },
        {
            "assertion": "small",
            "name": "small",
            "success": False,
            "severity": "warn",
            "description": "4 rows (expected 0 to 3)",
            "params": {"rows": 4},
        },
    ]
    assert fail["eventType"] == "FAIL" and fail["outputs"][0]["facets"]["databuild"]["ref"] == "out/1"
    assert [a["name"] for a in fail["outputs"][0]["facets"]["databuild"]["checks"]] == ["not_null(id)"]
    assert plain["outputs"][0]["facets"]["databuild"].get("checks") is None
    assert all(not i.get("inputFacets") for i in plain["inputs"])


def test_a_runs_cost_is_its_databuild_cost_run_facet(tmp_path: Path) -> None:
    path = tmp_path / "ol.ndjson"
    emitter = LineageEmitter.from_settings(Settings(home=tmp_path, openlineage_url=f"file://{path}"))
    assert emitter is not None
    run = fake_run(1, width=1)
    at = datetime(2024, 1, 1, tzinfo=UTC)

    def attempt(n: int, cost: SparkCost | None) -> AttemptCost:
        executor, reason = ("session", None) if cost else ("connect", "Spark Connect cannot say")
        return AttemptCost(
            job_run_id=run.job_run_id, attempt=n, job_label="j", executor=executor, cost=cost,
            unknown_reason=reason, at=at,
        )  # fmt: skip

    spent = SparkCost(task_seconds=2.5, cpu_seconds=1.0, input_bytes=10, output_bytes=20, tasks=4)
    emitter.finished(run, cost=run_cost([attempt(1, spent), attempt(2, spent)], ["out/1"]))
    unknown = run.model_copy(update={"job_run_id": "jr-2"})
    emitter.finished(unknown, cost=run_cost([attempt(1, None)], ["out/1"]))
    emitter.finished(run.model_copy(update={"job_run_id": "jr-3"}))  # no cost recorded: no facet
    emitter.close()

    known, unknown_event, plain = read_events(path)
    facet = known["run"]["facets"]["databuildCost"]
    assert (facet["known"], facet["attempts"], facet["task_seconds"], facet["tasks"]) == (True, 2, 5.0, 8)
    assert facet["output_bytes"] == 40 and facet["_schemaURL"].endswith("DataBuildCostRunFacet")
    assert unknown_event["run"]["facets"]["databuildCost"]["known"] is False
    assert unknown_event["run"]["facets"]["databuildCost"]["unknown_reason"] == "Spark Connect cannot say"
    assert "databuildCost" not in plain["run"]["facets"]
