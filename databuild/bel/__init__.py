"""The build event log (BEL)."""

from databuild.bel.store import BuildEventLog

__all__ = ["BuildEventLog"]
