"""Builds the FastAPI app (API under /api, pages at /) and serves it with uvicorn."""

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from databuild.errors import (
    DataBuildError,
    InvalidInputError,
    NotFoundError,
    PortInUseError,
)
from databuild.failures import FOREIGN, UNEXPECTED_STATUS, understood, unexpected
from databuild.operations.metrics import exposition, metrics_registry
from databuild.views.staleness import stale_counts
from databuild.web import actions, api, pages
from databuild.web.context import WebContext
from databuild.web.guards import BodyLimit, HostCheck
from databuild.web.paths import STATIC

log = logging.getLogger(__name__)


class UnexpectedError(DataBuildError):
    """What the caller is told of an error nobody expected (a bug): where its traceback is."""

    http_status = UNEXPECTED_STATUS


def create_app(context: WebContext) -> FastAPI:
    app = FastAPI(
        title="DataBuild",
        description="Wants, partitions, job runs and their lineage. Detail and list responses are "
        "`{data, index}`: `index` holds every related want, job run, partition and instance once.",
        version="1",
    )
    app.state.context = context
    app.include_router(api.router)
    app.include_router(pages.router)
    app.include_router(actions.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(BodyLimit)
    app.add_middleware(HostCheck, hosts=context.hosts)  # added last, so it runs first
    _add_metrics(app, context)
    _add_error_handlers(app)
    return app


def _add_metrics(app: FastAPI, context: WebContext) -> None:
    registry = metrics_registry(
        context.bel, context.settings.pools, lambda: stale_counts(context.bel, context.db.graph)
    )

    @app.get("/metrics", include_in_schema=False)
    async def _metrics(request: Request) -> Response:
        body, content_type = await context.bel.call(exposition, registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)


def _add_error_handlers(app: FastAPI) -> None:
    # Through the decorator, whose typing (unlike add_exception_handler's) takes a handler of one kind.
    app.exception_handler(DataBuildError)(_error)
    for kind in FOREIGN:
        app.exception_handler(kind)(_dependency)
    app.exception_handler(Exception)(_unexpected)
    app.exception_handler(RequestValidationError)(_invalid)
    app.exception_handler(StarletteHTTPException)(_http_error)


async def _error(request: Request, error: DataBuildError) -> Response:
    status = error.http_status
    if request.url.path.startswith("/api/"):
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        body = {"error": str(error), "type": type(error).__name__}
        return JSONResponse(body, status_code=status, headers=headers)
    return pages.error_page(request, error, status)


async def _dependency(request: Request, error: Exception) -> Response:
    """What a dependency's client raised (databuild.failures): a 503 naming it, if it is down."""
    known = understood(error)
    if known is None:
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        known = UnexpectedError(unexpected(error, "the web server's log"))
    return await _error(request, known)


async def _unexpected(request: Request, error: Exception) -> Response:
    # Starlette logs the traceback once this answer is sent.
    return await _error(request, UnexpectedError(unexpected(error, "the web server's log")))


async def _invalid(request: Request, error: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(x) for x in e.get('loc', ())[1:])}: {e.get('msg')}" for e in error.errors()
    )
    if request.url.path.startswith("/api/"):  # bad input is a 400 like every other; `detail` as FastAPI's
        body = {
            "error": problems,
            "type": "InvalidInputError",
            "detail": jsonable_encoder(error.errors()),
        }
        return JSONResponse(body, status_code=400)
    return pages.error_page(request, InvalidInputError(problems), 400)


async def _http_error(request: Request, error: StarletteHTTPException) -> Response:
    if request.url.path.startswith("/api/") or request.url.path in ("/docs", "/openapi.json"):
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)
    problem: DataBuildError = (
        NotFoundError(f"no page at {request.url.path}")
        if error.status_code == 404
        else InvalidInputError(str(error.detail))
    )
    return pages.error_page(request, problem, error.status_code)


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process that embeds the server owns Ctrl-C and SIGTERM


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` for the server to listen on. Bound here, not by uvicorn, which
    ends the whole process (SystemExit) when it cannot bind: here that is a ``PortInUseError`` naming
    the fix."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        raise PortInUseError(
            f"the web server cannot listen on {host}:{port}: {error}; check --host"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise PortInUseError(
            f"the web server cannot listen on {host}:{port}: {os.strerror(error.errno or 0)}; stop the "
            "process that holds it, or choose another port (--port; `databuild dev`: --web-port)"
        ) from None
    return sock


async def serve(app: FastAPI, host: str, port: int, started: asyncio.Event | None = None) -> None:
    """Serve until cancelled. ``started`` is set once the socket listens."""
    # No log_config: uvicorn's records go where the process sends its logging (databuild.process), not to
    # handlers of its own on the terminal.
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None, lifespan="off")
    server = _EmbeddedServer(config)
    task = asyncio.ensure_future(server.serve(sockets=[listening_socket(host, port)]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it stopped before it listened
                return
            await asyncio.sleep(0.05)
        if started is not None:
            started.set()
        await asyncio.shield(task)  # on cancel, shut down cleanly below (closing the socket)
    finally:
        server.should_exit = True
        if not task.done():
            await asyncio.wait({task}, timeout=5)


@contextlib.asynccontextmanager
async def serving(app: FastAPI, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``app`` for the duration of the block; yields its base URL. Raises at once if it cannot
    listen."""
    started = asyncio.Event()
    task = asyncio.ensure_future(serve(app, host, port, started))
    waiter = asyncio.ensure_future(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():
        task.result()  # raises why the web server could not start
    try:
        yield f"http://{host}:{port}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
