"""Settings from the environment (``DATABUILD_*``); flags may override them."""

import os
import re
import shlex
from datetime import timedelta
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator

from databuild.durations import parse_setting_duration
from databuild.errors import InvalidInputError
from databuild.models import Model

DEFAULT_HOME = Path(".databuild")

# Where a job body runs (databuild/executors): the worker's own SparkSession, its own application
# through spark-submit, or a Spark Connect server.
ExecutorKind = Literal["session", "submit", "connect"]


_HOST_CHARACTERS = set("abcdefghijklmnopqrstuvwxyz0123456789-._:")  # names, IPv4 and IPv6 addresses

# The environment variable of each setting.
ENV_NAMES = {
    "home": "DATABUILD_HOME",
    "temporal_address": "DATABUILD_TEMPORAL_ADDRESS",
    "namespace": "DATABUILD_NAMESPACE",
    "task_queue": "DATABUILD_TASK_QUEUE",
    "database_url": "DATABUILD_DATABASE_URL",
    "storage_root": "DATABUILD_STORAGE_ROOT",
    "graph": "DATABUILD_GRAPH",
    "spark_master": "DATABUILD_SPARK_MASTER",
    "spark_driver_memory": "DATABUILD_SPARK_DRIVER_MEMORY",
    "executor": "DATABUILD_EXECUTOR",
    "job_executors": "DATABUILD_JOB_EXECUTORS",
    "spark_connect_url": "DATABUILD_SPARK_CONNECT_URL",
    "spark_submit": "DATABUILD_SPARK_SUBMIT",
    "spark_submit_master": "DATABUILD_SPARK_SUBMIT_MASTER",
    "spark_submit_args": "DATABUILD_SPARK_SUBMIT_ARGS",
    "job_heartbeat_timeout": "DATABUILD_JOB_HEARTBEAT_TIMEOUT",
    "job_start_to_close_timeout": "DATABUILD_JOB_TIMEOUT",
    "job_attempts": "DATABUILD_JOB_ATTEMPTS",
    "job_lease": "DATABUILD_JOB_LEASE",
    "max_concurrent_jobs": "DATABUILD_MAX_CONCURRENT_JOBS",
    "sweep_every": "DATABUILD_SWEEP_EVERY",
    "repair_every": "DATABUILD_REPAIR_EVERY",
    "keep_failed_attempts": "DATABUILD_KEEP_FAILED_ATTEMPTS",
    "workflow_cache": "DATABUILD_WORKFLOW_CACHE",
    "temporal_tls": "DATABUILD_TEMPORAL_TLS",
    "temporal_tls_cert": "DATABUILD_TEMPORAL_TLS_CERT",
    "temporal_tls_key": "DATABUILD_TEMPORAL_TLS_KEY",
    "temporal_tls_ca": "DATABUILD_TEMPORAL_TLS_CA",
    "temporal_api_key": "DATABUILD_TEMPORAL_API_KEY",
    "openlineage_url": "DATABUILD_OPENLINEAGE_URL",
    "openlineage_namespace": "DATABUILD_OPENLINEAGE_NAMESPACE",
    "openlineage_api_key": "DATABUILD_OPENLINEAGE_API_KEY",
    "api_tokens": "DATABUILD_API_TOKENS",
    "api_tokens_file": "DATABUILD_API_TOKENS_FILE",
    "upstream_tokens": "DATABUILD_UPSTREAM_TOKENS",
    "allowed_hosts": "DATABUILD_ALLOWED_HOSTS",
}


