"""Settings: derived defaults, and how a setting's value may be shown."""

import pytest

from databuild.config import Settings, masked_url


def test_each_graph_has_its_own_default_task_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two graphs on one Temporal namespace must not take each other's tasks, so the default task queue
    is the graph's; DATABUILD_TASK_QUEUE still wins, and processes started from settings inherit it."""
    monkeypatch.delenv("DATABUILD_TASK_QUEUE", raising=False)
    monkeypatch.setenv("DATABUILD_GRAPH", "analytics.graphs:daily graph")
    derived = Settings.from_env()
    assert derived.task_queue == "databuild-analytics.graphs-daily-graph"
    assert derived.process_env()["DATABUILD_TASK_QUEUE"] == derived.task_queue
    assert Settings().task_queue == "databuild-examples.demo-graph"
    monkeypatch.setenv("DATABUILD_TASK_QUEUE", "shared")
    assert Settings.from_env().task_queue == "shared"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://app:secret@db:5432/bel", "postgresql+psycopg://app:***@db:5432/bel"),
        ("postgresql+psycopg://app:p%40ss/w@db/bel", "postgresql+psycopg://app:***@db/bel"),
        (
            "postgresql+psycopg://app@db/bel?sslmode=require&password=secret",
            "postgresql+psycopg://app@db/bel?sslmode=require&password=***",
        ),
        (
            "https://ci:secret@lineage.example:5000/api/v1/lineage",
            "https://ci:***@lineage.example:5000/api/v1/lineage",
        ),
        ("sc://spark:15002/;token=secret;user_id=me", "sc://spark:15002/;token=***;user_id=me"),
        ("sqlite:////abs/.databuild/bel.sqlite", "sqlite:////abs/.databuild/bel.sqlite"),
        ("postgresql+psycopg://app@db/bel", "postgresql+psycopg://app@db/bel"),
    ],
)
def test_masked_url_hides_passwords_and_secret_parameters(url: str, shown: str) -> None:
    assert masked_url(url) == shown
