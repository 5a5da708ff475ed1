"""Settings from the environment (``DATABUILD_*``, read by pydantic-settings); flags may override them."""

import re
import shlex
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

from pydantic import Field, JsonValue, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from databuild.durations import MAX_DURATION, parse_setting_duration
from databuild.errors import InvalidInputError
from databuild.limits import MAX_ATTEMPTS, MIN_HEARTBEAT_TIMEOUT, MIN_LEASE, MIN_TIMEOUT, shown
from databuild.models import ExecutorKind, TableFormatName
from databuild.refs import storage_uri

DEFAULT_HOME = Path(".databuild")


_HOST_CHARACTERS = set("abcdefghijklmnopqrstuvwxyz0123456789-._:")  # names, IPv4 and IPv6 addresses

ENV_PREFIX = "DATABUILD_"
# The configuration page of the docs (docs/hooks/settings_table.py) shows this instead of the default where
# the default is derived or would read badly; the text is Markdown.
SHOWN_DEFAULT = "shown_default"

# Only `Settings.from_env` reads the environment: settings built in code (tests, tools) never pick up
# what the calling shell happens to export.
_READ_ENV: ContextVar[bool] = ContextVar("databuild_settings_read_env", default=False)


def _shown_default(text: str) -> dict[str, JsonValue]:
    return {SHOWN_DEFAULT: text}


