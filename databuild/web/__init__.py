"""The HTTP JSON API and the server-rendered dashboard, one FastAPI app."""

from databuild.web.app import WebContext, create_app, serve, serving, web_context

__all__ = ["WebContext", "create_app", "serve", "serving", "web_context"]
