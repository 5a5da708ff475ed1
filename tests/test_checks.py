"""Checks without Spark: what a graph may declare (and the errors that name the job and the fix), the
checks that need no Spark job, and the pure rules that choose their events (databuild.domain.checks)."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from databuild.bel import BuildEventLog
from databuild.cli import render
from databuild.config import Settings
from databuild.domain import checks as rules
from databuild.domain import decisions
from databuild.domain import events as ev
from databuild.errors import GraphDefinitionError, InvalidInputError, InvalidTransitionError
from databuild.graph import (
    CheckContext,
    Graph,
    Verdict,
    accepted_values,
    custom,
    not_null,
    row_count,
    schema,
    unique,
)
from databuild.models import (
    CheckResult,
    CheckSeverity,
    Column,
    ImpactedInstance,
    InstanceFacts,
    InstanceRef,
    Partition,
    PartitionStatus,
    TaintImpact,
    WantSpec,
)
from databuild.views.lineage import partition_view
from databuild.web import create_app, web_context

pytestmark = pytest.mark.unit
AT = datetime(2024, 1, 1, tzinfo=UTC)


def declare(*outputs: str, checks: list[object]) -> Graph:
    graph = Graph("g")
    graph.job(*outputs, checks=checks)(lambda ctx, date: None)  # type: ignore[arg-type]
    return graph


def test_checks_bind_to_the_output_they_test() -> None:
    graph = declare(
        "sums/{date}",
        "tops/{date}",
        checks=[row_count(min=1, output="sums/{date}"), not_null("user_id", output="tops/{date}")],
    )
    job = graph.jobs[0]
    assert [c.name for c in job.checks_of("sums/2024-01-01")] == ["row_count(1..)"]
    assert [c.name for c in job.checks_of("tops/2024-01-01")] == ["not_null(user_id)"]
    only = declare("users/{date}", checks=[unique("user_id", severity="warning")]).jobs[0]
    assert only.checks[0].output == "users/{date}" and only.checks[0].severity == "warning"


@pytest.mark.parametrize(
    ("outputs", "checks", "says"),
    [
        (("a/{date}",), [row_count(min=1, output="b/{date}")], "b/{date}, which the job does not write"),
        (("a/{date}", "b/{date}"), [row_count(min=1)], "say which with output="),
        (("a/{date}",), [not_null("x"), not_null("x")], "two checks named 'not_null(x)'"),
        (
            ("a/{date}",),
            [schema({"user_id": "bigint"}), not_null("usr_id")],
            "names column usr_id, which its schema contract does not declare",
        ),
        (("a/{date}",), [schema({"user_id": "bigintt"})], "not a Spark SQL type"),
        (("a/{date}",), [row_count(min=5, max=1)], "min=5 is more than max=1"),
        (("a/{date}",), [row_count()], "give min=, max= or both"),
        (("a/{date}",), [row_count(min=-1)], "at least 0"),
        (("a/{date}",), [not_null()], "name at least one column"),
        (("a/{date}",), [accepted_values("kind", [])], "give the accepted values"),
        (("a/{date}",), [not_null("x", severity="fatal")], "choose 'blocking' or 'warning'"),
        (("a/{date}",), [custom(42)], "not a function"),  # type: ignore[arg-type]
        (("a/{date}",), ["not_null(x)"], "give checks made by databuild.graph.checks"),
    ],
)
def test_bad_declarations_are_refused_naming_the_job(
    outputs: tuple[str, ...], checks: list[object], says: str
) -> None:
    with pytest.raises(GraphDefinitionError, match="job '<lambda>'") as raised:
        declare(*outputs, checks=checks)
    assert says in str(raised.value)


FACTS = InstanceFacts(
    rows=3,
    bytes=10,
    columns=[Column(name="user_id", type="bigint"), Column(name="amount", type="decimal(10,2)")],
)


def context(facts: InstanceFacts | None = FACTS) -> CheckContext:
    return CheckContext(spark=None, ref="a/1", instance_id="i1", params={"n": "1"}, facts=facts)  # type: ignore[arg-type]


def test_a_schema_contract_and_a_row_count_read_the_recorded_facts_without_spark() -> None:
    frame = None  # neither touches the data: a Spark call on it would raise here
    ok = schema({"user_id": "long", "amount": "DECIMAL(10, 2)"}, exact=True).result(context(), lambda: frame)  # type: ignore[arg-type]
    assert ok.passed and ok.message == "2 columns as declared"
    bad = schema({"user_id": "string", "country": "string"}, exact=True).result(context(), lambda: frame)  # type: ignore[arg-type]
    assert not bad.passed and bad.severity is CheckSeverity.blocking
    assert (
        bad.message == "user_id is bigint, not string; no column country; columns not in the contract: amount"
    )
    assert row_count(min=1, max=2).result(context(), lambda: frame).message == "3 rows (expected 1 to 2)"  # type: ignore[arg-type]
    assert row_count(min=1).result(context(), lambda: frame).metrics == {"rows": 3}  # type: ignore[arg-type]


def test_a_check_on_a_column_the_data_lacks_fails_saying_so() -> None:
    result = not_null("country").result(context(), lambda: None)  # type: ignore[arg-type]
    assert not result.passed
    assert result.message == "the written data has no column country (its columns: user_id, amount)"


def test_a_custom_check_returns_a_verdict_or_a_bool() -> None:
    def fine(ctx: CheckContext, frame: object) -> Verdict:
        return Verdict(passed=True, message=f"{ctx.params['n']} ok", metrics={"score": 0.5})

    result = custom(fine, severity="warning").result(context(), lambda: None)  # type: ignore[arg-type]
    assert (result.name, result.passed, result.message, result.metrics) == (
        "fine",
        True,
        "1 ok",
        {"score": 0.5},
    )
    assert not custom(lambda c, f: False, name="never").result(context(), lambda: None).passed  # type: ignore[arg-type]
    odd = custom(lambda c, f: "yes", name="odd").result(context(), lambda: None)  # type: ignore[arg-type]
    assert not odd.passed and "returns a Verdict or a bool" in odd.message


def result(name: str, severity: str, passed: bool, ref: str = "a/1") -> CheckResult:
    return CheckResult(
        name=name, ref=ref, severity=CheckSeverity(severity), passed=passed, message=f"{name}!"
    )


def test_a_very_long_message_is_recorded_cut_and_logged_whole(caplog: pytest.LogCaptureFixture) -> None:
    """A message of megabytes (a dump of every bad row) made an activity failure Temporal refused, so the
    failure was never heard: its first 2,000 characters are recorded, the whole text logged."""
    long = "bad row; " * 350_000  # 3 MB
    with caplog.at_level("WARNING", logger="databuild.graph.checks"):
        result = custom(lambda c, f: Verdict(passed=False, message=long), name="dump").result(
            context(), lambda: None
        )  # type: ignore[arg-type]
    assert len(result.message) < 2_100 and result.message.startswith("bad row; bad row;")
    assert result.message.endswith(f"... ({len(long) - 2000:,} more characters in the job log)")
    assert any(long in r.getMessage() for r in caplog.records)
    assert len(rules.failure_reason([result])) < 2_200


def test_only_failed_blocking_checks_block_and_the_reason_names_each() -> None:
    found = {
        "a/1": [result("n", "blocking", False), result("w", "warning", False)],
        "b/1": [result("u", "blocking", True, "b/1")],
    }
    failures = rules.blocking_failures(found)
    assert [f.name for f in failures] == ["n"]
    assert rules.failure_reason(failures) == "check n of a/1 failed: n!"


def test_results_are_recorded_per_instance_and_publishing_refuses_a_blocking_failure() -> None:
    writes = [InstanceRef(ref="a/1", instance_id="i1"), InstanceRef(ref="b/1", instance_id="i2")]
    events = rules.checked("r1", writes, {"a/1": [result("w", "warning", False)]})
    assert events == [
        ev.InstanceChecked(
            ref="a/1", instance_id="i1", job_run_id="r1", results=[result("w", "warning", False)]
        )
    ]
    with pytest.raises(InvalidInputError, match="of another ref"):
        rules.checked("r1", writes, {"a/1": [result("w", "warning", False, ref="b/1")]})
    run = decisions.OpenRun(job_run_id="r1", locked_outputs=["a/1", "b/1"])
    published = decisions.succeeded(run, [], writes, checks={"a/1": [result("w", "warning", False)]})
    assert [type(e).__name__ for e in published] == [
        "JobRunSucceeded",
        "PartitionLive",
        "PartitionLive",
        "InstanceChecked",
    ]
    with pytest.raises(InvalidInputError, match="cannot publish: check n of a/1 failed"):
        decisions.succeeded(run, [], writes, checks={"a/1": [result("n", "blocking", False)]})


def live(instance_id: str = "i1", building: str | None = None) -> Partition:
    return Partition(
        ref="a/1",
        status=PartitionStatus.live,
        instance_id=instance_id,
        built_by="r1",
        building_job_run_id=building,
        external=False,
        updated_at=AT,
    )


IMPACT = TaintImpact(
    ref="a/1",
    instance_id="i1",
    downstream=[ImpactedInstance(ref="down/1", instance_id="d1", depth=1, current=True)],
)


def test_a_recheck_that_fails_a_blocking_check_retires_the_instance_and_fail_locks() -> None:
    passed = rules.rechecked(live(), "i1", [result("n", "blocking", True)], IMPACT)
    assert [type(e).__name__ for e in passed] == ["InstanceChecked"]
    warned = rules.rechecked(live(), "i1", [result("w", "warning", False)], IMPACT)
    assert [type(e).__name__ for e in warned] == ["InstanceChecked"]
    failed = rules.rechecked(live(), "i1", [result("n", "blocking", False)], IMPACT)
    assert failed[1:] == [
        ev.PartitionTainted(
            ref="a/1",
            instance_id="i1",
            reason="check n of a/1 failed: n!",
            stale=[InstanceRef(ref="down/1", instance_id="d1")],
        ),
        ev.PartitionFailed(ref="a/1", job_run_id=None, reason="check n of a/1 failed: n!"),
    ]


def test_a_recheck_is_refused_unless_the_checked_instance_is_still_live_and_not_rebuilding() -> None:
    with pytest.raises(InvalidTransitionError, match="not i1 that was checked"):
        rules.rechecked(live("i2"), "i1", [], IMPACT)
    with pytest.raises(InvalidTransitionError, match="being rebuilt by job run r9"):
        rules.rechecked(live(building="r9"), "i1", [], IMPACT)
    failed = live().model_copy(update={"status": PartitionStatus.failed})
    with pytest.raises(InvalidTransitionError, match="checks re-run on a live instance only"):
        rules.checkable(failed, "a/1")


HOSTILE = "<script>window.__pwned=1</script>"


def test_results_show_with_the_instance_in_the_cli_the_api_and_the_dashboard(tmp_path: Path) -> None:
    graph = Graph("shown")
    graph.job("a/{n}")(lambda ctx, n: None)
    settings = Settings(home=tmp_path)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    spec = WantSpec(ref="a/1", data_timestamp=AT)
    bel.wants.register(spec)
    run = bel.decisions.decide(spec.want_id, 1, graph.resolve("a/1")).job_run_id
    assert run is not None
    written = InstanceRef(ref="a/1", instance_id="i1")
    bel.job_runs.start(run, 1, "w", [written])
    found = [result("not_null(id)", "blocking", True), result("small", "warning", False)]
    found[1] = found[1].model_copy(update={"message": HOSTILE})
    bel.job_runs.succeed(run, [], [written], 1, checks={"a/1": found})

    view = partition_view(bel, "a/1")
    assert view.index.instances["i1"].checks == found
    console = Console(width=200, record=True)
    console.print(render.lineage_view(view))
    text = console.export_text()
    assert "check passed not_null(id) (blocking) not_null(id)!" in text
    assert f"check FAILED small (warning) {HOSTILE}" in text
    # Every line that names the instance (the want tree's, a job run's) says how its checks went.
    console.print(render.instance_label("i1", "a/1", view.index, "wrote"))
    assert "wrote a/1 uuid:i1 [live, check failed: small]" in console.export_text()

    app = create_app(web_context(settings, bel, "http://127.0.0.1:8233"))
    with TestClient(app, base_url="http://localhost:8000", client=("127.0.0.1", 50000)) as client:
        api = client.get("/api/partitions/a/1")
        page = client.get("/partitions/a/1")
    assert api.status_code == 200 and page.status_code == 200
    assert [c["name"] for c in api.json()["index"]["instances"]["i1"]["checks"]] == ["not_null(id)", "small"]
    assert HOSTILE not in page.text and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page.text
    assert 'class="check-failed"' in page.text and "<code>small</code>" in page.text
    bel.dispose()
