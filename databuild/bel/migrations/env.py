"""Alembic environment: runs on the connection DataBuild hands over (see ``bel.migrate``)."""

from alembic import context

from databuild.bel.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` run from the command line with a URL in its config
    from sqlalchemy import create_engine

    connection = create_engine(context.config.get_main_option("sqlalchemy.url") or "").connect()

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
