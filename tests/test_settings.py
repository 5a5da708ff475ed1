"""Settings: the variables they are read from, derived defaults, how a setting's value may be shown,
and the docs' table of them (docs/configuration.md)."""

import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError
from pydantic_settings import EnvSettingsSource

from databuild.config import (
    DEFAULT_HOME,
    ENV_NAMES,
    ENV_PREFIX,
    Settings,
    masked_url,
    setting_range,
)
from databuild.errors import InvalidInputError
from tests.conftest import forked_cli
from tests.test_cli_secrets import BEL_URL, cli_env

pytestmark = pytest.mark.unit

DOCS = Path(__file__).parent.parent / "docs"


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
        ("DATABUILD_JOB_ATTEMPTS", "three", "Input should be a valid integer"),
        ("DATABUILD_JOB_TIMEOUT", "soon", "not a duration: write it like 9h"),
        ("DATABUILD_JOB_EXECUTORS", "weekly_rollup=gpu", "Input should be 'session', 'submit' or 'connect'"),
        ("DATABUILD_JOB_EXECUTORS", "nightly", "each entry is label=executor"),
        ("DATABUILD_ALLOWED_HOSTS", "host:8000", "each entry is a host name or address"),
        ("DATABUILD_WORKFLOW_CACHE", "-1", "out of range; give 0 or more"),
        ("DATABUILD_WORKFLOW_TASKS", "1001", "out of range; give 2 to 1000"),
        ("DATABUILD_TEMPORAL_TLS", "maybe", "Input should be a valid boolean"),
        ("DATABUILD_CATALOG", "thrift-ish", "use embedded, none, or a metastore's thrift://host:port"),
        ("DATABUILD_STORAGE_ROOT", "ftp://files/lake", "scheme 'ftp' is not supported; use a path, or a URI"),
        ("DATABUILD_STORAGE_ROOT", "s3a:///lake", "the URI names no bucket or host; write s3a://bucket/path"),
        ("DATABUILD_SPARK_CONNECT_URL", "sc://spark:1e6", "the port is not a number from 0 to 65535"),
    ],
)
def test_a_bad_variable_is_named_with_the_problem_and_not_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(InvalidInputError) as refused:
        Settings.from_env()
    assert str(refused.value).startswith(f"bad setting {variable}: {message}")
    assert value not in str(refused.value)


