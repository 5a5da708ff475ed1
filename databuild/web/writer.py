"""Who may use the dashboard's forms (want, cancel, retry, resolve, skip, taint), and the message a
form's redirect carries back.

The API's rule applies (databuild.web.auth): with ``DATABUILD_API_TOKENS`` set, a write needs one of the
tokens, and loopback is not enough (behind a reverse proxy on the same host every client is loopback);
without tokens, loopback clients only. A browser cannot send a bearer header from a form, so it presents
the token in a cookie, set by the sign-in form: HttpOnly (no script reads it) and SameSite=Strict (no
other site's page sends it). Every request that may change state, a form's or the API's, must also come
from a page of this very server when a browser sends it (``same_site``, which every route that may
change state runs first), so no other site can post one with the user's cookie or from their loopback.
"""

from urllib.parse import quote, unquote, urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from databuild.web.auth import UnauthorizedError, guard, is_loopback
from databuild.web.context import context

TOKEN_COOKIE = "databuild_token"
FLASH_COOKIE = "databuild_flash"


def signed_in(request: Request) -> str | None:
    """The name of the token the browser signed in with, if it is still one of the configured tokens."""
    presented = request.cookies.get(TOKEN_COOKIE)
    return context(request).tokens.holder(presented) if presented else None


@guard
def dashboard_writer(request: Request) -> None:
    if context(request).tokens.configured:
        if signed_in(request) is None:
            raise UnauthorizedError(
                "DATABUILD_API_TOKENS is set, so the dashboard's forms need one of its tokens: sign in at "
                "/sign-in (or use the CLI, or the API with `Authorization: Bearer <token>`)"
            )
    elif not is_loopback(request):
        raise UnauthorizedError(
            "the dashboard's forms work for loopback clients only while no DATABUILD_API_TOKENS are set; "
            "use `databuild want` or the API with a bearer token"
        )


def back_to(path: str, message: str) -> RedirectResponse:
    """See other ``path`` (a path of this server), showing ``message`` once there."""
    response = RedirectResponse(path, status_code=303)
    response.set_cookie(FLASH_COOKIE, quote(message), max_age=60, httponly=True, samesite="strict")
    return response


def flash_of(request: Request) -> str | None:
    """The message a redirect left for this page, if any."""
    message = request.cookies.get(FLASH_COOKIE)
    return None if message is None else unquote(message)


def forget_flash(response: Response) -> None:
    response.delete_cookie(FLASH_COOKIE, httponly=True, samesite="strict")


def local_path(target: str) -> str:
    """``target`` if it is a path of this server, else the dashboard's home (no open redirect)."""
    parts = urlsplit(target)
    # Browsers read "/\\host" as "//host": another site.
    if target.startswith("/") and not target.startswith("//") and "\\" not in target and not parts.netloc:
        return target
    return "/wants"