class Settings(BaseSettings):
    """Each field is read from ``DATABUILD_<FIELD>`` (or its alias) by `from_env`; the descriptions are
    the docs' configuration table (Markdown; links are relative to docs/)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,
        frozen=True,
        extra="forbid",
        validate_by_name=True,
    )

    home: Path = Field(default=DEFAULT_HOME, description="base of the local defaults (`<home>` below)")
    temporal_address: str = Field(default="127.0.0.1:7233", description="Temporal frontend")
    namespace: str = Field(default="default", description="Temporal namespace")
    # Default: derived from the graph, so two graphs on one Temporal namespace never take each other's tasks.
    task_queue: str = Field(
        default="",
        description="task queue of wants and job runs; default derived from `DATABUILD_GRAPH` "
        "(see [Workers](operations/index.md#workers))",
        json_schema_extra=_shown_default("`databuild-<graph>`"),
    )
    # Secret: its password (user:password@, ?password=) is in it.
    database_url: SecretStr = Field(
        default=SecretStr(""),
        description="BEL (SQLAlchemy URL; `postgresql+psycopg://user@host/db` for PostgreSQL)",
        json_schema_extra=_shown_default("`sqlite:///<home>/bel.sqlite`"),
    )
    storage_root: str = Field(
        default="",
        description="where partitions are stored: a path, or a URI (`file://`, `s3a://`, `gs://`, `abfss://`, "
        "`hdfs://`); see [Storage](operations/storage.md)",
        json_schema_extra=_shown_default("`<home>/data`"),
    )
    catalog: str = Field(
        default="embedded",
        description="the Hive metastore outputs are published to as tables: `embedded` (Derby under "
        "`<home>/catalog`, one worker process), `thrift://host:9083` (a shared metastore) or `none`; "
        "see [Tables](operations/storage.md#tables)",
    )
    catalog_database: str = Field(default="default", description="the tables' database (namespace)")
    table_format: TableFormatName = Field(
        default="hive", description="`hive` or `iceberg`: see [Tables](operations/storage.md#iceberg-tables)"
    )
    iceberg_catalog: SecretStr = Field(  # Secret: a URL may hold a token or a password
        default=SecretStr(""),
        description="a SQL catalog's database (SQLAlchemy URL) or a REST catalog (`https://…`: Polaris, Nessie, Glue)",
        json_schema_extra=_shown_default("a SQL catalog in the BEL's database"),
    )
    sql_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="serve Spark SQL (HiveServer2: beeline, JDBC) over the catalog on this loopback port, from "
        "the worker holding it (`0`: off; `databuild dev` uses 10000 when free, unless it is set)",
    )
    # Off by default: workers sharing a host would contend for any one fixed port.
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="serve each worker's Prometheus metrics at `http://<host>:<port>/metrics`, on all "
        "interfaces (`0`: off; the web server always serves `/metrics`); see [Metrics](operations/metrics.md)",
    )
    graph: str = Field(default="examples.demo:graph", description="`module:attribute` of your graph")
    spark_master: str = Field(default="local[2]", description="Spark master of the worker's session")
    spark_driver_memory: str = Field(
        default="2g",
        description="driver memory (set before the session starts; also each submitted application's)",
    )
    executor: ExecutorKind = Field(
        default="session",
        description="where jobs run: `session`, `submit` or `connect` (see [Job executors](executors.md))",
    )
    # NoDecode: list and dict settings are written `a,b` and `k=v,k2=v2`, not JSON.
    job_executors: Annotated[dict[str, ExecutorKind], NoDecode] = Field(
        default_factory=dict, description="per-job overrides, `label=executor,...`"
    )
    # Secret: a Spark Connect token is a parameter of it (;token=...).
    spark_connect_url: SecretStr | None = Field(
        default=None, description="Spark Connect server of the `connect` executor, `sc://host:15002`"
    )
    spark_submit: Path | None = Field(
        default=None,
        description="the `spark-submit` to run",
        json_schema_extra=_shown_default("the pyspark package's"),
    )
    spark_submit_master: str | None = Field(
        default=None,
        description="master that `submit` sends applications to",
        json_schema_extra=_shown_default("`DATABUILD_SPARK_MASTER`"),
    )
    spark_submit_args: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="more `spark-submit` arguments (shell quoting), after DataBuild's defaults",
    )
    job_heartbeat_timeout: timedelta = Field(
        default=timedelta(seconds=20),
        ge=MIN_HEARTBEAT_TIMEOUT,
        le=MAX_DURATION,
        description="a job attempt whose worker stops heartbeating this long is retried elsewhere",
    )
    # The historical name, kept so existing deployments go on working (DATABUILD_JOB_START_TO_CLOSE_TIMEOUT,
    # from the field's name, is read too when it is unset).
    job_start_to_close_timeout: timedelta = Field(
        default=timedelta(hours=6),
        ge=MIN_TIMEOUT,
        le=MAX_DURATION,
        validation_alias=f"{ENV_PREFIX}JOB_TIMEOUT",
        description="longest a job attempt may run",
    )
    job_attempts: int = Field(
        default=3,
        ge=1,
        le=MAX_ATTEMPTS,
        description="attempts before a job run fails and fail-locks its outputs",
    )
    # Renewed while the job heartbeats.
    job_lease: timedelta = Field(
        default=timedelta(minutes=1),
        ge=MIN_LEASE,
        le=MAX_DURATION,
        description="a build lock lapses this long after its worker last renewed it",
    )
    bel_outage_patience: timedelta = Field(
        default=timedelta(minutes=10),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="how long a job attempt rides out an outage of the BEL's database (a failover, a restart) "
        "while it records its start or its outcome, trying again with backoff, before it fails; see "
        "[Database outages](operations/index.md#database-outages)",
    )
    check_timeout: timedelta = Field(
        default=timedelta(minutes=10),
        ge=timedelta(seconds=1),
        le=MAX_DURATION,
        description="how long `databuild check` lets a partition's checks run on a worker, all attempts "
        "together, before it gives up and says so",
    )
    max_concurrent_jobs: int = Field(default=4, ge=1, description="job activities one worker runs at once")
    job_log_max_bytes: int = Field(
        default=1024 * 1024,
        ge=4096,
        description="most bytes of one job attempt's log; a longer log keeps its beginning and its end, "
        "where a failure's traceback is (see [Job logs](operations/logs.md))",
    )
    pools: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        description="named pools, `name=slots,...`: the most job runs of the jobs in a pool (`@graph.job(pool=)`) "
        "running at once, cluster-wide; see [Pools](backfills.md#pools)",
    )
    batch_window: timedelta = Field(
        default=timedelta(seconds=2),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="how long a new run of a batch job (`@graph.job(batch=)`) waits for more partitions "
        "to join it before it starts (a full batch starts at once)",
    )
    gc_every: timedelta = Field(
        default=timedelta(hours=1),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="how often each worker collects the storage's garbage (`0`: never); "
        "see [Garbage collection](operations/storage.md#garbage-collection)",
    )
    repair_every: timedelta = Field(
        default=timedelta(minutes=5),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="how often each worker looks for wants whose workflows closed while the BEL holds them "
        "open, and reconciles them (`0`: never): such a want is reconciled within this of its workflow's close; "
        "see [Repair](operations/cancel-retry-repair.md#repair)",
    )
    gc_keep: timedelta = Field(
        default=timedelta(days=7),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="how long garbage collection keeps an instance after it stopped being live (superseded, "
        "tainted) or was left unpublished, a failed attempt's submission folder, and an ended job run's logs",
    )
    # Temporal over TLS (a self-hosted cluster with mTLS, or Temporal Cloud): PEM files, or an API key.
    temporal_tls: bool = Field(
        default=False,
        description="plain TLS to Temporal (implied by the certificate, CA and API key settings)",
    )
    temporal_tls_cert: Path | None = Field(
        default=None, description="client certificate (PEM) for mTLS, with `DATABUILD_TEMPORAL_TLS_KEY`"
    )
    temporal_tls_key: Path | None = Field(default=None, description="the client certificate's key (PEM)")
    temporal_tls_ca: Path | None = Field(
        default=None, description="CA (PEM) of a Temporal server with a private certificate"
    )
    temporal_api_key: SecretStr | None = Field(
        default=None, description="API key for Temporal Cloud (implies TLS)"
    )
    # A signal to a workflow evicted from the cache replays its history.
    workflow_cache: int = Field(
        default=10_000,
        ge=0,
        description="workflows a worker keeps in memory; size it to the wants it holds waiting at once "
        "(a signal to an evicted one replays its history)",
    )
    # A workflow task runs in the worker's Python: the more run at once, the longer each takes (one
    # interpreter, a few cores). Past 5 s the SDK warns (TMPRL1104), past 10 s the server retries it.
    workflow_tasks: int = Field(
        default=8,
        ge=2,
        le=1000,
        description="workflow tasks a worker runs at once; the rest wait at the server, in order, so none "
        "waits in the worker long enough to time out",
    )
    # The sandbox guards whoever changes workflow code (DataBuild's own: users write jobs, not workflows),
    # at the price of importing the workflow modules afresh for every workflow run. DataBuild's workflow
    # tests and replays run the workflows in it.
    workflow_sandbox: bool = Field(
        default=False,
        description="run workflow code in Temporal's sandbox, which imports the workflow modules afresh "
        "for every workflow run (about a fifth of a worker's CPU in a backfill); for changing DataBuild's "
        "workflows, whose workflow tests and replays run in it",
    )
    # Temporal's advice for batch work: a sliding window of open workflows, never all of them at once.
    backfill_window: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description="wants of a backfill whose workflows are open at once; its window starts the next as "
        "they end, in the order of its range (see [Backfills](backfills.md#the-window))",
    )
    # OpenLineage export (databuild/jobs/openlineage.py).
    openlineage_url: str | None = Field(
        default=None,
        description="send job runs as OpenLineage events to a file (`file:///abs/path.ndjson` or a plain "
        "path) or an `http(s)://` endpoint (see [OpenLineage](lineage.md#openlineage-export))",
        json_schema_extra=_shown_default("unset (off)"),
    )
    openlineage_namespace: str = Field(default="databuild", description="OpenLineage job namespace")
    openlineage_api_key: SecretStr | None = Field(
        default=None, description="bearer token for an HTTP OpenLineage endpoint"
    )
    # Alerts (databuild/operations/alerts.py): notification URLs in apprise syntax; they often hold tokens.
    alert_urls: SecretStr | None = Field(
        default=None,
        description="where alerts go: comma-separated notification URLs in apprise syntax (`json://host:port/path`, "
        "`slack://…`, `mailto://…`); each gets every alert (see [Alerts](operations/alerts.md))",
        json_schema_extra=_shown_default("unset (off)"),
    )
    alert_config: Path | None = Field(
        default=None,
        description="an apprise configuration file (text or YAML) of more channels, whose tags `kind:<kind>`, "
        "`job:<label>`, `ref:<glob>` route alerts to them (see [Alerts](operations/alerts.md))",
    )
    alert_give_up_after: timedelta = Field(
        default=timedelta(days=1),
        gt=timedelta(0),
        le=MAX_DURATION,
        description="how long alerts are retried on a channel that does not take them: a group of them is "
        "given up this long after it was due or its last alert came (see [Alerts](operations/alerts.md))",
    )
    alert_group_window: timedelta = Field(
        default=timedelta(minutes=10),
        ge=timedelta(0),
        le=MAX_DURATION,
        description="alerts of one kind about one job that come within this long of their group's last "
        "message go out together at its end, as one digest that counts them (see [Alerts](operations/alerts.md))",
    )
    dashboard_url: str = Field(
        default="http://127.0.0.1:8000",
        description="the dashboard's address as people reach it: the links in alerts",
    )
    api_tokens: SecretStr | None = Field(
        default=None,
        description="`name=token,...` (or bare tokens): bearer tokens accepted by the HTTP API's writes and "
        "events (unset: loopback clients only)",
    )
    api_tokens_file: Path | None = Field(default=None, description="the same, one `name=token` per line")
    upstream_tokens: SecretStr | None = Field(
        default=None,
        description="`upstream-name=token,...`: tokens presented to upstream graphs' events APIs",
    )
    # A request naming another host is refused before anything else: a page whose own name resolves to
    # this server (DNS rebinding) would otherwise reach it as a loopback client.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "::1"],
        description="host names the web server answers to (any port; `*.example.com`, `*` for any); "
        "others get a 400",
    )

    if TYPE_CHECKING:
        # For mypy only: its pydantic plugin would list BaseSettings' own typed `_env_file`-style
        # arguments too, so `Settings(**overrides)` would not type-check; the model validates each value.
        def __init__(self, **values: object) -> None: ...

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments win over the environment; no .env file or secrets directory is read.
        return (init_settings, env_settings) if _READ_ENV.get() else (init_settings,)

    @field_validator(
        "job_heartbeat_timeout",
        "job_start_to_close_timeout",
        "job_lease",
        "bel_outage_patience",
        "check_timeout",
        "gc_every",
        "repair_every",
        "gc_keep",
        "batch_window",
        "alert_give_up_after",
        "alert_group_window",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return parse_setting_duration(value)
        except InvalidInputError:  # its message quotes the value
            raise ValueError(
                f"not a duration: write it like 9h, 30d, 1d12h, 90m or 45s (at most {shown(MAX_DURATION)})"
            ) from None

    @field_validator("catalog", "iceberg_catalog")
    @classmethod
    def _catalogs(cls, value: str | SecretStr, info: ValidationInfo) -> str | SecretStr:
        url = value.get_secret_value() if isinstance(value, SecretStr) else value
        if (
            info.field_name == "catalog"
            and url not in ("embedded", "none")
            and not url.startswith("thrift://")
        ):
            raise ValueError("use embedded, none, or a metastore's thrift://host:port")
        if info.field_name == "iceberg_catalog" and url and "://" not in url:
            raise ValueError("use a database URL (sqlite:///path, postgresql+psycopg://host/db) or https://…")
        return value

    @field_validator("catalog_database")
    @classmethod
    def _catalog_database(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("not a database name: use letters, digits and _, not starting with a digit")
        return value

    @field_validator("storage_root", mode="before")
    @classmethod
    def _storage_root(cls, value: object) -> object:
        return str(value) if isinstance(value, Path) else value

    @field_validator("storage_root")
    @classmethod
    def _storage_uri(cls, value: str) -> str:
        # Checked here, not where the default is derived: an error there would name no setting.
        return storage_uri(value) if value else value

    @field_validator("job_executors", mode="before")
    @classmethod
    def _job_executors(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for item in filter(None, (i.strip() for i in value.split(","))):
            label, sep, kind = item.partition("=")
            if not sep or not label.strip():
                raise ValueError("each entry is label=executor (e.g. weekly_rollup=submit)")
            pairs[label.strip()] = kind.strip()
        return pairs

    @field_validator("pools", mode="before")
    @classmethod
    def _pools(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pools: dict[str, str] = {}
        for item in filter(None, (i.strip() for i in value.split(","))):
            name, sep, slots = item.partition("=")
            if not sep or not name.strip() or not slots.strip().isdigit() or int(slots) < 1:
                raise ValueError("each entry is name=slots with slots 1 or more (e.g. spark=4)")
            pools[name.strip()] = slots.strip()
        return pools

    @field_validator("spark_submit_args", mode="before")
    @classmethod
    def _spark_submit_args(cls, value: object) -> object:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("spark_connect_url")
    @classmethod
    def _spark_connect_url(cls, secret: SecretStr | None) -> SecretStr | None:
        value = secret.get_secret_value().strip() if secret is not None else ""
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme != "sc" or not parts.hostname:
            raise ValueError("a Spark Connect URL looks like sc://host:15002")
        _check_port(value)
        return SecretStr(value)

    @field_validator("openlineage_url")
    @classmethod
    def _openlineage_url(cls, value: str | None) -> str | None:
        value = (value or "").strip()
        if not value:
            return None
        if "://" not in value:
            return value  # a plain path to the events file
        parts = urlsplit(value)
        if parts.scheme in ("http", "https"):
            if not parts.hostname:
                raise ValueError(
                    f"an HTTP OpenLineage URL needs a host, e.g. {parts.scheme}://localhost:5000"
                )
            _check_port(value)
            return value
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ValueError("a file URL needs an absolute path: file:///abs/path/events.ndjson")
            return value
        raise ValueError(
            f"unsupported scheme {parts.scheme!r}: use file:///abs/path/events.ndjson, a plain path, "
            "or an http(s):// OpenLineage endpoint"
        )

    @field_validator("openlineage_namespace")
    @classmethod
    def _openlineage_namespace(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the OpenLineage job namespace may not be empty")
        return value.strip()

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: object) -> object:
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list):
            return value
        hosts = [str(name).strip().lower().removeprefix("[").removesuffix("]") for name in names]
        for host in filter(None, hosts):
            # One colon is a port (an IPv6 address has more): ports are never part of the check.
            if host != "*" and (host.count(":") == 1 or not set(host.removeprefix("*.")) <= _HOST_CHARACTERS):
                raise ValueError("each entry is a host name or address (without port), `*.domain` or `*`")
        return [host for host in hosts if host]

    def model_post_init(self, _context: object) -> None:
        # Derived defaults depend on `home` and `graph`, so fill them once they are known.
        if not self.task_queue:
            object.__setattr__(self, "task_queue", default_task_queue(self.graph))
        if not self.database_url.get_secret_value():
            object.__setattr__(
                self, "database_url", SecretStr(f"sqlite:///{(self.home / 'bel.sqlite').resolve()}")
            )
        if not self.storage_root:
            object.__setattr__(self, "storage_root", storage_uri(self.home / "data"))

    def process_env(self) -> dict[str, str]:
        """The variables that point another `databuild` process (a worker, the CLI) at the same Temporal,
        task queue, BEL, storage, tables and graph as these settings."""
        shared = (
            "home",
            "temporal_address",
            "namespace",
            "task_queue",
            "database_url",
            "storage_root",
            "graph",
            "catalog_database",
            "table_format",
            "iceberg_catalog",
        )
        return {ENV_NAMES[name]: _plain(getattr(self, name)) for name in shared}

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        """Settings from the ``DATABUILD_*`` variables; keyword arguments that are not None win (flags)."""
        given = {name: value for name, value in overrides.items() if value is not None}
        reading = _READ_ENV.set(True)
        try:
            return cls(**given)
        except ValidationError as error:
            raise InvalidInputError(setting_error(error.errors()[0])) from None
        finally:
            _READ_ENV.reset(reading)


def _env_name(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    return alias if isinstance(alias, str) else f"{ENV_PREFIX}{name.upper()}"


# The environment variable of each setting, as the settings model reads it.
ENV_NAMES = {name: _env_name(name, field) for name, field in Settings.model_fields.items()}


def default_task_queue(graph: str) -> str:
    """The task queue of a graph unless DATABUILD_TASK_QUEUE says otherwise: ``examples.demo:graph``
    gets ``databuild-examples.demo-graph``."""
    return "databuild-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", graph).strip("-")


# The password of user:password@ as SQLAlchemy parses it (anything up to the first @), and query or path
# parameters that carry a secret: ?password=... (libpq), ;token=... (Spark Connect).
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*):[^@]*@")
_SECRET_PARAM = re.compile(r"(?i)([?&;][a-z_]*(?:password|passwd|token|secret|api_?key)=)[^&;#]*")


def masked_url(url: str | SecretStr) -> str:
    """``url`` with its password and secret parameters replaced by ``***``, for printing and logging."""
    text = url.get_secret_value() if isinstance(url, SecretStr) else url
    return _SECRET_PARAM.sub(r"\1***", _PASSWORD.sub(r"\1:***@", text, count=1))


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def setting_error(error: ErrorDetails) -> str:
    """One line naming the variable and what is wrong with it, never its value: any setting may hold a
    secret (a password pasted into the wrong variable), and an error about no one field has every setting
    given as its input."""
    where = str(error["loc"][0]) if error["loc"] else None
    field = next((name for name, env in ENV_NAMES.items() if where in (name, env)), None)
    if field is None:
        return f"bad settings: {error['msg'].removeprefix('Value error, ')}"
    valid = setting_range(Settings.model_fields[field])
    if error["type"] in _RANGE_ERRORS and valid is not None:
        return f"bad setting {ENV_NAMES[field]}: out of range; give {valid}"
    return f"bad setting {ENV_NAMES[field]}: {error['msg'].removeprefix('Value error, ')}"


def setting_range(field: FieldInfo) -> str | None:
    """The values a numeric or duration setting accepts (``1 to 1000``, ``0s or more``), from its
    constraints (pydantic keeps each as an object with a ``ge``, ``gt`` or ``le``); None for any other."""
    bounds = {
        kind: shown(getattr(constraint, kind))
        for constraint in field.metadata
        for kind in ("ge", "gt", "le")
        if hasattr(constraint, kind)
    }
    if "gt" in bounds:
        low = f"more than {bounds['gt']}"
        return f"{low}, up to {bounds['le']}" if "le" in bounds else low
    if "ge" not in bounds:
        return None
    return f"{bounds['ge']} to {bounds['le']}" if "le" in bounds else f"{bounds['ge']} or more"


def _check_port(url: str) -> None:
    try:
        _ = urlsplit(url).port
    except ValueError:  # its message quotes the port as written
        raise ValueError("the port is not a number from 0 to 65535") from None


def _plain(value: object) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)
