"""Pure domain logic: refs, durations, patterns, want identity."""

import re
from datetime import UTC, datetime, timedelta

import pytest

from databuild.backfill import BackfillRequest
from databuild.client.specs import default_data_timestamp
from databuild.durations import format_duration, parse_duration
from databuild.errors import (
    AnnouncementRefusedError,
    GraphDefinitionError,
    InvalidDurationError,
    InvalidPartitionRefError,
    UnknownJobError,
)
from databuild.graph import Graph
from databuild.models import WantSource, WantSpec
from databuild.refs import validate_ref
from databuild.temporal.upstream import check_announcement
from examples.demo import graph as demo

pytestmark = pytest.mark.unit

BAD_REFS = {
    "": "empty",
    "a//b": "empty segment",
    "/a": "empty segment",
    "a/": "empty segment",
    "a/../b": "'..' segment",
    "./a": "'.' segment",
    "a/b c": "illegal character",
    "a/b;drop": "illegal character",
    "a/<script>": "illegal character",
    "ä/b": "illegal character",
    "a" * 513: "513 characters",
    "_databuild/staging/x": "reserved",
}


@pytest.mark.parametrize("ref,reason", BAD_REFS.items())
def test_bad_refs_are_rejected_with_the_reason(ref: str, reason: str) -> None:
    with pytest.raises(InvalidPartitionRefError, match=reason):
        validate_ref(ref)


@pytest.mark.parametrize("ref", ["a", "daily_users/2024-01-01", "x/k=v/y.z", "a-b_c.d/E=1", "a" * 512])
def test_good_refs(ref: str) -> None:
    assert validate_ref(ref) == ref


def test_durations() -> None:
    assert parse_duration("9h") == timedelta(hours=9)
    assert parse_duration("1d12h") == timedelta(days=1, hours=12)
    assert parse_duration("90m") == timedelta(minutes=90)
    assert format_duration(timedelta(days=1, hours=12)) == "1d12h"
    for bad, reason in {
        "-3h": "negative",
        "soon": "cannot read",
        "": "cannot read",
        "3x": "cannot read",
    }.items():
        with pytest.raises(InvalidDurationError, match=reason):
            parse_duration(bad)


def test_a_duration_in_a_request_is_read_as_the_cli_writes_it() -> None:
    """An API body or an SDK spec takes `1h`, `24h` and `1d12h` as the CLI and docs write them, besides
    pydantic's seconds and ISO 8601; a duration out of range is refused either way."""
    span = {
        "pattern": "raw_events/{date}",
        "start": datetime(2024, 1, 1, tzinfo=UTC),
        "end": datetime(2024, 1, 2, tzinfo=UTC),
    }
    for written, step in {
        "1h": timedelta(hours=1),
        "24h": timedelta(days=1),
        "1d12h": timedelta(hours=36),
    }.items():
        assert BackfillRequest(**span, step=written).step == step  # type: ignore[arg-type]
    assert BackfillRequest(**span, step="PT1H").step == BackfillRequest(**span, step=3600).step  # type: ignore[arg-type]
    assert WantSpec(ref="a", data_timestamp=datetime(2024, 1, 7, tzinfo=UTC), sla="9h").sla == timedelta(
        hours=9
    )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too long"):
        WantSpec(ref="a", data_timestamp=datetime(2024, 1, 7, tzinfo=UTC), ttl="36501d")  # type: ignore[arg-type]


def test_a_time_in_a_request_is_read_as_the_cli_reads_it() -> None:
    """`2016-01-01T00` (the CLI's), a date, `Z`, and Unix seconds however large (pydantic read
    -62135596800, 0001-01-01, as milliseconds: 1968); naive times are UTC; outside the calendar is refused."""
    first = datetime(2016, 1, 1, tzinfo=UTC)
    request = BackfillRequest(pattern="raw/{date}", start="2016-01-01T00", end="2016-01-02")  # type: ignore[arg-type]
    assert (request.start, request.end) == (first, first + timedelta(days=1))
    assert WantSpec(ref="a", data_timestamp="2016-01-01T00:00:00Z").data_timestamp == first  # type: ignore[arg-type]
    assert WantSpec(ref="a", data_timestamp=first.timestamp()).data_timestamp == first
    assert WantSpec(ref="a", data_timestamp="-62135596800").data_timestamp == datetime(1, 1, 1, tzinfo=UTC)  # type: ignore[arg-type]
    assert WantSpec(ref="a", data_timestamp=datetime(2016, 1, 1)).data_timestamp == first
    with pytest.raises(ValueError, match="outside the calendar"):
        WantSpec(ref="a", data_timestamp=-62135596801 * 10)
    with pytest.raises(ValueError, match="cannot read timestamp"):
        WantSpec(ref="a", data_timestamp="yesterday")  # type: ignore[arg-type]


