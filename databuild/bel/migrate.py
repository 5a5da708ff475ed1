"""Bring a BEL database to the current schema with Alembic: from empty, or from release 0.1.0 or later."""

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from databuild.bel.engine import backend_of

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
# The revision of release 0.1.0: every later revision is tested as an upgrade from it.
BASELINE = "0.1.0"
# The newest revision (a test holds it to Alembic's head). A log already at it is not handed to Alembic,
# whose import and script loading took most of a second of every command's start.
HEAD = "0016"


def alembic_config(connection: Connection | None = None, url: str | None = None) -> "Config":
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url:
        config.set_main_option("sqlalchemy.url", url)
    config.attributes["connection"] = connection
    return config


def upgrade(connection: Connection) -> None:
    """Upgrade to head inside the caller's transaction (SQLite: BEGIN IMMEDIATE serialises it)."""
    backend_of(connection).lock_migrations(connection)
    if current_revision(connection) == HEAD:
        return
    from alembic import command

    command.upgrade(alembic_config(connection), "head")


def current_revision(connection: Connection) -> str | None:
    """The revision the log's schema is at; None for an empty database."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    revision: str | None = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return revision
