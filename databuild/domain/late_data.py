"""Late data, as a pure rule: which partitions a newer input instance rebuilds by itself.

A job may declare ``rebuild_on_new_inputs=timedelta(days=2)``. When a newer instance of an input goes live
(a rebuild, or an external partition announced again: data that arrived late), every live partition of
that job which read an older instance of it, and whose data time is within the window of now, is rebuilt
by a fresh want (``databuild.domain.freshness``) made for that one instance: once, however often the news
is heard, with the reason recorded on the want. Older partitions only show stale (``databuild stale``), for
a ``backfill --stale-only`` to rebuild when someone chooses to."""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from databuild.durations import format_duration


@dataclass(frozen=True)
class LateReader:
    """A live instance that read an older instance of a ref which has a newer live one now."""

    ref: str
    instance_id: str
    job_label: str
    data_time: datetime  # of the wants its run built it for (the earliest)
    input_ref: str
    input_read: str  # the input instance it read
    input_live: str  # the input's live instance now


@dataclass(frozen=True)
class Rebuild:
    """A reader to rebuild: a fresh want for ``ref`` at ``data_time``, made for ``fresh_of`` (the reader
    instance and the input instance that superseded what it read: hearing the news again makes the same
    want), because of ``cause``."""

    ref: str
    data_time: datetime
    fresh_of: str
    cause: str


def late_rebuilds(
    readers: list[LateReader], windows: Mapping[str, timedelta | None], now: datetime
) -> list[Rebuild]:
    """The readers to rebuild (one each, by ref): those whose job declares a window that their data time
    is within. A reader of several superseded inputs is rebuilt once, for the first by input ref."""
    chosen: dict[str, Rebuild] = {}
    for reader in sorted(readers, key=lambda r: (r.ref, r.input_ref)):
        window = windows.get(reader.job_label)
        if window is None or reader.ref in chosen or now - reader.data_time > window:
            continue
        chosen[reader.ref] = Rebuild(
            ref=reader.ref,
            data_time=reader.data_time,
            fresh_of=_late_of(reader),
            cause=(
                f"late data: {reader.input_ref} has a newer instance {reader.input_live} than the "
                f"{reader.input_read} that {reader.instance_id} read, within {reader.job_label}'s "
                f"{format_duration(window)} rebuild_on_new_inputs window"
            ),
        )
    return list(chosen.values())


def _late_of(reader: LateReader) -> str:
    """The identity of one rebuild: the reader instance and the input instance that superseded its read
    (hashed: an external instance id can be long)."""
    pair = f"{reader.instance_id}\n{reader.input_live}".encode()
    return f"late:{hashlib.sha256(pair).hexdigest()[:32]}"
