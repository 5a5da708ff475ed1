"""Alembic environment: runs on the connection DataBuild hands over (see ``bel.migrate``)."""

from alembic import context

from databuild.bel.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` run from the command line with a URL in its config
    from sqlalchemy import create_engine

    connection = create_engine(context.config.get_main_option("sqlalchemy.url") or "").connect()
dialect = connection.dialect.name


def include_object(obj, name, type_, reflected, compare_to):
    """Leave out of comparisons what the schema creates on other databases only (``ddl_if``)."""
    only = getattr(obj, "_ddl_if", None)
    return only is None or only.dialect is None or only.dialect == dialect


context.configure(
    connection=connection, target_metadata=metadata, render_as_batch=True, include_object=include_object
)
with context.begin_transaction():
    context.run_migrations()