class Settings(Model):
    home: Path = DEFAULT_HOME
    temporal_address: str = "127.0.0.1:7233"
    namespace: str = "default"
    # Default: derived from the graph, so two graphs on one Temporal namespace never take each other's tasks.
    task_queue: str = Field(default="", description="default: databuild-<graph>")
    database_url: str = Field(default="", description="SQLAlchemy URL; default SQLite under home")
    storage_root: Path = Field(default=Path(), description="default: <home>/data")
    graph: str = "examples.demo:graph"
    spark_master: str = "local[2]"
    spark_driver_memory: str = "2g"
    executor: ExecutorKind = "session"
    job_executors: dict[str, ExecutorKind] = Field(default_factory=dict, description="label=kind,label2=kind")
    spark_connect_url: str | None = Field(default=None, description="sc://host:15002")
    spark_submit: Path | None = Field(default=None, description="default: the pyspark package's spark-submit")
    spark_submit_master: str | None = Field(default=None, description="default: spark_master")
    spark_submit_args: list[str] = Field(default_factory=list, description="more spark-submit arguments")
    job_heartbeat_timeout: timedelta = timedelta(seconds=20)
    job_start_to_close_timeout: timedelta = timedelta(hours=6)
    job_attempts: int = 3
    # A build lock lapses this long after its worker last renewed it (renewed while heartbeating).
    job_lease: timedelta = timedelta(minutes=1)
    max_concurrent_jobs: int = 4
    # Each worker sweeps the storage this often (0 turns it off): folders attempts left behind go once
    # their job run has ended; a failed attempt's submission folder and log stay this long first.
    sweep_every: timedelta = timedelta(hours=1)
    repair_every: timedelta = timedelta(minutes=5)  # look for wants whose workflows died
    keep_failed_attempts: timedelta = timedelta(days=7)
    # Temporal over TLS (a self-hosted cluster with mTLS, or Temporal Cloud): PEM files, or an API key.
    temporal_tls: bool = False
    temporal_tls_cert: Path | None = None
    temporal_tls_key: Path | None = None
    temporal_tls_ca: Path | None = None
    temporal_api_key: SecretStr | None = None
    # Workflows a worker keeps in memory; a signal to one evicted from the cache replays its history.
    # Size it to the wants a worker holds waiting at once.
    workflow_cache: int = Field(default=10_000, ge=0)
    # OpenLineage export (databuild/openlineage.py); off unless a URL is set.
    openlineage_url: str | None = Field(
        default=None, description="file:///abs/path.ndjson, a plain path, or an http(s):// endpoint"
    )
    openlineage_namespace: str = "databuild"
    openlineage_api_key: SecretStr | None = None
    # Bearer tokens of the graphs and clients allowed to change state or read events over HTTP.
    api_tokens: SecretStr | None = Field(default=None, description="name=token,name2=token2 (or bare tokens)")
    api_tokens_file: Path | None = Field(default=None, description="a file of name=token lines")
    # Tokens this graph presents to its upstream graphs' events APIs, by upstream name.
    upstream_tokens: SecretStr | None = Field(default=None, description="name=token,name2=token2")
    # The names the web server answers to (its requests' Host, any port). A request naming another host
    # is refused before anything else: a page whose own name resolves to this server (DNS rebinding)
    # would otherwise reach it as a loopback client.
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "::1"],
        description="host,host2; `*.example.com` for subdomains, `*` for any",
    )

    @field_validator(
        "job_heartbeat_timeout",
        "job_start_to_close_timeout",
        "job_lease",
        "sweep_every",
        "repair_every",
        "keep_failed_attempts",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_setting_duration(value)
        return value

    @field_validator("job_executors", mode="before")
    @classmethod
    def _job_executors(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for item in filter(None, (i.strip() for i in value.split(","))):
            label, sep, kind = item.partition("=")
            if not sep or not label.strip():
                raise ValueError(f"{item!r} is not label=executor (e.g. weekly_rollup=submit)")
            pairs[label.strip()] = kind.strip()
        return pairs

    @field_validator("spark_submit_args", mode="before")
    @classmethod
    def _spark_submit_args(cls, value: object) -> object:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("spark_connect_url")
    @classmethod
    def _spark_connect_url(cls, value: str | None) -> str | None:
        value = (value or "").strip()
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme != "sc" or not parts.hostname:
            raise ValueError("a Spark Connect URL looks like sc://host:15002")
        _ = parts.port  # raises ValueError for a port that is not a number in range
        return value

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
            _ = parts.port  # raises ValueError for a port that is not a number in range
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
                raise ValueError(f"{host!r} is not a host name or address (without port), `*.domain` or `*`")
        return [host for host in hosts if host]

    def model_post_init(self, _context: object) -> None:
        # Derived defaults depend on `home` and `graph`, so fill them once they are known.
        if not self.task_queue:
            object.__setattr__(self, "task_queue", default_task_queue(self.graph))
        if not self.database_url:
            object.__setattr__(self, "database_url", f"sqlite:///{(self.home / 'bel.sqlite').resolve()}")
        if self.storage_root == Path():
            object.__setattr__(self, "storage_root", (self.home / "data").resolve())

    def process_env(self) -> dict[str, str]:
        """The variables that point another `databuild` process (a worker, the CLI) at the same Temporal,
        task queue, BEL, storage and graph as these settings."""
        shared = (
            "home",
            "temporal_address",
            "namespace",
            "task_queue",
            "database_url",
            "storage_root",
            "graph",
        )
        return {ENV_NAMES[name]: str(getattr(self, name)) for name in shared}

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        env = os.environ
        values: dict[str, object] = {field: env[var] for field, var in ENV_NAMES.items() if env.get(var)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "?"
            raise InvalidInputError(
                f"bad setting {ENV_NAMES.get(field, field)}={_shown(field, values.get(field))!r}: {first['msg']}"
            ) from None


def default_task_queue(graph: str) -> str:
    """The task queue of a graph unless DATABUILD_TASK_QUEUE says otherwise: ``examples.demo:graph``
    gets ``databuild-examples.demo-graph``."""
    return "databuild-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", graph).strip("-")


# The password of user:password@ as SQLAlchemy parses it (anything up to the first @), and query or path
# parameters that carry a secret: ?password=... (libpq), ;token=... (Spark Connect).
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*):[^@]*@")
_SECRET_PARAM = re.compile(r"(?i)([?&;][a-z_]*(?:password|passwd|token|secret|api_?key)=)[^&;#]*")


def masked_url(url: str) -> str:
    """``url`` with its password and secret parameters replaced by ``***``, for printing and logging."""
    return _SECRET_PARAM.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url, count=1))


_SECRET_FIELDS = {
    name
    for name, field in Settings.model_fields.items()
    if SecretStr in (field.annotation, *get_args(field.annotation))
}


def _shown(field: str, value: object) -> object:
    """A setting's value as an error message may show it."""
    if field in _SECRET_FIELDS:
        return "***"
    return masked_url(value) if isinstance(value, str) else value
