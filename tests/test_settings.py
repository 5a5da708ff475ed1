"""Settings: the variables they are read from, derived defaults, how a setting's value may be shown,
and the README's table of them."""

import os
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource

from databuild.config import DEFAULT_HOME, ENV_NAMES, ENV_PREFIX, SHOWN_DEFAULT, Settings, masked_url
from databuild.durations import format_duration
from databuild.errors import InvalidInputError


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


def test_settings_read_their_variables_with_friendly_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durations, comma lists, `label=kind` maps and booleans as people write them; an empty variable
    counts as unset; DATABUILD_JOB_TIMEOUT keeps its historical name."""
    values = {
        "DATABUILD_JOB_TIMEOUT": "1d12h",
        "DATABUILD_GC_EVERY": "90",
        "DATABUILD_JOB_EXECUTORS": "weekly_rollup=submit, daily_users = connect",
        "DATABUILD_SPARK_SUBMIT_ARGS": "--conf spark.cores.max=1 --name 'a b'",
        "DATABUILD_ALLOWED_HOSTS": "Data.Example.com,[::1],*.internal",
        "DATABUILD_TEMPORAL_TLS": "true",
        "DATABUILD_JOB_ATTEMPTS": "7",
        "DATABUILD_HOME": "",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert settings.job_start_to_close_timeout == timedelta(days=1, hours=12)
    assert settings.gc_every == timedelta(seconds=90)
    assert settings.job_executors == {"weekly_rollup": "submit", "daily_users": "connect"}
    assert settings.spark_submit_args == ["--conf", "spark.cores.max=1", "--name", "a b"]
    assert settings.allowed_hosts == ["data.example.com", "::1", "*.internal"]
    assert settings.temporal_tls is True and settings.job_attempts == 7
    assert settings.home == DEFAULT_HOME
    # Keyword arguments (flags) win over the environment; None means "not given".
    assert Settings.from_env(job_attempts=2, graph=None).job_attempts == 2
    assert Settings.from_env(job_start_to_close_timeout="5m").job_start_to_close_timeout == timedelta(
        minutes=5
    )
    # Settings built in code never read the environment.
    assert Settings().job_start_to_close_timeout == timedelta(hours=6) and Settings().job_attempts == 3


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "DATABUILD_JOB_ATTEMPTS",
            "three",
            "bad setting DATABUILD_JOB_ATTEMPTS='three': Input should be a valid",
        ),
        ("DATABUILD_JOB_TIMEOUT", "soon", "bad setting DATABUILD_JOB_TIMEOUT='soon': .*cannot read duration"),
        (
            "DATABUILD_JOB_EXECUTORS",
            "weekly_rollup=gpu",
            "DATABUILD_JOB_EXECUTORS='weekly_rollup=gpu': Input",
        ),
        ("DATABUILD_JOB_EXECUTORS", "weekly_rollup", "'weekly_rollup' is not label=executor"),
        ("DATABUILD_ALLOWED_HOSTS", "host:8000", "'host:8000' is not a host name"),
        ("DATABUILD_WORKFLOW_CACHE", "-1", "DATABUILD_WORKFLOW_CACHE='-1': Input should be greater than"),
        (
            "DATABUILD_TEMPORAL_TLS",
            "maybe",
            "DATABUILD_TEMPORAL_TLS='maybe': Input should be a valid boolean",
        ),
        ("DATABUILD_DATABASE_URL", "postgresql://u:secret@db/bel", None),
    ],
)
def test_a_bad_variable_is_named_with_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str | None
) -> None:
    monkeypatch.setenv(variable, value)
    if message is None:  # a valid value, for contrast
        assert Settings.from_env().database_url == value
        return
    with pytest.raises(InvalidInputError, match=message):
        Settings.from_env()


def test_a_bad_secret_is_never_shown() -> None:
    with pytest.raises(InvalidInputError, match=r"^bad setting DATABUILD_UPSTREAM_TOKENS='\*\*\*': "):
        Settings.from_env(upstream_tokens=["secret"])


def test_every_variable_is_derived_from_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """ENV_NAMES (process_env, errors, the README) names the variables pydantic-settings reads."""
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for field, variable in ENV_NAMES.items():
        with monkeypatch.context() as patch:
            patch.setenv(variable, "x")
            read = EnvSettingsSource(Settings)()
        assert list(read) in ([field], [variable]), f"{variable} sets {list(read)}, not {field}"
    assert set(ENV_NAMES) == set(Settings.model_fields)
    assert all(name.startswith(ENV_PREFIX) and name.isupper() for name in ENV_NAMES.values())
    assert len(set(ENV_NAMES.values())) == len(ENV_NAMES)
    assert ENV_NAMES["job_start_to_close_timeout"] == "DATABUILD_JOB_TIMEOUT"
    assert ENV_NAMES["storage_root"] == "DATABUILD_STORAGE_ROOT"


def shown_default(field: FieldInfo) -> str:
    """A setting's default as the README's table shows it."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and SHOWN_DEFAULT in extra:
        return str(extra[SHOWN_DEFAULT])
    value = field.get_default(call_default_factory=True, validated_data={})
    if value in (None, [], {}):
        return "unset"
    if isinstance(value, timedelta):
        text = format_duration(value)
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, list):
        text = ",".join(value)
    else:
        text = str(value)
    return f"`{text}`"


def configuration_table() -> str:
    """The README's table of variables, from the settings model."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        assert field.description and "|" not in field.description, f"{name}: a one-cell description, please"
        rows.append(f"| `{ENV_NAMES[name]}` | {shown_default(field)} | {field.description} |")
    return "\n".join(rows) + "\n"


def test_readme_lists_exactly_the_settings() -> None:
    """The README's configuration table is rendered from the model's fields and descriptions; when a
    setting changes, paste the table this test prints."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    table = configuration_table()
    assert table in section, f"README.md's Configuration table is out of date; it should be:\n\n{table}"
