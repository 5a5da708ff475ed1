"""Partition refs: validation."""

import re

from databuild.errors import InvalidPartitionRefError

MAX_REF_LENGTH = 512
RESERVED_SEGMENT = "_databuild"
_SEGMENT = re.compile(r"[A-Za-z0-9_.=-]+")


def validate_ref(ref: str) -> str:
    """Return ``ref`` unchanged if it follows the grammar, else raise with the reason."""
    if not isinstance(ref, str) or ref == "":
        raise InvalidPartitionRefError("partition ref is empty")
    if len(ref) > MAX_REF_LENGTH:
        raise InvalidPartitionRefError(
            f"partition ref is {len(ref)} characters long; the limit is {MAX_REF_LENGTH}"
        )
    for position, segment in enumerate(ref.split("/"), start=1):
        if segment == "":
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has an empty segment at position {position} "
                "(leading, trailing or doubled '/')"
            )
        if segment in (".", ".."):
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has a {segment!r} segment; refs may not navigate the tree"
            )
        if not _SEGMENT.fullmatch(segment):
            bad = sorted({c for c in segment if not _SEGMENT.fullmatch(c)})
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has illegal character(s) {''.join(bad)!r} in segment "
                f"{segment!r}; allowed are letters, digits and _ . = -"
            )
    if ref.split("/", 1)[0] == RESERVED_SEGMENT:
        raise InvalidPartitionRefError(
            f"partition ref {ref!r} starts with {RESERVED_SEGMENT!r}, which is reserved for DataBuild's own files"
        )
    return ref