SECRETS = {
    "DATABUILD_DATABASE_URL": "postgresql+psycopg://app:pw-of-the-bel@db/bel",
    "DATABUILD_SPARK_CONNECT_URL": "sc://spark:15002/;token=tok-of-connect",
    "DATABUILD_TEMPORAL_API_KEY": "key-of-temporal",
    "DATABUILD_OPENLINEAGE_API_KEY": "key-of-lineage",
    "DATABUILD_ALERT_URLS": "json://hooks:pw-of-alerts@alerts.example/x",
    "DATABUILD_API_TOKENS": "ops=tok-of-api",
    "DATABUILD_UPSTREAM_TOKENS": "up=tok-of-upstream",
}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABUILD_STORAGE_ROOT", "ftp://x/y"),
        ("DATABUILD_STORAGE_ROOT", "s3a:///y"),
        ("DATABUILD_JOB_ATTEMPTS", "0"),
        ("DATABUILD_UPSTREAM_TOKENS", ""),  # a secret setting itself, given a value of the wrong type
    ],
)
def test_a_bad_setting_never_shows_a_secret(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """The settings error names one variable; the secrets given beside it (or in it) stay out of it."""
    for name, secret in SECRETS.items():
        monkeypatch.setenv(name, secret)
    given = {"upstream_tokens": ["tok-in-a-list"]} if not value else {}
    if value:
        monkeypatch.setenv(variable, value)
    with pytest.raises(InvalidInputError, match=f"^bad setting {variable}: ") as refused:
        Settings.from_env(**given)
    assert not [s for s in [*SECRETS.values(), "tok-in-a-list"] if s.split("=")[-1] in str(refused.value)]


def test_secret_settings_stay_out_of_repr_and_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, secret in SECRETS.items():
        monkeypatch.setenv(name, secret)
    settings = Settings.from_env()
    shown = [repr(settings), str(settings), str(settings.model_dump()), settings.model_dump_json()]
    for secret in SECRETS.values():
        assert not [text for text in shown if secret.split("=")[-1] in text], secret
    # Where they are used, they are whole: the BEL's URL for another process, the key for Temporal.
    assert settings.process_env()["DATABUILD_DATABASE_URL"] == SECRETS["DATABUILD_DATABASE_URL"]
    assert settings.database_url.get_secret_value() == SECRETS["DATABUILD_DATABASE_URL"]
    assert Settings(**settings.model_dump()) == settings  # a dump still builds the same settings


@pytest.mark.parametrize(
    ("variable", "refused", "accepted"),
    [
        ("DATABUILD_JOB_ATTEMPTS", ["0", "-1", "1001"], ["1", "1000"]),
        ("DATABUILD_JOB_TIMEOUT", ["0"], ["1s", "36500d"]),
        ("DATABUILD_JOB_HEARTBEAT_TIMEOUT", ["0", "3s"], ["4s"]),
        ("DATABUILD_JOB_LEASE", ["0"], ["1s"]),
        ("DATABUILD_MAX_CONCURRENT_JOBS", ["0", "-2"], ["1"]),
        ("DATABUILD_ALERT_GIVE_UP_AFTER", ["0"], ["1s"]),
        ("DATABUILD_GC_KEEP", [], ["0"]),
    ],
)
def test_numbers_and_durations_have_their_ranges(
    monkeypatch: pytest.MonkeyPatch, variable: str, refused: list[str], accepted: list[str]
) -> None:
    for value in refused:
        monkeypatch.setenv(variable, value)
        with pytest.raises(InvalidInputError, match=f"^bad setting {variable}: out of range; give "):
            Settings.from_env()
    for value in accepted:
        monkeypatch.setenv(variable, value)
        Settings.from_env()


def test_every_duration_setting_is_written_as_the_docs_write_durations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    durations = [f for f, info in Settings.model_fields.items() if info.annotation is timedelta]
    assert "check_timeout" in durations and "bel_outage_patience" in durations
    for field in durations:
        monkeypatch.setenv(ENV_NAMES[field], "1h30m")
        assert getattr(Settings.from_env(), field) == timedelta(minutes=90), field
        monkeypatch.delenv(ENV_NAMES[field])


def test_every_variable_is_derived_from_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """ENV_NAMES (process_env, errors, the docs) names the variables pydantic-settings reads."""
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


def settings_hook() -> ModuleType:
    """docs/hooks/settings_table.py: the MkDocs hook that renders the configuration page's table."""
    spec = importlib.util.spec_from_file_location("settings_table", DOCS / "hooks" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_configuration_page_lists_exactly_the_settings() -> None:
    """The configuration page's table is rendered from the model's fields and descriptions each time the
    site is built: one row per setting, in the model's order, with its variable, default, description
    and range, and no other."""
    hook = settings_hook()
    for name, field in Settings.model_fields.items():
        assert field.description and "|" not in field.description, f"{name}: a one-cell description, please"
    page = SimpleNamespace(file=SimpleNamespace(src_uri="configuration.md"))
    rendered = hook.on_page_markdown((DOCS / "configuration.md").read_text(), page=page)
    section = rendered.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = hook.settings_table()
    assert table in section, f"docs/configuration.md's table is not the settings model's:\n\n{table}"
    rows = [row.strip("| ").split(" | ") for row in section.splitlines() if row.startswith("| `DATABUILD_")]
    assert [variable for variable, _, _ in rows] == [f"`{ENV_NAMES[name]}`" for name in Settings.model_fields]
    for (variable, _, meaning), field in zip(rows, Settings.model_fields.values(), strict=True):
        valid = setting_range(field)
        assert meaning == (f"{field.description} (valid: {valid})" if valid else field.description), variable
    defaults = {variable: default for variable, default, _ in rows}
    assert defaults["`DATABUILD_JOB_TIMEOUT`"] == "`6h`"
    assert defaults["`DATABUILD_TEMPORAL_TLS`"] == "`false`"
    assert defaults["`DATABUILD_TASK_QUEUE`"] == "`databuild-<graph>`"
    assert defaults["`DATABUILD_POOLS`"] == "unset"
    assert defaults["`DATABUILD_ALLOWED_HOSTS`"] == "`localhost,127.0.0.1,::1`"
    assert defaults["`DATABUILD_JOB_ATTEMPTS`"] == "`3`"


def test_configuration_page_keeps_the_place_of_the_table() -> None:
    """A page that lost the marker the table replaces fails the build instead of showing no settings."""
    page = SimpleNamespace(file=SimpleNamespace(src_uri="configuration.md"))
    with pytest.raises(PluginError, match="settings table"):
        settings_hook().on_page_markdown("# Configuration\n", page=page)


# Every setting that holds a secret, each with a value of its own (each has "s3cret" in it).
SECRET_SETTINGS = {
    "DATABUILD_DATABASE_URL": BEL_URL,
    "DATABUILD_SPARK_CONNECT_URL": "sc://spark:15002/;token=connect-s3cret",
    "DATABUILD_TEMPORAL_API_KEY": "temporal-s3cret",
    "DATABUILD_OPENLINEAGE_API_KEY": "lineage-s3cret",
    "DATABUILD_ALERT_URLS": "json://hook:alerts-s3cret@alerts.example/x",
    "DATABUILD_API_TOKENS": "ops=api-s3cret",
    "DATABUILD_UPSTREAM_TOKENS": "up=upstream-s3cret",
}


BAD_ROOTS = [
    ("ftp://files.example/lake", "scheme 'ftp' is not supported; use a path, or a URI with one of"),
    ("s3a:///lake", "the URI names no bucket or host; write s3a://bucket/path"),
]


def test_a_bad_storage_root_is_one_line_without_a_secret(tmp_path: Path) -> None:
    cases = [(args, root, problem) for root, problem in BAD_ROOTS for args in (["wants", "list"], ["worker"])]
    commands = [(args, {"DATABUILD_STORAGE_ROOT": root, **SECRET_SETTINGS}) for args, root, _ in cases]
    for (args, root, problem), run in zip(cases, forked_cli(commands, cli_env(), tmp_path), strict=True):
        assert run.returncode == 2, (args, run.stdout + run.stderr)
        assert run.stdout == "" and run.stderr.startswith(
            f"error: bad setting DATABUILD_STORAGE_ROOT: {problem}"
        )
        assert run.stderr.count("\n") == 1
        assert "s3cret" not in run.stderr and root not in run.stderr  # every secret above has "s3cret" in it
