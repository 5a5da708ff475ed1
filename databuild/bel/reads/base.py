"""What every service of the build event log stands on: the log's recorder, and its reads of the
projections, each an indexed lookup on this thread's snapshot (or a write transaction's connection)."""

from typing import Any

from sqlalchemy import Select

from databuild.bel.engine.recorder import Recorder


class ReadBase:
    """A service of one log: its reads of the projections, on the log's recorder."""

    def __init__(self, log: Recorder) -> None:
        self._log = log

    def _all(self, query: Select[Any], params: dict[str, Any] | None = None) -> list[Any]:
        return self._log.all(query, params)

    def _count(self, query: Select[Any]) -> int:
        return self._log.count(query)
