"""Alembic migrations of the build event log schema."""
