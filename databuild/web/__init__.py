"""The HTTP JSON API and the server-rendered dashboard, one FastAPI app."""

from databuild.web.app import create_app, serve, serving
from databuild.web.context import WebContext, web_context

__all__ = ["WebContext", "create_app", "serve", "serving", "web_context"]
