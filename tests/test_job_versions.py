"""A job's code version: declared or derived at declaration (a bad one refused, naming the job), and
recorded by the BEL on every instance the job builds (tests/test_versions.py: how it is derived)."""

import pytest

from databuild.bel import BuildEventLog
from databuild.errors import GraphDefinitionError
from databuild.graph import Graph
from databuild.graph.versions import code_version
from databuild.models import InstanceRef
from databuild.testing import projection_rows
from tests.bel_sqlite import decide, spec

pytestmark = pytest.mark.unit


def test_a_job_declares_its_version_or_has_its_body_s() -> None:
    g = Graph("versions")

    @g.job("declared/{n}", version="2")
    def declared(ctx: object, n: str) -> None:
        pass

    @g.job("derived/{n}")
    def derived(ctx: object, n: str) -> None:
        pass

    assert g.job_by_label("declared").version == "2"
    assert g.job_by_label("derived").version == code_version(derived)
    assert g.job_by_label("derived").version != code_version(declared)


@pytest.mark.parametrize("version", ["", "  ", " 2", "x" * 65, 2, b"2"])
def test_a_bad_version_is_refused_naming_the_job_and_declares_nothing(version: object) -> None:
    g = Graph("bad")
    with pytest.raises(GraphDefinitionError, match=r"job 'daily': version=.*give a short non-empty string"):
        g.job("daily/{n}", label="daily", version=version)(lambda ctx, n: None)  # type: ignore[arg-type]
    assert g.jobs == []


def test_each_instance_records_the_version_that_built_it(bel: BuildEventLog) -> None:
    def built(ref: str, version: str | None) -> str:
        verdict = decide(bel, spec(ref))
        bel.job_runs.start(verdict.job_run_id, 1, "w")
        written = InstanceRef(ref=ref, instance_id=f"{ref}@{version}")
        bel.job_runs.succeed(verdict.job_run_id, [], [written], job_version=version)
        return str(written.instance_id)

    old = built("up/1", None)  # as a run recorded before versions were
    new = built("mid/1", "7f3a")
    shown = {i.instance_id: i.job_version for i in bel.partitions.instances_by_id([old, new])}
    assert shown == {old: None, new: "7f3a"}
    assert [i.job_version for i in bel.partitions.instance_history("mid/1")[0]] == ["7f3a"]
    kept = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == kept  # the version is the event's, so a rebuild derives it again


def test_a_callable_without_code_must_declare_its_version_and_the_error_names_the_job() -> None:
    class Body:
        def __call__(self, ctx: object, n: str) -> None:
            pass

    g = Graph("callables")
    with pytest.raises(GraphDefinitionError, match=r"job 'daily': cannot derive a version .*declare one"):
        g.job("daily/{n}", label="daily")(Body())
    assert g.jobs == []
    g.job("daily/{n}", label="daily", version="1")(Body())
    assert g.job_by_label("daily").version == "1"
