"""The dashboard's operator actions: cancel and retry a want; resolve, skip and taint a partition (a taint
shows its downstream impact first and is confirmed on a second page, as the CLI asks before it taints);
and signing in with an API token where tokens are configured.

Each is a form that posts here, behind ``dashboard_writer`` (databuild.web.writer); the SDK does the work;
the browser is sent back to the page it came from with a one-time message. Refusals and errors render
as the error page (the app's handler), and record nothing.
"""

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from databuild.errors import InvalidInputError
from databuild.web.auth import GuardedRoute, UnauthorizedError
from databuild.web.context import context
from databuild.web.pages import _page
from databuild.web.writer import TOKEN_COOKIE, back_to, dashboard_writer, local_path

router = APIRouter(include_in_schema=False, route_class=GuardedRoute)

Writer = Annotated[None, Depends(dashboard_writer)]
IMPACT_SHOWN = 200  # downstream instances listed before "+N more"


def _want_page(want_id: str) -> str:
    return f"/wants/{quote(want_id, safe='')}"


def _partition_page(ref: str) -> str:
    return f"/partitions/{quote(ref, safe='/')}"


@router.post("/wants/{want_id}/cancel")
async def cancel_want(request: Request, _writer: Writer, want_id: str) -> RedirectResponse:
    want = await context(request).db.cancel(want_id)
    if want.state.is_final:
        message = f"want {want.ref} had already ended ({want.state.value})"
    else:
        message = f"asked want {want.ref} to stop; its build stops unless another want needs it"
    return back_to(_want_page(want_id), message)


@router.post("/wants/{want_id}/retry")
async def retry_want(request: Request, _writer: Writer, want_id: str) -> RedirectResponse:
    want = await context(request).db.retry(want_id)
    return back_to(_want_page(want_id), f"want {want.ref} decides again now")


@router.post("/partitions/{ref:path}/resolve")
async def resolve_partition(request: Request, _writer: Writer, ref: str) -> RedirectResponse:
    partitions, woken = await context(request).db.resolve(ref)
    refs = ", ".join(p.ref for p in partitions)
    return back_to(_partition_page(ref), f"resolved {refs}; {woken} waiting want(s) decide again")


@router.post("/partitions/{ref:path}/skip")
async def skip_partition(request: Request, _writer: Writer, ref: str) -> RedirectResponse:
    _partition, woken = await context(request).db.skip(ref)
    return back_to(_partition_page(ref), f"{ref} retired: never built again; {woken} waiting want(s) told")


# Not under /partitions/: there a GET of a ref that ends in "/taint" is that partition's page.
@router.get("/taint/{ref:path}", response_class=HTMLResponse)
async def taint_preview(request: Request, ref: str) -> HTMLResponse:
    ctx = context(request)
    impact = await ctx.db.taint_impact(ref)  # refuses (409) a partition with no live instance
    return _page(request, "taint.html", impact=impact, shown=IMPACT_SHOWN)


@router.post("/partitions/{ref:path}/taint")
async def taint_partition(
    request: Request,
    _writer: Writer,
    ref: str,
    instance_id: Annotated[str, Form(max_length=64)],
    reason: Annotated[str, Form(max_length=2000)] = "",
    cascade: Annotated[bool, Form()] = False,
) -> RedirectResponse:
    """Taints the instance the preview showed: if another became live meanwhile, 409 and nothing."""
    result = await context(request).db.taint(
        ref, reason=reason.strip() or None, cascade=cascade, instance_id=instance_id
    )
    tainted = ", ".join(t.ref for t in result.tainted)
    left = ", ".join(t.ref for t in result.not_tainted)
    message = f"tainted {tainted}; the next want rebuilds it" + (
        f"; left alone (rebuilding): {left}" if left else ""
    )
    return back_to(_partition_page(ref), message)


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_page(request: Request, target: Annotated[str, Query(alias="next")] = "/wants") -> HTMLResponse:
    return _page(request, "sign_in.html", next=local_path(target))


@router.post("/sign-in")
def sign_in(
    request: Request,
    token: Annotated[str, Form(max_length=4096)],
    target: Annotated[str, Form(alias="next", max_length=2000)] = "/wants",
) -> RedirectResponse:
    tokens = context(request).tokens
    if not tokens.configured:
        raise InvalidInputError(
            "no DATABUILD_API_TOKENS are set: loopback clients use the forms without signing in"
        )
    holder = tokens.holder(token.strip())
    if holder is None:
        raise UnauthorizedError("that token is not one of DATABUILD_API_TOKENS")
    response = back_to(local_path(target), f"signed in as {holder}")
    secure = request.url.scheme == "https"
    response.set_cookie(TOKEN_COOKIE, token.strip(), httponly=True, samesite="strict", secure=secure)
    return response


@router.post("/sign-out")
def sign_out(request: Request) -> RedirectResponse:
    response = back_to("/wants", "signed out")
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict")
    return response
