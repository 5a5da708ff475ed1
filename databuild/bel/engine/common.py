"""What both backends' modules share: the row type and statements built once per table."""

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, Update, bindparam, update

Row = Mapping[str, Any]


@functools.cache
def updating(table: Table) -> Update:
    """UPDATE of the row of ``table`` whose primary key is bound as ``pk``, setting the columns the
    parameters name. Built once per table: SQLAlchemy builds and keys a statement made per call again
    each time, which costs more than running it on SQLite."""
    (key,) = table.primary_key.columns
    return update(table).where(key == bindparam("pk"))