def test_want_identity_is_hash_of_ref_time_and_source() -> None:
    t = datetime(2024, 1, 7, tzinfo=UTC)
    a = WantSpec(ref="daily_summary/2024-01-07", data_timestamp=t, sla=timedelta(hours=9))
    b = WantSpec(ref="daily_summary/2024-01-07", data_timestamp=t, ttl=timedelta(days=3))
    assert a.want_id == b.want_id  # deadlines are not identity
    assert a.want_id != WantSpec(ref=a.ref, data_timestamp=t, source=WantSource.api).want_id
    assert a.want_id != WantSpec(ref=a.ref, data_timestamp=t + timedelta(seconds=1)).want_id
    assert a.workflow_id.startswith("want:daily_summary/2024-01-07:w-")
    child = a.derive("daily_users/2024-01-01", a.want_id)
    assert (child.source, child.parent_want_id, child.root_want_id) == (
        WantSource.derivative,
        a.want_id,
        a.want_id,
    )
    assert child.derive("raw_events/2024-01-01", child.want_id).root_want_id == a.want_id


def test_negative_durations_and_orphan_derivatives_are_invalid() -> None:
    t = datetime(2024, 1, 7, tzinfo=UTC)
    with pytest.raises(ValueError, match="negative"):
        WantSpec(ref="a", data_timestamp=t, sla=timedelta(hours=-1))
    with pytest.raises(ValueError, match="parent_want_id"):
        WantSpec(ref="a", data_timestamp=t, source=WantSource.derivative)


def test_default_data_timestamp() -> None:
    now = datetime(2026, 5, 3, 15, 30, tzinfo=UTC)
    assert default_data_timestamp("daily_users/2024-01-02", now) == datetime(2024, 1, 2, tzinfo=UTC)
    assert default_data_timestamp("models/latest", now) == datetime(2026, 5, 3, tzinfo=UTC)


def test_job_lookup_by_pattern() -> None:
    target = demo.resolve("top_spenders/2024-01-07").target
    assert target is not None
    assert target.job.label == "weekly_rollup"
    assert target.outputs == ["daily_summary/2024-01-07", "top_spenders/2024-01-07"]
    assert target.params == {"date": "2024-01-07"}
    with pytest.raises(
        UnknownJobError, match="no job in graph 'demo' produces 'daily_users/2024-01-07/extra'"
    ):
        demo.resolve("daily_users/2024-01-07/extra")


def test_graph_definition_errors() -> None:
    g = Graph("g")
    with pytest.raises(GraphDefinitionError, match="different placeholders"):
        g.job("a/{x}", "b/{y}")
    with pytest.raises(GraphDefinitionError, match="repeats"):
        g.job("a/{x}/{x}")
    # Spark and the storage listing skip `_k=...` folders: such a partition would never build.
    with pytest.raises(GraphDefinitionError, match=r"placeholder \{_k\} starts with '_'.*e\.g\. \{k\}"):
        g.job("bthid/{_k}")
    with pytest.raises(GraphDefinitionError, match="starts with '_'"):
        g.external("feed/{__}")
    g.job("a/{x}")(lambda ctx, x: None)
    g.job("a/{y}", label="other")(lambda ctx, y: None)
    with pytest.raises(GraphDefinitionError, match="more than one job"):
        g.resolve("a/1")


def test_temporal_tls_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from temporalio.service import TLSConfig

    from databuild.config import Settings
    from databuild.errors import InvalidInputError
    from databuild.temporal.connection import tls_config

    assert tls_config(Settings(home=tmp_path)) is False
    assert tls_config(Settings(home=tmp_path, temporal_tls=True)) is True
    assert tls_config(Settings.from_env(home=tmp_path, temporal_api_key="k")) is True  # API keys need TLS
    (tmp_path / "c.pem").write_bytes(b"CERT")
    (tmp_path / "k.pem").write_bytes(b"KEY")
    mtls = tls_config(
        Settings(home=tmp_path, temporal_tls_cert=tmp_path / "c.pem", temporal_tls_key=tmp_path / "k.pem")
    )
    assert isinstance(mtls, TLSConfig) and (mtls.client_cert, mtls.client_private_key) == (b"CERT", b"KEY")
    with pytest.raises(InvalidInputError, match="set both"):
        tls_config(Settings(home=tmp_path, temporal_tls_cert=tmp_path / "c.pem"))
    with pytest.raises(InvalidInputError, match="cannot read DATABUILD_TEMPORAL_TLS_CA"):
        tls_config(Settings(home=tmp_path, temporal_tls_ca=tmp_path / "missing.pem"))


def test_only_external_refs_may_be_announced_within_the_subscription() -> None:
    g = Graph("g")
    g.external("feed/{date}", "x/{n}")
    g.job("report/{date}", label="report")(lambda ctx, date: None)
    check_announcement(g, "feed/2024-01-01")
    check_announcement(g, "feed/2024-01-01", ["feed/2024-01-*", "x/*"])
    refusals = {
        ("feed/2024-01-01", ("x/*",)): "outside the patterns this upstream is followed for (x/*)",
        ("report/2024-01-01", ()): "built here by job 'report'",
        ("report/2024-01-01", ("report/*",)): "built here by job 'report'",
        ("nowhere/1", ()): "no job builds it and no graph.external(...) pattern (feed/{date}, x/{n})",
    }
    for (ref, patterns), reason in refusals.items():
        with pytest.raises(AnnouncementRefusedError, match=re.escape(reason)):
            check_announcement(g, ref, patterns)
    with pytest.raises(AnnouncementRefusedError, match=r"declares external \(none\)"):
        check_announcement(demo, "daily_summary/2024-01-07")
    with pytest.raises(InvalidPartitionRefError):  # malformed: bad input, as everywhere
        check_announcement(g, "feed/../etc")
